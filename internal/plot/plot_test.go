package plot

import (
	"bytes"
	"encoding/xml"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// charts are the golden cases: each renders one chart.
var charts = []struct {
	name   string
	render func() []byte
}{
	{"line-two-axes", func() []byte {
		c := []float64{1, 4, 16, 64}
		return Line([]Series{
			{Name: "output tokens/s", X: c, Y: []float64{95.5, 360, 1210, 2950}},
			{Name: "TTFT p50 (ms)", X: c, Y: []float64{21, 25, 48, 170}, Right: true},
		}, Options{Title: "serve: model @ http://127.0.0.1:8080", XLabel: "concurrency", YLabel: "tokens/s",
			Y2Label: "ms", XScale: Log2, XTicks: c})
	}},
	{"line-linear", func() []byte {
		return Line([]Series{
			{Name: "a", X: []float64{0, 1, 2, 3, 4}, Y: []float64{0.1, 0.4, 0.35, 0.8, 0.75}},
			{Name: "b <&>", X: []float64{0, 2, 4}, Y: []float64{0.2, math.NaN(), 0.5}},
		}, Options{Title: "linear", XLabel: "step", YLabel: "value", Width: 480, Height: 320})
	}},
	{"line-log10-negative", func() []byte {
		return Line([]Series{
			{Name: "loss", X: []float64{1, 10, 100, 1000, -5}, Y: []float64{-2, 3, -1, 4, 9}},
		}, Options{Title: "log10", XScale: Log10})
	}},
	{"line-empty", func() []byte {
		return Line([]Series{{Name: "nothing", X: []float64{1}, Y: nil}}, Options{Title: "empty", XLabel: "x"})
	}},
	{"bars", func() []byte {
		return Bars([]string{"pp512", "tg128@512"}, []BarSeries{
			{Name: "cpu", Values: []float64{310.25, 22.5}},
			{Name: "cuda", Values: []float64{15200, 480}},
		}, Options{Title: "bench", YLabel: "tokens/s"})
	}},
	{"bars-empty", func() []byte {
		return Bars(nil, []BarSeries{{Name: "x"}}, Options{})
	}},
}

func TestGolden(t *testing.T) {
	for _, tc := range charts {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.render()
			require.Equal(t, got, tc.render(), "output must be deterministic")
			wellFormed(t, got)
			require.NotContains(t, string(got), "NaN")
			require.NotContains(t, string(got), "Inf")
			path := filepath.Join("testdata", tc.name+".svg")
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run with -update to create")
			require.Equal(t, string(want), string(got))
		})
	}
}

// wellFormed parses the SVG as XML to the end.
func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	require.Equal(t, "svg", root)
}

func TestLineContent(t *testing.T) {
	c := []float64{1, 4, 16, 64}
	svg := string(Line([]Series{
		{Name: "tok/s", X: c, Y: []float64{10, 20, 30, 40}},
		{Name: "ttft", X: c, Y: []float64{1, 2, 3, 4}, Right: true},
	}, Options{Title: "T & co", XLabel: "concurrency", YLabel: "tokens/s", Y2Label: "ms", XScale: Log2, XTicks: c}))
	for _, want := range []string{"T &amp; co", ">concurrency<", ">tokens/s<", ">ms<", "ttft (right axis)", ">64<", ">16<", "stroke-dasharray"} {
		require.Contains(t, svg, want)
	}
	require.Equal(t, 2, strings.Count(svg, "<polyline"))
	require.Equal(t, 8, strings.Count(svg, "<circle"))
}

func TestLog2EvenSpacing(t *testing.T) {
	a := xAxis(1, 64, Options{XScale: Log2})
	a.pxLo, a.pxHi = 0, 600
	require.Equal(t, []float64{1, 2, 4, 8, 16, 32, 64}, a.ticks)
	require.InDelta(t, 0, a.pos(1), 1e-9)
	require.InDelta(t, 200, a.pos(4), 1e-9)
	require.InDelta(t, 600, a.pos(64), 1e-9)
}

func TestValueAxis(t *testing.T) {
	tests := []struct {
		lo, hi float64
		ticks  []float64
	}{
		{3, 97, []float64{0, 20, 40, 60, 80, 100}},
		{0.01, 0.042, []float64{0, 0.01, 0.02, 0.03, 0.04, 0.05}},
		{-3, 4, []float64{-4, -2, 0, 2, 4}},
		{5, 5, []float64{0, 1, 2, 3, 4, 5}},
		{0, 0, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
	}
	for _, tc := range tests {
		a := valueAxis(tc.lo, tc.hi, 5)
		require.Len(t, a.ticks, len(tc.ticks), "%v", a.ticks)
		for i := range a.ticks {
			require.InDelta(t, tc.ticks[i], a.ticks[i], 1e-9)
		}
		require.LessOrEqual(t, a.lo, math.Min(tc.lo, 0))
		require.GreaterOrEqual(t, a.hi, tc.hi)
	}
}

func TestTickLabels(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []string
	}{
		{0, 97, []string{"0", "20", "40", "60", "80", "100"}},
		{0, 0.042, []string{"0", "0.01", "0.02", "0.03", "0.04", "0.05"}},
		{0, 15200, []string{"0", "5k", "10k", "15k", "20k"}},
		{0, 12500, []string{"0", "5k", "10k", "15k"}},
		{0, 3.2e7, []string{"0", "10M", "20M", "30M", "40M"}},
		{0, 7900, []string{"0", "2000", "4000", "6000", "8000"}},
	}
	for _, tc := range tests {
		a := valueAxis(tc.lo, tc.hi, 5)
		var got []string
		for _, v := range a.ticks {
			got = append(got, a.label(v))
		}
		require.Equal(t, tc.want, got, "%v–%v", tc.lo, tc.hi)
	}
}

func TestNiceStep(t *testing.T) {
	tests := []struct{ raw, want float64 }{
		{0.7, 1}, {1, 1}, {1.2, 2}, {3, 5}, {7, 10}, {19, 20}, {0.03, 0.05}, {0, 1}, {math.NaN(), 1},
	}
	for _, tc := range tests {
		require.InDelta(t, tc.want, niceStep(tc.raw), 1e-12, "%v", tc.raw)
	}
}
