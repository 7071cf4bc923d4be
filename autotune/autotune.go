// Package autotune sweeps the arms of each kernel family on the card it runs
// on and picks the fastest arm that passes the exactness gate: every arm's
// output is compared with the CPU reference within the family's tolerance,
// and an arm that fails is recorded and never chosen.
//
// The device-facing part is the Runner interface (compile, run, time and
// check one arm); package autotune/check implements it on a CUDA device.
// The search logic here needs no GPU: its tests drive it with a fake runner
// and a fake clock.
package autotune

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/tunedb"
)

// ErrNoArm is returned when no arm of a task passed the gate.
var ErrNoArm = errors.New("autotune: no arm passed")

// Task is one thing to tune: a kernel family at one shape class.
type Task struct {
	Family string        // codegen family, e.g. "gemv"
	Class  string        // shape class, e.g. "q4_k_n6144_k4096"
	Label  string        // what the model uses it for, e.g. "qkv"; for display
	Space  codegen.Space // the family's search space
}

// ID is "family/class".
func (t Task) ID() string { return t.Family + "/" + t.Class }

// Measurement is one measured run of an arm.
type Measurement struct {
	TimeUS  float64 // median µs per launch over Samples
	Samples int     // timed samples the median is over
	RelErr  float64 // ‖out−ref‖/‖ref‖ (argmax: wrong rows)
	Tol     float64 // the family's tolerance
}

// Pass reports whether the output was within tolerance (NaN never is).
func (m Measurement) Pass() bool { return m.RelErr <= m.Tol && !math.IsNaN(m.RelErr) }

// Runner compiles, runs, times and checks arms on a device.
type Runner interface {
	// Compile prepares arm for t on the host (NVRTC). The search calls it
	// from several goroutines at once.
	Compile(t Task, arm codegen.Point) error
	// Measure runs arm for t: once on fresh inputs, checked against the CPU
	// reference, then timed over reps samples after a warm-up. The search
	// calls it from one goroutine at a time.
	Measure(t Task, arm codegen.Point, reps int) (Measurement, error)
}

// Clock is the time source of the budget; tests use a fake.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Observer is told of the search's progress (a progress bar, a log).
type Observer interface {
	// Start is called when a task begins, with the number of measurements planned.
	Start(t Task, strategy string, planned int)
	// Measured is called after each arm's measurement with the best so far (nil if none).
	Measured(t Task, a ArmResult, best *ArmResult)
	// Done is called when a task ends.
	Done(r Result)
}

// Options control a search.
type Options struct {
	Budget        time.Duration // time for all tasks of a Tune call; 0 = no limit
	ExhaustiveMax int           // spaces of at most this many arms are swept exhaustively (default 24)
	Reps          int           // timed samples of a final measurement (default 20)
	MinReps       int           // samples of the first successive-halving round (default 3)
	Eta           int           // successive halving keeps 1/Eta of the arms per round (default 3)
	Parallel      int           // concurrent compilations (default 4)
	Clock         Clock         // default: the wall clock
	Observer      Observer      // may be nil
}

func (o Options) withDefaults() Options {
	if o.ExhaustiveMax <= 0 {
		o.ExhaustiveMax = 24
	}
	if o.Reps <= 0 {
		o.Reps = 20
	}
	if o.MinReps <= 0 {
		o.MinReps = 3
	}
	o.MinReps = min(o.MinReps, o.Reps)
	if o.Eta < 2 {
		o.Eta = 3
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	return o
}

// ArmResult is what became of one arm.
type ArmResult struct {
	Arm    codegen.Point
	Name   string
	Meas   Measurement // the latest (most samples) measurement
	Round  int         // the last round the arm was measured in (0-based); -1 if never
	Failed bool        // compile/launch error or output outside tolerance
	Reason string      // why it failed
}

// Result is the outcome of tuning one task.
type Result struct {
	Task      Task
	Strategy  string      // "exhaustive" or "halving"
	Arms      []ArmResult // every arm considered, in the space's order (the default first)
	Best      *ArmResult  // the winner; nil when none passed
	RunnerUp  *ArmResult  // second in the final ranking; may be nil
	Default   *ArmResult  // the family default arm, when measured
	Tried     int         // arms measured or failed to compile
	OutOfTime bool        // the budget ended the search early
}

// Failures returns the arms that failed.
func (r Result) Failures() []ArmResult {
	var out []ArmResult
	for _, a := range r.Arms {
		if a.Failed {
			out = append(out, a)
		}
	}
	return out
}

// Entry turns r into a tunedb entry. It fails with ErrNoArm when no arm passed.
func (r Result) Entry(date, version string, driver int) (tunedb.Entry, error) {
	if r.Best == nil {
		return tunedb.Entry{}, fmt.Errorf("%w: %s (%d tried, %d failed)", ErrNoArm, r.Task.ID(), r.Tried, len(r.Failures()))
	}
	e := tunedb.Entry{Family: r.Task.Family, Class: r.Task.Class, Arm: r.Best.Arm, ArmName: r.Best.Name,
		TimeUS: r.Best.Meas.TimeUS, Tried: r.Tried, Date: date, MemraVersion: version, Driver: driver}
	timed := func(a *ArmResult) *tunedb.Timed {
		if a == nil || a.Failed || a.Round < 0 {
			return nil
		}
		return &tunedb.Timed{Arm: a.Arm, ArmName: a.Name, TimeUS: a.Meas.TimeUS}
	}
	e.RunnerUp, e.Default = timed(r.RunnerUp), timed(r.Default)
	for _, f := range r.Failures() {
		e.Failed = append(e.Failed, tunedb.Failure{ArmName: f.Name, Reason: f.Reason, RelErr: f.Meas.RelErr})
	}
	return e, nil
}
