package plot

import "math"

// Bars draws a grouped bar chart: one group per category along the x axis,
// one bar per series inside each group, heights on the left y axis (which
// starts at zero for non-negative data). opts.XScale, opts.XTicks and
// opts.Y2Label are ignored.
func Bars(categories []string, series []BarSeries, opts Options) []byte {
	f := newFrame(opts, false)
	s := header(f, opts)
	items := make([]legendItem, len(series))
	var yb bounds
	for i, sr := range series {
		items[i] = legendItem{name: sr.Name, color: color(i), bar: true}
		for j, v := range sr.Values {
			if j < len(categories) && usable(v, Linear) {
				yb.add(v)
			}
		}
	}
	if len(categories) == 0 || yb.n == 0 {
		s.line(f.left, f.top, f.left, f.bottom, "axis")
		s.line(f.left, f.bottom, f.right, f.bottom, "axis")
		s.noData(f)
		s.xLabel(f, opts.XLabel)
		s.legend(f, items)
		return s.close()
	}
	ya := valueAxis(yb.lo(), yb.hi(), 6)
	ya.pxLo, ya.pxHi = f.bottom, f.top
	s.yAxis(f, ya, false, opts.YLabel)
	zero := ya.pos(0)

	group := (f.right - f.left) / float64(len(categories))
	inner := group * 0.8
	bw := inner / float64(max(len(series), 1))
	for c, name := range categories {
		gx := f.left + float64(c)*group
		for i, sr := range series {
			if c >= len(sr.Values) || !usable(sr.Values[c], Linear) {
				continue
			}
			y := ya.pos(sr.Values[c])
			top, h := math.Min(y, zero), math.Abs(zero-y)
			s.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`+"\n",
				num(gx+group*0.1+float64(i)*bw), num(top), num(bw*0.92), num(h), color(i),
				esc(sr.Name+" "+name+": "+formatNum(sr.Values[c], decimalsFor(roundTo(sr.Values[c])))))
		}
		s.text(gx+group/2, f.bottom+19, "middle", "ticklabel", name)
	}
	s.line(f.left, zero, f.right, zero, "axis")
	s.xLabel(f, opts.XLabel)
	s.legend(f, items)
	return s.close()
}

// roundTo returns the precision step used to print a bar's value in its
// tooltip: three significant digits, at most two decimals.
func roundTo(v float64) float64 {
	av := math.Abs(v)
	switch {
	case av >= 100 || av == 0:
		return 1
	case av >= 10:
		return 0.1
	}
	return 0.01
}
