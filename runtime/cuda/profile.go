package cuda

import (
	"context"
	"fmt"
	"slices"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
)

// LaunchTime is one launch of a profiled step: its kernel, its family, the
// weight bytes its arguments name, and the median of its CUDA-event times.
type LaunchTime struct {
	Kernel      string
	Family      string
	WeightBytes int64
	Seconds     float64
}

// profiler is the state of a profiled step: reps timed repetitions of the
// launch list, each launch between two events (no graph, no PDL overlap
// across the events), and the collected times.
type profiler struct {
	reps  int
	times []LaunchTime
}

// ProfileDecode runs batch (one token per sequence, as a decode step)
// reps times as plain launches with a CUDA event before and after every
// kernel, and returns each launch's median time. The step's outputs are
// written as by StepGreedy, so the KV cache at the batch's positions holds
// what a real step would write; the sequences' lengths advance as after one
// step. Times exclude the host's launch cost (events mark the GPU's start
// and end of each kernel) but include each kernel's ramp-up, which a graph
// with PDL partly hides: the sum is an upper bound of a replayed step.
func (b *Backend) ProfileDecode(ctx context.Context, batch []runtime.SeqStep, reps int) ([]LaunchTime, error) {
	if reps <= 0 {
		return nil, fmt.Errorf("%w: profile with %d repetitions", ErrArg, reps)
	}
	for _, e := range batch {
		if len(e.Tokens) != 1 {
			return nil, fmt.Errorf("%w: profiling a decode step needs one token per sequence, sequence %d has %d", ErrBatch, e.Seq, len(e.Tokens))
		}
	}
	return b.ProfileStep(ctx, batch, reps)
}

// ProfileStep is ProfileDecode for any step: decodes and prompt chunks
// together (a serving step that admits requests) run as the prefill
// program, each of its launch sequences timed kernel by kernel. A chunk's
// keys and values are written again at each repetition, at the same
// positions.
func (b *Backend) ProfileStep(ctx context.Context, batch []runtime.SeqStep, reps int) ([]LaunchTime, error) {
	if reps <= 0 {
		return nil, fmt.Errorf("%w: profile with %d repetitions", ErrArg, reps)
	}
	b.prof = &profiler{reps: reps}
	defer func() { b.prof = nil }()
	if err := b.step(ctx, batch, stepGreedy); err != nil {
		return nil, err
	}
	return b.prof.times, nil
}

// profileLaunches runs the launch list of ps for rows T tokens over S
// sequences b.prof.reps times between events and records the medians.
func (b *Backend) profileLaunches(c *Ctx, ps *progState, T, S int) error {
	n := len(ps.p.Launches)
	evs := make([]Event, n+1)
	for i := range evs {
		e, err := c.NewEvent()
		if err != nil {
			return err
		}
		evs[i] = e
	}
	defer func() {
		for _, e := range evs {
			_ = c.DestroyEvent(e)
		}
	}()
	samples := make([][]float64, n)
	for range b.prof.reps + 1 { // the first repetition warms up
		if err := c.Record(evs[0], b.stream); err != nil {
			return err
		}
		for i := range ps.p.Launches {
			if err := b.launchPlain(c, ps, &ps.p.Launches[i], T, S); err != nil {
				return err
			}
			if err := c.Record(evs[i+1], b.stream); err != nil {
				return err
			}
		}
		if err := c.EventSync(evs[n]); err != nil {
			return err
		}
		for i := range n {
			ms, err := c.Elapsed(evs[i], evs[i+1])
			if err != nil {
				return err
			}
			samples[i] = append(samples[i], float64(ms)/1e3)
		}
	}
	b.prof.times = b.prof.times[:0]
	for i := range ps.p.Launches {
		l := &ps.p.Launches[i]
		k := ps.p.Kernels[l.KernelFor(ps.p.Dims(l, T, S).Tokens)]
		var wb int64
		for _, a := range l.Args {
			if a.Kind == codegen.ArgWeight {
				wb += ps.p.Weights[a.Index].Bytes()
			}
		}
		s := slices.Clone(samples[i][1:])
		b.prof.times = append(b.prof.times, LaunchTime{Kernel: k.Name, Family: k.Family, WeightBytes: wb, Seconds: median(s)})
	}
	return nil
}

// launchPlain is launch without programmatic dependent launch, so that an
// event between two kernels separates them.
func (b *Backend) launchPlain(c *Ctx, ps *progState, l *codegen.Launch, T, S int) error {
	pdl := b.pdl
	b.pdl = false
	defer func() { b.pdl = pdl }()
	return b.launch(c, ps, l, T, S)
}
