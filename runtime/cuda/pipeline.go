package cuda

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
)

// Pipelined decode steps (runtime.PipelinedStepper). Launch queues a
// decode step's inputs, its launches (a graph where the step has one),
// the copy of its tokens (the argmaxes, or the sampling output) into a
// page-locked slot and an event, and returns; Collect waits for the event
// of the oldest step and reads its slot. A fed step takes the tokens the
// step before it chose into its own token input on the device as its
// inputs are uploaded (the step inputs kernel reads them from the step
// before's output), before its launches: the stream runs them in that order, and the step
// before it copied its tokens to the host before this step's launches
// overwrite them. Two slots: at most two steps wait. Each slot's events
// time its step on the device (runtime.DeviceTimer): t0 before its
// inputs, t1 before its launches, ev after its results.

// pipeSlot is one launched step waiting for Collect.
type pipeSlot struct {
	n      int // entries
	mode   stepMode
	t0, t1 Event
	ev     Event
	host   unsafe.Pointer // page-locked: [n] int32 argmaxes or [n][SampleOutWords] u32
}

// pipeState is the backend's pipelined steps.
type pipeState struct {
	slots       [2]pipeSlot
	head, count int
	ready       bool // slots allocated
	// the last launched step: a fed step must be like it
	prevN    int
	prevMode stepMode
	greedy   []int32
	sampled  []runtime.Sampled
	// the device times of the collected steps (DeviceTimes), in
	// nanoseconds: atomics, as /metrics reads them from another goroutine
	timed, inputNS, stepNS atomic.Int64
}

var (
	_ runtime.PipelinedStepper = (*Backend)(nil)
	_ runtime.DeviceTimer      = (*Backend)(nil)
)

// DeviceTimes reports the device time of the collected pipelined steps;
// see runtime.DeviceTimer.
func (b *Backend) DeviceTimes() (steps int64, inputs, step time.Duration) {
	return b.pipe.timed.Load(), time.Duration(b.pipe.inputNS.Load()), time.Duration(b.pipe.stepNS.Load())
}

// slotBytes is a slot's size: MaxSeqs entries of the larger output.
func (b *Backend) slotBytes() int { return 4 * b.opts.MaxSeqs * codegen.SampleOutWords }

// Launch queues one decode step; see runtime.PipelinedStepper.
func (b *Backend) Launch(ctx context.Context, batch []runtime.SeqStep, params []*runtime.DeviceSampling, feed bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.stage != nil || b.prof != nil {
		return fmt.Errorf("%w: a pipeline stage or a profiled step", runtime.ErrNotPipelined)
	}
	if b.pipe.count == len(b.pipe.slots) {
		return fmt.Errorf("%w: %d launched steps wait for Collect", ErrBatch, b.pipe.count)
	}
	mode := stepGreedy
	if params != nil {
		mode = stepSample
		if len(params) != len(batch) {
			return fmt.Errorf("%w: %d sampling parameters for %d entries", ErrBatch, len(params), len(batch))
		}
	}
	if err := b.check(batch); err != nil {
		return err
	}
	S := len(batch)
	ps := b.decodeState(S)
	switch {
	case S > b.opts.MaxSeqs:
		return fmt.Errorf("%w: %d entries, %d sequences a launch", runtime.ErrNotPipelined, S, b.opts.MaxSeqs)
	case mode == stepGreedy && ps.p.Argmax < 0, mode == stepSample && ps.p.SampleOut < 0:
		return fmt.Errorf("%w: the decode program has no output for the step's tokens", runtime.ErrNotPipelined)
	case feed && (b.pipe.prevN != S || b.pipe.prevMode != mode):
		return fmt.Errorf("%w: a fed step of %d entries after one of %d", runtime.ErrNotPipelined, S, b.pipe.prevN)
	}
	pieces := make([]piece, S)
	for i, e := range batch {
		if len(e.Tokens) != 1 || !e.Logits || e.Pages == nil {
			return fmt.Errorf("%w: entry %d is not a paged one-token decode wanting its token", runtime.ErrNotPipelined, i)
		}
		if mode == stepSample && (params[i] == nil || !b.spack.fits(params[i])) {
			return fmt.Errorf("%w: entry %d cannot be sampled on the device", runtime.ErrNotPipelined, i)
		}
		pieces[i] = piece{entry: i, pages: e.Pages, pos: e.Pos, tokens: e.Tokens, logits: true}
	}
	rowsT, rowsS, bucket := S, S, b.bucket(S)
	if bucket > 0 {
		rowsT, rowsS = bucket, bucket
	}
	b.fillInputs(pieces, rowsT, rowsS, ps.p.FlashRows)
	if ps.p.SampleOut >= 0 {
		b.params = params
		b.pack(pieces, rowsS, mode)
		b.params = nil
	}
	slot := &b.pipe.slots[(b.pipe.head+b.pipe.count)%len(b.pipe.slots)]
	err := b.dev.Do(func(c *Ctx) error {
		if err := b.pipe.alloc(c, b.slotBytes()); err != nil {
			return err
		}
		if err := c.Record(slot.t0, b.stream); err != nil {
			return err
		}
		var fd *upFeed
		if feed {
			// the tokens the step before chose: its argmaxes, or word 0 of each sampling output row
			out, stride := ps.p.Argmax, 1
			if mode == stepSample {
				out, stride = ps.p.SampleOut, codegen.SampleOutWords
			}
			fd = &upFeed{src: b.arena + DevicePtr(ps.p.Buffers.Buffers[out].Offset), stride: stride, n: S}
		}
		if err := b.uploadInputs(c, ps, fd); err != nil {
			return err
		}
		if err := c.Record(slot.t1, b.stream); err != nil {
			return err
		}
		if err := b.launchStep(c, ps, bucket, rowsT, rowsS); err != nil {
			return err
		}
		out, n := ps.p.Argmax, 4*S
		if mode == stepSample {
			out, n = ps.p.SampleOut, 4*S*codegen.SampleOutWords
		}
		src := b.arena + DevicePtr(ps.p.Buffers.Buffers[out].Offset)
		if err := c.CopyDtoHAsync(unsafe.Slice((*byte)(slot.host), n), src, b.stream); err != nil {
			return err
		}
		return c.Record(slot.ev, b.stream)
	})
	if err != nil {
		// what was queued before the failure may still run: wait for it
		_ = b.dev.Do(func(c *Ctx) error { return c.StreamSync(b.stream) })
		return err
	}
	slot.n, slot.mode = S, mode
	b.pipe.count++
	b.pipe.prevN, b.pipe.prevMode = S, mode
	return nil
}

// Collect waits for the oldest launched step; see runtime.PipelinedStepper.
func (b *Backend) Collect(ctx context.Context) ([]int32, []runtime.Sampled, error) {
	if b.pipe.count == 0 {
		return nil, nil, fmt.Errorf("%w: no launched step to collect", ErrBatch)
	}
	slot := &b.pipe.slots[b.pipe.head]
	b.pipe.head = (b.pipe.head + 1) % len(b.pipe.slots)
	b.pipe.count--
	var inMS, stepMS float32
	if err := b.dev.Do(func(c *Ctx) error {
		if err := c.EventSync(slot.ev); err != nil {
			return err
		}
		var err error
		if inMS, err = c.Elapsed(slot.t0, slot.t1); err != nil {
			return err
		}
		stepMS, err = c.Elapsed(slot.t1, slot.ev)
		return err
	}); err != nil {
		return nil, nil, err
	}
	b.pipe.timed.Add(1)
	b.pipe.inputNS.Add(int64(float64(inMS) * 1e6))
	b.pipe.stepNS.Add(int64(float64(stepMS) * 1e6))
	V := b.info.VocabSize
	if slot.mode == stepGreedy {
		ids := unsafe.Slice((*int32)(slot.host), slot.n)
		b.pipe.greedy = b.pipe.greedy[:0]
		for _, id := range ids {
			b.pipe.greedy = append(b.pipe.greedy, b.tokenOf(id, V))
		}
		return b.pipe.greedy, nil, nil
	}
	out := unsafe.Slice((*uint32)(slot.host), slot.n*codegen.SampleOutWords)
	b.pipe.sampled = b.pipe.sampled[:0]
	for s := range slot.n {
		b.pipe.sampled = append(b.pipe.sampled, b.sampledOf(out[s*codegen.SampleOutWords:], V))
	}
	return nil, b.pipe.sampled, nil
}

// alloc makes the slots' page-locked memory and events on first use.
func (p *pipeState) alloc(c *Ctx, bytes int) error {
	if p.ready {
		return nil
	}
	for i := range p.slots {
		s := &p.slots[i]
		var err error
		if s.host == nil {
			if s.host, err = c.AllocHost(bytes); err != nil {
				s.host = nil
				return err
			}
		}
		// timing events: Collect reads the step's device time between them
		for _, ev := range []*Event{&s.t0, &s.t1, &s.ev} {
			if *ev == 0 {
				if *ev, err = c.NewEvent(); err != nil {
					*ev = 0
					return err
				}
			}
		}
	}
	p.ready = true
	return nil
}

// close releases the slots (the stream was synchronised).
func (p *pipeState) close(c *Ctx) error {
	var errs []error
	for i := range p.slots {
		s := &p.slots[i]
		if s.host != nil {
			errs = append(errs, c.FreeHost(s.host))
			s.host = nil
		}
		for _, ev := range []*Event{&s.t0, &s.t1, &s.ev} {
			if *ev != 0 {
				errs = append(errs, c.DestroyEvent(*ev))
				*ev = 0
			}
		}
	}
	p.ready, p.count = false, 0
	return errors.Join(errs...)
}
