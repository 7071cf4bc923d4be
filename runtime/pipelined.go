package runtime

import (
	"errors"
	"fmt"
	"time"
)

// Pipelined decode. Over a PipelinedStepper the loop launches decode step
// n+1 before it takes step n's tokens: the device chose them and feeds
// them to step n+1 itself, so the host's work between steps (emitting
// text, stop strings, admission, the next inputs) runs while the device
// computes instead of between its steps. A step is pipelined only where
// the host would not change what step n+1 computes:
//
//   - every running sequence decodes, none drafts, and no request waits
//     to be admitted or embedded (they change the batch: the loop then
//     collects what is in flight and steps as usual);
//   - each sequence's next token is chosen on the device from parameters
//     that do not depend on its tokens: greedy, or device sampling without
//     penalties or a mask (a seed's stream is keyed by the token's index,
//     known ahead);
//   - no sequence finishes by length or context at step n.
//
// A sequence that ends at step n (a stop token or string, a cancelled
// request) wasted its share of step n+1: its result is passed over, and
// the key and value step n+1 wrote for it lie past its cached tokens in a
// page it holds, which nobody reads before a later step rewrites it (the
// device runs steps in launch order).

// flight is a step launched on a PipelinedStepper and not yet collected.
type flight struct {
	batch   []SeqStep
	members []*sequence
	greedy  bool
	launch  time.Time
}

// launch starts running's decode step batch (members: its sequences, in
// order) as a pipelined step where it can be one, and then steps on as
// stepAhead. ok is false where the step must run as usual: nothing was
// launched.
func (e *Engine) launch(batch []SeqStep, members, running []*sequence) (next []*sequence, ok bool) {
	ps, isPipe := e.b.(PipelinedStepper)
	if !isPipe || len(batch) != len(running) {
		return nil, false
	}
	for i, s := range members {
		if s != running[i] || len(batch[i].Tokens) != 1 || !batch[i].Logits || e.speculates(s, len(running)) {
			return nil, false
		}
	}
	f := &flight{batch: batch, members: members, greedy: allPlainGreedy(batch, members)}
	var params []*DeviceSampling
	if !f.greedy {
		if params = e.aheadParams(members, 0); params == nil {
			return nil, false
		}
	}
	f.launch = time.Now()
	err := ps.Launch(e.stepCtx, batch, params, false)
	if errors.Is(err, ErrNotPipelined) {
		return nil, false
	}
	if err != nil {
		if e.stepCtx.Err() != nil {
			return running, true
		}
		for _, s := range members {
			e.retire(s, Event{Err: fmt.Errorf("%w: %w", ErrBackend, err)})
		}
		return remaining(running, members), true
	}
	e.flight = f
	return e.stepAhead(running), true
}

// aheadParams returns the device sampling of members' next tokens, the
// ahead'th after the tokens they have (0: the step about to run), in each
// sequence's own DeviceSampling (Launch reads them before it returns), or
// nil where one of them cannot be sampled on the device without the host:
// penalties (they count the tokens before it), a mask (it follows them),
// no device form at all.
func (e *Engine) aheadParams(members []*sequence, ahead uint64) []*DeviceSampling {
	if _, ok := e.b.(SamplingStepper); !ok {
		return nil
	}
	params := make([]*DeviceSampling, len(members))
	for i, s := range members {
		if !e.deviceSampling(s) || s.dev.Masked || len(s.dev.Penalties) > 0 {
			return nil
		}
		s.dev.Index += ahead
		params[i] = &s.dev
	}
	return params
}

// stepAhead launches the step after the one in flight where it may (see
// the top of this file), then collects the one in flight and takes its
// tokens. It returns the sequences that go on.
func (e *Engine) stepAhead(running []*sequence) []*sequence {
	ps := e.b.(PipelinedStepper)
	f := e.flight
	e.flight = e.lookahead(ps, f, running)
	greedy, dev, err := ps.Collect(e.stepCtx)
	e.countPipelined(f, len(f.batch))
	if err == nil && (greedy == nil && len(dev) != len(f.batch) || greedy != nil && len(greedy) != len(f.batch)) {
		err = fmt.Errorf("the backend returned %d results for %d sequences", max(len(greedy), len(dev)), len(f.batch))
	}
	if err != nil {
		if e.stepCtx.Err() != nil {
			return running // closing: the loop's exit ends them
		}
		e.settle() // the step after it is lost with it
		for _, s := range f.members {
			if !s.retired {
				e.retire(s, Event{Err: fmt.Errorf("%w: %w", ErrBackend, err)})
			}
		}
		return remaining(running, f.members)
	}
	var logits [][]float32
	if greedy == nil {
		logits = make([][]float32, len(dev))
		for i := range dev {
			logits[i] = dev[i].Logits
		}
	}
	return remaining(running, e.apply(f.batch, f.members, nil, greedy, dev, logits))
}

// lookahead launches the step after f, fed f's tokens on the device, and
// returns it; nil where it may not or the backend refused.
func (e *Engine) lookahead(ps PipelinedStepper, f *flight, running []*sequence) *flight {
	if !e.aheadAllowed(f, running) {
		return nil
	}
	batch := make([]SeqStep, len(f.batch))
	fed := make([]int32, len(f.batch)) // the backend replaces them with f's tokens
	for i, s := range f.members {
		pos := f.batch[i].Pos + 1
		if need := e.pool.PagesFor(pos+1) - len(s.pages); need > 0 {
			more, err := e.pool.Alloc(need)
			if err != nil {
				return nil // the plain step after f grows pages, preempting if it must
			}
			s.pages = append(s.pages, more...)
		}
		batch[i] = SeqStep{Seq: s.id, Pos: pos, Tokens: fed[i : i+1 : i+1], Logits: true}
		if e.share {
			batch[i].Pages = s.pages
		}
	}
	next := &flight{batch: batch, members: f.members, greedy: f.greedy}
	var params []*DeviceSampling
	if !f.greedy {
		if params = e.aheadParams(f.members, 1); params == nil {
			return nil
		}
	}
	next.launch = time.Now()
	if err := ps.Launch(e.stepCtx, batch, params, true); err != nil {
		return nil // a failing backend fails the plain step after f
	}
	e.mu.Lock()
	e.stats.FedSteps++
	e.mu.Unlock()
	return next
}

// aheadAllowed reports whether the step after f may be launched before
// f's tokens are known: running is f's sequences, all going on, none
// finishing by length or context at f, and nobody waits to be admitted or
// embedded.
func (e *Engine) aheadAllowed(f *flight, running []*sequence) bool {
	if len(running) != len(f.members) {
		return false
	}
	for i, s := range f.members {
		if s != running[i] || s.retired || s.ctx.Err() != nil || e.speculates(s, len(running)) {
			return false
		}
		if s.req.MaxTokens > 0 && s.generated+1 >= s.req.MaxTokens {
			return false
		}
		if ctx := e.info.ContextLength; ctx > 0 && len(s.req.Prompt)+s.generated+1 >= ctx {
			return false
		}
	}
	select {
	case <-e.quit:
		return false
	default:
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	waiting := len(e.queue) > 0 && len(running) < e.cfg.MaxRunning
	return !waiting && len(e.embeds.jobs) == 0
}

// settle collects the step in flight, if any, and drops its results: its
// sequences ended or the step before it failed.
func (e *Engine) settle() {
	if e.flight == nil {
		return
	}
	f := e.flight
	e.flight = nil
	_, _, _ = e.b.(PipelinedStepper).Collect(e.stepCtx)
	e.countPipelined(f, len(f.batch))
}

// countPipelined counts a collected pipelined step: the device's time is
// taken as from its launch, or the collection of the step before it if
// later, to its collection.
func (e *Engine) countPipelined(f *flight, rows int) {
	now := time.Now()
	from := f.launch
	if e.collected.After(from) {
		from = e.collected
	}
	e.collected = now
	e.countStep(0, rows, now.Sub(from))
}
