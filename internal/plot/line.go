package plot

import (
	"math"
	"slices"
	"strings"
)

// point is one drawable data point.
type point struct{ x, y float64 }

// Line draws a line chart of series: one polyline with point markers per
// series, x mapped by opts.XScale, the left y axis for series with Right
// false and, when any series has Right set, a right y axis for those. Both
// y axes start at zero for non-negative data.
func Line(series []Series, opts Options) []byte {
	pts := make([][]point, len(series))
	hasRight := false
	xlo, xhi := math.Inf(1), math.Inf(-1)
	var yl, yr bounds
	for i, sr := range series {
		n := min(len(sr.X), len(sr.Y))
		for j := range n {
			x, y := sr.X[j], sr.Y[j]
			if !usable(x, opts.XScale) || !usable(y, Linear) {
				continue
			}
			pts[i] = append(pts[i], point{x, y})
			xlo, xhi = math.Min(xlo, x), math.Max(xhi, x)
			if sr.Right {
				yr.add(y)
			} else {
				yl.add(y)
			}
		}
		if sr.Right && len(pts[i]) > 0 {
			hasRight = true
		}
	}
	f := newFrame(opts, hasRight)
	s := header(f, opts)
	items := make([]legendItem, len(series))
	for i, sr := range series {
		name := sr.Name
		if sr.Right && hasRight {
			name += " (right axis)"
		}
		items[i] = legendItem{name: name, color: color(i), dashed: sr.Right}
	}
	if math.IsInf(xlo, 1) {
		s.line(f.left, f.top, f.left, f.bottom, "axis")
		s.line(f.left, f.bottom, f.right, f.bottom, "axis")
		s.noData(f)
		s.xLabel(f, opts.XLabel)
		s.legend(f, items)
		return s.close()
	}

	xa := xAxis(xlo, xhi, opts)
	pad := (f.right - f.left) * 0.04 // keep edge markers off the y axes
	xa.pxLo, xa.pxHi = f.left+pad, f.right-pad
	xa.ticks = dedupe(xa.ticks)
	ya := valueAxis(yl.lo(), yl.hi(), 6)
	ya.pxLo, ya.pxHi = f.bottom, f.top
	s.yAxis(f, ya, false, opts.YLabel)
	var y2 axis
	if hasRight {
		y2 = valueAxis(yr.lo(), yr.hi(), 6)
		y2.pxLo, y2.pxHi = f.bottom, f.top
		s.yAxis(f, y2, true, opts.Y2Label)
	}
	s.line(f.left, f.bottom, f.right, f.bottom, "axis")
	for _, t := range xa.ticks {
		x := xa.pos(t)
		s.line(x, f.bottom, x, f.bottom+5, "tick")
		s.text(x, f.bottom+19, "middle", "ticklabel", xa.label(t))
	}
	s.xLabel(f, opts.XLabel)

	for i, sr := range series {
		if len(pts[i]) == 0 {
			continue
		}
		ax := ya
		dash := ""
		if sr.Right {
			ax, dash = y2, ` stroke-dasharray="6 4"`
		}
		var b strings.Builder
		for j, p := range pts[i] {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(num(xa.pos(p.x)) + "," + num(ax.pos(p.y)))
		}
		s.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", b.String(), color(i), dash)
		for _, p := range pts[i] {
			s.printf(`<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", num(xa.pos(p.x)), num(ax.pos(p.y)), color(i))
		}
	}
	s.legend(f, items)
	return s.close()
}

// bounds tracks the range of finite values.
type bounds struct {
	min, max float64
	n        int
}

func (b *bounds) add(v float64) {
	if b.n == 0 || v < b.min {
		b.min = v
	}
	if b.n == 0 || v > b.max {
		b.max = v
	}
	b.n++
}

func (b bounds) lo() float64 { return b.min }
func (b bounds) hi() float64 { return b.max }

// dedupe drops repeated ticks and sorts them.
func dedupe(ticks []float64) []float64 {
	t := slices.Clone(ticks)
	slices.Sort(t)
	return slices.Compact(t)
}
