package autotune

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLinesObserver: without a bar each task leaves one line when it ends,
// with no carriage return; the bar draws (and clears) with them.
func TestLinesObserver(t *testing.T) {
	task := Task{Family: "rmsnorm", Class: "d4096"}
	best := &ArmResult{Name: "t512", Meas: Measurement{TimeUS: 3.5}}
	run := func(o Observer) string {
		o.Start(task, "exhaustive", 2)
		o.Measured(task, *best, best)
		o.Measured(task, *best, best)
		o.Done(Result{Task: task, Strategy: "exhaustive", Tried: 2, Best: best})
		return o.(*Bar).w.(*bytes.Buffer).String()
	}
	lines := run(NewLines(&bytes.Buffer{}))
	require.Equal(t, "rmsnorm/d4096                            exhaustive, 2 tried, 0 failed: t512 3.50 µs\n", lines)
	bar := run(NewBar(&bytes.Buffer{}))
	require.Contains(t, bar, "\r")
	require.True(t, strings.HasSuffix(bar, lines))
}
