// Package plot draws small, dependency-free SVG charts for memra's benchmark
// reports: line charts (optionally with a second y axis) and grouped bar
// charts, with axes, ticks, labels and a legend.
//
// The output is deterministic (same input, same bytes), so reports can be
// golden-tested. Bad data never panics: points with NaN or infinite
// coordinates are skipped, series of unequal X/Y length are cut to the
// shorter, and a chart without data is drawn as empty axes saying so.
package plot

import (
	"bytes"
	"fmt"
	"math"
	"strings"
)

// Scale is how values map onto the x axis of a line chart.
type Scale int

const (
	// Linear spaces values evenly.
	Linear Scale = iota
	// Log2 spaces powers of two evenly (batch sizes, concurrency levels).
	// Non-positive x values are skipped.
	Log2
	// Log10 spaces powers of ten evenly. Non-positive x values are skipped.
	Log10
)

// Series is one line of a line chart.
type Series struct {
	// Name is shown in the legend.
	Name string
	// X and Y are the points, in order of drawing.
	X, Y []float64
	// Right plots the series against the right y axis (labelled
	// Options.Y2Label); such lines are dashed and marked in the legend.
	Right bool
}

// BarSeries is one group member of a bar chart: one value per category.
type BarSeries struct {
	// Name is shown in the legend.
	Name string
	// Values holds one bar height per category; missing or NaN values draw
	// no bar.
	Values []float64
}

// Options are the labels and geometry shared by every chart kind.
type Options struct {
	// Title is drawn centred above the plot area.
	Title string
	// XLabel, YLabel and Y2Label label the bottom, left and right axes.
	XLabel, YLabel, Y2Label string
	// Width and Height are the image size in pixels (default 720 × 440).
	Width, Height int
	// XScale is the x mapping of line charts (bar charts ignore it).
	XScale Scale
	// XTicks, when set, are the x tick positions of a line chart instead of
	// computed ones (for example the measured concurrency levels).
	XTicks []float64
}

// palette holds the series colours, chosen to stay distinct for common
// colour-vision deficiencies; series beyond its length reuse it.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// color returns the colour of series i.
func color(i int) string { return palette[i%len(palette)] }

// frame is the pixel rectangle of the plot area inside the image.
type frame struct {
	w, h                     float64 // image size
	left, right, top, bottom float64 // plot area edges
}

func newFrame(o Options, rightAxis bool) frame {
	w, h := float64(o.Width), float64(o.Height)
	if w <= 0 {
		w = 720
	}
	if h <= 0 {
		h = 440
	}
	f := frame{w: w, h: h, left: 78, top: 64, bottom: h - 56, right: w - 24}
	if rightAxis {
		f.right = w - 78
	}
	// Keep a minimal plot area on absurdly small images.
	if f.right-f.left < 40 {
		f.right = f.left + 40
	}
	if f.bottom-f.top < 40 {
		f.bottom = f.top + 40
	}
	return f
}

// axis maps data values to pixels along one direction.
type axis struct {
	lo, hi   float64 // data range after nicening
	ticks    []float64
	scale    Scale
	pxLo     float64 // pixel of lo
	pxHi     float64 // pixel of hi
	decimals int     // tick label precision, in units of div
	div      float64 // tick labels show value/div (1, 1e3 or 1e6) …
	suffix   string  // … followed by suffix ("", "k" or "M")
}

// pos maps v to a pixel coordinate.
func (a axis) pos(v float64) float64 {
	lo, hi, x := a.lo, a.hi, v
	if a.scale != Linear {
		lo, hi, x = a.fwd(lo), a.fwd(hi), a.fwd(v)
	}
	if hi == lo {
		return (a.pxLo + a.pxHi) / 2
	}
	return a.pxLo + (x-lo)/(hi-lo)*(a.pxHi-a.pxLo)
}

func (a axis) fwd(v float64) float64 {
	if a.scale == Log10 {
		return math.Log10(v)
	}
	return math.Log2(v)
}

// label formats a tick value.
func (a axis) label(v float64) string {
	if v == 0 {
		return "0"
	}
	if a.div > 1 {
		return fmt.Sprintf("%.*f", a.decimals, v/a.div) + a.suffix
	}
	return fmt.Sprintf("%.*f", a.decimals, v)
}

// valueAxis builds a linear axis over [lo, hi] with about n nice ticks;
// the range always includes zero when every value is non-negative, so bar
// heights and rates read true.
func valueAxis(lo, hi float64, n int) axis {
	if lo > 0 {
		lo = 0
	}
	if hi < 0 {
		hi = 0
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / float64(n))
	a := axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step}
	for v := a.lo; v <= a.hi+step/2; v += step {
		a.ticks = append(a.ticks, cleanZero(v))
	}
	a.decimals = decimalsFor(step)
	if m := math.Max(math.Abs(a.lo), math.Abs(a.hi)); m >= 1e4 {
		a.div, a.suffix = 1e3, "k"
		if m >= 1e7 {
			a.div, a.suffix = 1e6, "M"
		}
		a.decimals = decimalsFor(step / a.div)
	}
	return a
}

// xAxis builds the x axis of a line chart.
func xAxis(lo, hi float64, o Options) axis {
	if len(o.XTicks) > 0 {
		for _, t := range o.XTicks {
			if usable(t, o.XScale) {
				lo, hi = math.Min(lo, t), math.Max(hi, t)
			}
		}
	}
	if o.XScale == Linear {
		a := axis{scale: Linear}
		if hi == lo {
			lo, hi = lo-1, hi+1
		}
		step := niceStep((hi - lo) / 6)
		a.lo, a.hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
		a.decimals = decimalsFor(step)
		if len(o.XTicks) == 0 {
			for v := a.lo; v <= a.hi+step/2; v += step {
				a.ticks = append(a.ticks, cleanZero(v))
			}
		}
		a.ticks = appendUsable(a.ticks, o.XTicks, o.XScale)
		return a
	}
	base := 2.0
	if o.XScale == Log10 {
		base = 10
	}
	a := axis{scale: o.XScale}
	a.lo = math.Pow(base, math.Floor(math.Log(lo)/math.Log(base)))
	a.hi = math.Pow(base, math.Ceil(math.Log(hi)/math.Log(base)))
	if a.hi == a.lo {
		a.hi = a.lo * base
	}
	if len(o.XTicks) == 0 {
		for v := a.lo; v <= a.hi*1.0001; v *= base {
			a.ticks = append(a.ticks, v)
		}
	}
	a.ticks = appendUsable(a.ticks, o.XTicks, o.XScale)
	a.decimals = 0
	for _, t := range a.ticks {
		a.decimals = max(a.decimals, decimalsFor(t))
	}
	return a
}

func appendUsable(dst, ticks []float64, s Scale) []float64 {
	for _, t := range ticks {
		if usable(t, s) {
			dst = append(dst, t)
		}
	}
	return dst
}

// usable reports whether v can be placed on an axis of scale s.
func usable(v float64, s Scale) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	return s == Linear || v > 0
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// decimalsFor is the number of decimals that shows multiples of step.
func decimalsFor(step float64) int {
	if step <= 0 || math.IsNaN(step) || math.IsInf(step, 0) {
		return 0
	}
	for d := 0; d < 6; d++ {
		s := step * math.Pow(10, float64(d))
		if math.Abs(s-math.Round(s)) < 1e-6*math.Max(1, s) {
			return d
		}
	}
	return 6
}

// cleanZero turns -0 and floating-point dust next to zero into 0.
func cleanZero(v float64) float64 {
	if math.Abs(v) < 1e-12 {
		return 0
	}
	return v
}

// formatNum formats v with d decimals.
func formatNum(v float64, d int) string { return fmt.Sprintf("%.*f", d, v) }

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// svg accumulates the document.
type svg struct{ b bytes.Buffer }

func (s *svg) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

// text writes one text element; anchor is start, middle or end.
func (s *svg) text(x, y float64, anchor, class, body string) {
	s.printf(`<text x="%s" y="%s" text-anchor="%s" class="%s">%s</text>`+"\n", num(x), num(y), anchor, class, esc(body))
}

// line writes one line element.
func (s *svg) line(x1, y1, x2, y2 float64, class string) {
	s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s"/>`+"\n", num(x1), num(y1), num(x2), num(y2), class)
}

// num formats a pixel coordinate with at most two decimals.
func num(v float64) string { return trimZeros(fmt.Sprintf("%.2f", cleanZero(v))) }

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

// esc escapes text for use in SVG content and attributes.
func esc(s string) string { return escaper.Replace(strings.ToValidUTF8(s, "\uFFFD")) }

const style = `<style>
text { font-family: sans-serif; font-size: 12px; fill: #222; }
.title { font-size: 15px; font-weight: bold; }
.label { font-size: 13px; }
.axis { stroke: #222; stroke-width: 1; }
.grid { stroke: #ddd; stroke-width: 1; }
.tick { stroke: #222; stroke-width: 1; }
.note { fill: #888; }
</style>
`

// header opens the document and draws the background and title.
func header(f frame, o Options) *svg {
	s := &svg{}
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s">`+"\n",
		num(f.w), num(f.h), num(f.w), num(f.h))
	s.b.WriteString(style)
	s.printf(`<rect x="0" y="0" width="%s" height="%s" fill="#fff"/>`+"\n", num(f.w), num(f.h))
	if o.Title != "" {
		s.text(f.w/2, 22, "middle", "title", o.Title)
	}
	return s
}

// legendItem is one legend entry.
type legendItem struct {
	name   string
	color  string
	dashed bool
	bar    bool
}

// legend draws the entries in one row under the title, wrapping when the
// row is full.
func (s *svg) legend(f frame, items []legendItem) {
	x, y := f.left, 44.0
	for _, it := range items {
		w := 34 + 7*float64(len([]rune(it.name)))
		if x+w > f.w-8 && x > f.left {
			x, y = f.left, y+16
		}
		if it.bar {
			s.printf(`<rect x="%s" y="%s" width="18" height="10" fill="%s"/>`+"\n", num(x), num(y-9), it.color)
		} else {
			dash := ""
			if it.dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n",
				num(x), num(y-4), num(x+18), num(y-4), it.color, dash)
		}
		s.text(x+24, y, "start", "legend", it.name)
		x += w
	}
}

// yAxis draws a value axis with grid lines (left) or ticks only (right).
func (s *svg) yAxis(f frame, a axis, right bool, label string) {
	x, dir, anchor := f.left, -1.0, "end"
	if right {
		x, dir, anchor = f.right, 1, "start"
	}
	s.line(x, f.top, x, f.bottom, "axis")
	for _, t := range a.ticks {
		y := a.pos(t)
		if !right {
			s.line(f.left, y, f.right, y, "grid")
		}
		s.line(x, y, x+dir*5, y, "tick")
		s.text(x+dir*8, y+4, anchor, "ticklabel", a.label(t))
	}
	if label != "" {
		lx := f.left - 62
		if right {
			lx = f.right + 62
		}
		cy := (f.top + f.bottom) / 2
		s.printf(`<text x="%s" y="%s" text-anchor="middle" class="label" transform="rotate(-90 %s %s)">%s</text>`+"\n",
			num(lx), num(cy), num(lx), num(cy), esc(label))
	}
}

// xLabel draws the x axis title.
func (s *svg) xLabel(f frame, label string) {
	if label != "" {
		s.text((f.left+f.right)/2, f.h-14, "middle", "label", label)
	}
}

// noData writes the "no data" note in the middle of the plot area.
func (s *svg) noData(f frame) {
	s.text((f.left+f.right)/2, (f.top+f.bottom)/2, "middle", "note", "no data")
}

func (s *svg) close() []byte {
	s.b.WriteString("</svg>\n")
	return s.b.Bytes()
}
