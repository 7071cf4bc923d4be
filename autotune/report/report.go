// Package report writes an autotune run as a folder a person can read: one
// SVG bar chart per task (time per arm, failed arms marked, the winner
// highlighted) and a Markdown summary, report.md.
package report

import (
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/memra-ai/memra/autotune"
)

// ErrReport wraps failures to write a report.
var ErrReport = errors.New("report: cannot write")

// Meta describes the run.
type Meta struct {
	Device  string // device key
	Card    string // the card's name and driver, free text
	Date    string
	Version string
	Budget  string
	Model   string // model or shape preset
}

const (
	barH     = 16  // bar height
	gap      = 4   // space between bars
	labelW   = 170 // arm name column
	chartW   = 420 // bar area
	valueW   = 150 // value column
	top      = 48  // title area
	bottom   = 16
	maxBars  = 60 // more arms are summarised in one line
	fontSize = 11
)

// SVG writes the chart of one task: arms sorted fastest first (failed arms
// last, marked ✗ with their reason), bars scaled to the slowest passing arm,
// the winner in green, the default arm outlined.
func SVG(w io.Writer, r autotune.Result) error {
	arms := sortedArms(r)
	shown := arms
	if len(shown) > maxBars {
		shown = shown[:maxBars]
	}
	maxT := 0.0
	for _, a := range arms {
		if !a.Failed && a.Round >= 0 {
			maxT = math.Max(maxT, a.Meas.TimeUS)
		}
	}
	if maxT == 0 {
		maxT = 1
	}
	width := labelW + chartW + valueW
	height := top + len(shown)*(barH+gap) + bottom
	if len(arms) > len(shown) {
		height += barH + gap
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"monospace\" font-size=\"%d\">\n",
		width, height, width, height, fontSize)
	fmt.Fprintf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height)
	fmt.Fprintf(&b, "<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", esc(title(r)))
	fmt.Fprintf(&b, "<text x=\"8\" y=\"36\" fill=\"#555555\">%s</text>\n", esc(subtitle(r)))
	y := top
	for _, a := range shown {
		ty := y + barH - 4
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", labelW-6, ty, esc(a.Name))
		switch {
		case a.Failed:
			fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f3d0d0\" stroke=\"#b00020\"/>\n", labelW, y, chartW, barH)
			fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" fill=\"#b00020\">✗ %s</text>\n", labelW+4, ty, esc(clip(a.Reason, 56)))
		case a.Round < 0:
			fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" fill=\"#999999\">not measured</text>\n", labelW+4, ty)
		default:
			bw := int(math.Round(float64(chartW) * a.Meas.TimeUS / maxT))
			fill := "#8aa8d0"
			if r.Best != nil && a.Name == r.Best.Name {
				fill = "#2e9e4f"
			}
			stroke := ""
			if r.Default != nil && a.Name == r.Default.Name {
				stroke = " stroke=\"#000000\" stroke-width=\"1.5\""
			}
			fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"%s/>\n", labelW, y, max(bw, 1), barH, fill, stroke)
			fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\">%s</text>\n", labelW+chartW+6, ty, esc(value(r, a)))
		}
		y += barH + gap
	}
	if len(arms) > len(shown) {
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" fill=\"#555555\">… %d more arms (see report.md)</text>\n", labelW, y+barH-4, len(arms)-len(shown))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// sortedArms orders the arms: measured passing by time, then failed, then
// never measured; ties by name.
func sortedArms(r autotune.Result) []autotune.ArmResult {
	arms := append([]autotune.ArmResult(nil), r.Arms...)
	group := func(a autotune.ArmResult) int {
		switch {
		case a.Failed:
			return 1
		case a.Round < 0:
			return 2
		}
		return 0
	}
	sort.SliceStable(arms, func(i, j int) bool {
		gi, gj := group(arms[i]), group(arms[j])
		if gi != gj {
			return gi < gj
		}
		if gi == 0 && arms[i].Meas.TimeUS != arms[j].Meas.TimeUS {
			return arms[i].Meas.TimeUS < arms[j].Meas.TimeUS
		}
		return arms[i].Name < arms[j].Name
	})
	return arms
}

func title(r autotune.Result) string {
	t := r.Task.ID()
	if r.Task.Label != "" {
		t += " (" + r.Task.Label + ")"
	}
	return t
}

func subtitle(r autotune.Result) string {
	s := fmt.Sprintf("%s, %d arms tried, %d failed", r.Strategy, r.Tried, len(r.Failures()))
	if r.Best != nil {
		s += fmt.Sprintf("; best %s %.2f µs", r.Best.Name, r.Best.Meas.TimeUS)
	}
	if r.OutOfTime {
		s += "; budget ran out"
	}
	return s
}

func value(r autotune.Result, a autotune.ArmResult) string {
	v := fmt.Sprintf("%.2f µs", a.Meas.TimeUS)
	if r.Best != nil && a.Name != r.Best.Name && r.Best.Meas.TimeUS > 0 {
		v += fmt.Sprintf(" (%+.0f%%)", 100*(a.Meas.TimeUS/r.Best.Meas.TimeUS-1))
	}
	return v
}

func esc(s string) string { return html.EscapeString(s) }

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// FileName is the SVG file name of a task: its ID with '/' as '__'.
func FileName(t autotune.Task) string { return strings.ReplaceAll(t.ID(), "/", "__") + ".svg" }

// Markdown writes the summary: the run's conditions, one table row per
// task (winner, its time, the runner-up's, the default's and the speed-up
// over it, arms tried and failed, the chart), then the failed arms.
func Markdown(w io.Writer, results []autotune.Result, m Meta) error {
	var b strings.Builder
	b.WriteString("# memra autotune report\n\n")
	for _, kv := range [][2]string{{"device", m.Device}, {"card", m.Card}, {"model", m.Model}, {"date", m.Date}, {"memra", m.Version}, {"budget", m.Budget}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "- %s: %s\n", kv[0], kv[1])
		}
	}
	b.WriteString("\nTimes are medians of CUDA-event samples over rotating inputs larger than L2, µs per launch. " +
		"Every arm's output was checked against the CPU reference; failed arms are never chosen.\n\n")
	b.WriteString("| family | class | use | strategy | best arm | µs | runner-up | µs | default µs | vs default | tried | failed | chart |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		best, bt, ru, rt, dt, vs := "—", "—", "—", "—", "—", "—"
		if r.Best != nil {
			best, bt = "`"+r.Best.Name+"`", fmt.Sprintf("%.2f", r.Best.Meas.TimeUS)
		}
		if r.RunnerUp != nil {
			ru, rt = "`"+r.RunnerUp.Name+"`", fmt.Sprintf("%.2f", r.RunnerUp.Meas.TimeUS)
		}
		if r.Default != nil && !r.Default.Failed {
			dt = fmt.Sprintf("%.2f", r.Default.Meas.TimeUS)
			if r.Best != nil && r.Best.Meas.TimeUS > 0 {
				vs = fmt.Sprintf("%.2f×", r.Default.Meas.TimeUS/r.Best.Meas.TimeUS)
			}
		}
		strategy := r.Strategy
		if r.OutOfTime {
			strategy += " (out of time)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | [svg](%s) |\n",
			r.Task.Family, r.Task.Class, r.Task.Label, strategy, best, bt, ru, rt, dt, vs, r.Tried, len(r.Failures()), FileName(r.Task))
	}
	failed := false
	for _, r := range results {
		for _, a := range r.Failures() {
			if !failed {
				b.WriteString("\n## Failed arms\n\n| task | arm | reason |\n|---|---|---|\n")
				failed = true
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s |\n", r.Task.ID(), a.Name, strings.ReplaceAll(clip(a.Reason, 200), "|", "\\|"))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Write writes report.md and one SVG per result into dir.
func Write(dir string, results []autotune.Result, m Meta) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrReport, err)
	}
	write := func(name string, f func(io.Writer) error) error {
		out, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReport, err)
		}
		if err := f(out); err != nil {
			out.Close()
			return fmt.Errorf("%w: %s: %w", ErrReport, name, err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("%w: %w", ErrReport, err)
		}
		return nil
	}
	for _, r := range results {
		if err := write(FileName(r.Task), func(w io.Writer) error { return SVG(w, r) }); err != nil {
			return err
		}
	}
	return write("report.md", func(w io.Writer) error { return Markdown(w, results, m) })
}
