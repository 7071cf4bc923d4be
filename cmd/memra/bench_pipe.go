package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/memra-ai/memra/runtime"
)

// errNoPipelined refuses --pipelined on a backend that cannot launch a
// step before the previous one's tokens are read.
var errNoPipelined = errors.New("bench: --pipelined needs a backend with pipelined decode over a page pool (CUDA)")

// benchPages returns n page tables of positions positions from the
// backend's pool, and their release, for a --pipelined test (a pipelined
// step takes its sequences' pages from the caller); without pipelined, n
// nil tables: the backend keeps its own.
func benchPages(b runtime.Backend, n, positions int, pipelined bool) ([][]int32, func(), error) {
	pages := make([][]int32, n)
	if !pipelined {
		return pages, func() {}, nil
	}
	pb, ok := b.(runtime.PagedBackend)
	if _, pipe := b.(runtime.PipelinedStepper); !ok || !pipe || pb.KVPool() == nil {
		return nil, nil, errNoPipelined
	}
	pool := pb.KVPool()
	release := func() {
		for _, p := range pages {
			if p != nil {
				pool.Release(p)
			}
		}
	}
	for i := range pages {
		p, err := pool.Alloc(pool.PagesFor(positions))
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("bench: pages for %d sequences of %d positions: %w", n, positions, err)
		}
		pages[i] = p
	}
	return pages, release, nil
}

// decodeSteps runs gen single-token steps of seqs (pages: their tables,
// nil for the backend's own) from position pos, next their first tokens.
// Plain, one step after another, each reading its tokens before the next
// (stepNext). Pipelined, as the server's engine decodes: each step is
// launched before the step before it is collected, its tokens fed on the
// device (runtime.PipelinedStepper), so the host's turn between steps is
// off the device's path.
func decodeSteps(ctx context.Context, b runtime.Backend, seqs []runtime.SeqID, pages [][]int32, pos int, next []int32, gen int, pipelined bool) error {
	batch := make([]runtime.SeqStep, len(seqs))
	fill := func(g int) {
		for i, s := range seqs {
			batch[i] = runtime.SeqStep{Seq: s, Pos: pos + g, Tokens: next[i : i+1 : i+1], Logits: true, Pages: pages[i]}
		}
	}
	if !pipelined {
		for g := range gen {
			fill(g)
			if err := stepNext(ctx, b, batch, next); err != nil {
				return fmt.Errorf("generation step %d: %w", g, err)
			}
		}
		return nil
	}
	ps, ok := b.(runtime.PipelinedStepper)
	if !ok {
		return errNoPipelined
	}
	pending := 0 // launched, not yet collected
	var last []int32
	drain := func() {
		for ; pending > 0; pending-- {
			_, _, _ = ps.Collect(ctx)
		}
	}
	collect := func(g int) error {
		ids, _, err := ps.Collect(ctx)
		pending--
		if err != nil {
			drain()
			return fmt.Errorf("generation step %d: %w", g, err)
		}
		last = ids
		return nil
	}
	for g := range gen {
		fill(g)
		if err := ps.Launch(ctx, batch, nil, g > 0); err != nil {
			drain()
			return fmt.Errorf("generation step %d: %w", g, err)
		}
		// at most two launched steps wait: collect the older one
		if pending++; pending == 2 {
			if err := collect(g - 1); err != nil {
				return err
			}
		}
	}
	for pending > 0 {
		if err := collect(gen - pending); err != nil {
			return err
		}
	}
	copy(next, last)
	return nil
}

// deviceTimes is the device time of a --pipelined bench's steps, read
// before its timed tests (runtime.DeviceTimer), or nil.
type deviceTimes struct {
	dt          runtime.DeviceTimer
	n           int64
	input, step time.Duration
}

// deviceTimesOf starts counting b's device times for a pipelined bench;
// nil where it is not one or b does not time its steps.
func deviceTimesOf(b runtime.Backend, pipelined bool) *deviceTimes {
	dt, ok := b.(runtime.DeviceTimer)
	if !pipelined || !ok {
		return nil
	}
	n, in, st := dt.DeviceTimes()
	return &deviceTimes{dt: dt, n: n, input: in, step: st}
}

// report writes the device's mean time of a step since deviceTimesOf, its
// inputs and its launches apart: against the tg rate's seconds a step, the
// difference is the device waiting between steps.
func (d *deviceTimes) report(w io.Writer) {
	if d == nil {
		return
	}
	n, in, st := d.dt.DeviceTimes()
	if n -= d.n; n <= 0 {
		return
	}
	in, st = in-d.input, st-d.step
	fmt.Fprintf(w, "device: %d pipelined steps timed, %.1f µs a step (inputs %.1f µs, launches and results %.1f µs)\n",
		n, float64((in+st).Nanoseconds())/1000/float64(n), float64(in.Nanoseconds())/1000/float64(n), float64(st.Nanoseconds())/1000/float64(n))
}
