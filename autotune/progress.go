package autotune

import (
	"fmt"
	"io"

	"github.com/schollz/progressbar/v3"
)

// Bar is an Observer drawing one progress bar per task with the best arm so
// far in its description.
type Bar struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	lines bool // no bar: each task's line alone (a log)
}

// NewBar returns a Bar writing to w (usually stderr).
func NewBar(w io.Writer) *Bar { return &Bar{w: w} }

// NewLines returns an Observer that writes each task's line to w when it
// ends and draws no bar (a log file: no carriage returns).
func NewLines(w io.Writer) *Bar { return &Bar{w: w, lines: true} }

// Start implements Observer.
func (b *Bar) Start(t Task, strategy string, planned int) {
	if b.lines {
		return
	}
	b.bar = progressbar.NewOptions(planned,
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(fmt.Sprintf("%-40s %s", t.ID(), strategy)),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(24),
		progressbar.OptionClearOnFinish(),
	)
}

// Measured implements Observer.
func (b *Bar) Measured(t Task, a ArmResult, best *ArmResult) {
	if b.bar == nil {
		return
	}
	desc := fmt.Sprintf("%-40s", t.ID())
	if best != nil {
		desc += fmt.Sprintf(" best %s %.2f µs", best.Name, best.Meas.TimeUS)
	}
	b.bar.Describe(desc)
	_ = b.bar.Add(1)
}

// Done implements Observer: it clears the bar and prints the task's line.
func (b *Bar) Done(r Result) {
	if b.bar != nil {
		_ = b.bar.Finish()
	}
	line := fmt.Sprintf("%-40s %s, %d tried, %d failed", r.Task.ID(), r.Strategy, r.Tried, len(r.Failures()))
	if r.Best != nil {
		line += fmt.Sprintf(": %s %.2f µs", r.Best.Name, r.Best.Meas.TimeUS)
		if r.Default != nil && !r.Default.Failed && r.Default.Meas.TimeUS > 0 {
			line += fmt.Sprintf(" (default %s %.2f µs)", r.Default.Name, r.Default.Meas.TimeUS)
		}
	} else {
		line += ": no arm passed"
	}
	if r.OutOfTime {
		line += " [budget ran out]"
	}
	fmt.Fprintln(b.w, line)
}
