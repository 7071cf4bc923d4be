package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/memra-ai/memra/runtime/kv"
)

// sequence is one request inside the scheduler. Only the loop goroutine
// touches it after Submit.
type sequence struct {
	id       SeqID
	ctx      context.Context
	req      Request
	out      chan Event
	buffer   int // events the reader may fall behind before ErrSlowConsumer
	sampler  *Sampler
	dev      DeviceSampling // the sampler's device form, refilled each step
	text     *textStream
	stopWake func() bool

	all       []int32 // prompt then generated tokens that will be fed
	cached    int     // tokens of all already in the backend's KV cache
	generated int
	admitted  bool // holds pages and may hold a backend sequence (Free on retire)

	pages     []int32  // page table: page i holds positions [i·P, (i+1)·P)
	root      kv.Key   // the prefix-cache scope's root
	keys      []kv.Key // keys of all's full pages, as far as computed (nil: no prefix cache)
	published int      // leading pages published to the prefix cache
	hit       int      // prompt tokens the first admission took from the cache
	started   bool     // admitted once (a preempted sequence is requeued)
	retired   bool     // its last event was sent (retire)

	spec specState // speculative decoding (Engine.spec)
}

// prefilled reports whether the whole prompt and every token generated
// before a preemption is in the KV cache: the sequence decodes.
func (s *sequence) prefilled() bool { return s.cached >= len(s.all)-1 && s.cached >= len(s.req.Prompt) }

func (s *sequence) usage() Usage {
	return Usage{PromptTokens: len(s.req.Prompt), CompletionTokens: s.generated, CachedTokens: s.hit}
}

// loop is the scheduler: one backend step per iteration.
func (e *Engine) loop() {
	defer close(e.done)
	var running []*sequence
	defer func() {
		if v := recover(); v != nil {
			// a bug: let it end the process with its trace. The clean-up
			// below would take e.mu, which the panicking code may hold,
			// and leave the server hung instead
			panic(v)
		}
		e.settle()
		e.mu.Lock()
		queued := e.queue
		e.queue = nil
		e.mu.Unlock()
		for _, s := range append(running, queued...) {
			e.retire(s, Event{Err: ErrClosed})
		}
		e.count(nil)
	}()
	for {
		select {
		case <-e.quit:
			return
		default:
		}
		running = e.admit(running)
		running = e.dropCancelled(running)
		if len(running) == 0 {
			e.settle() // a pipelined step of sequences that all ended
		}
		if e.flight == nil {
			e.embedStep(len(running)) // embedding requests (embed_engine.go)
		}
		if len(running) == 0 {
			e.count(running)
			select {
			case <-e.quit:
				return
			case <-e.wake:
			}
			continue
		}
		running = e.step(running)
		e.count(running)
	}
}

// admit moves queued requests into running, in order, while there is a
// running slot and the pool has the pages of their prompts (what the
// prefix cache does not hold), and drops queued requests whose client went
// away. A request whose next prompt page another running sequence is about
// to write waits for it (it then finds it in the cache).
func (e *Engine) admit(running []*sequence) []*sequence {
	e.mu.Lock()
	var gone []*sequence
	keep := e.queue[:0]
	full := false
	for _, s := range e.queue {
		switch {
		case s.ctx.Err() != nil:
			gone = append(gone, s)
		case full || len(running) >= e.cfg.MaxRunning:
			keep = append(keep, s)
		default:
			switch e.takePages(s, len(running)) {
			case admitted:
				running = append(running, s)
			case waiting:
				keep = append(keep, s)
			case noPages:
				keep = append(keep, s)
				full = true // first come, first served: nothing overtakes it
			}
		}
	}
	clear(e.queue[len(keep):])
	e.queue = keep
	e.running = len(running)
	e.stats.Running = len(running)
	e.mu.Unlock()
	for _, s := range gone {
		e.retire(s, Event{Err: s.ctx.Err()})
	}
	return running
}

// dropCancelled retires running sequences whose context ended.
func (e *Engine) dropCancelled(running []*sequence) []*sequence {
	keep := running[:0]
	for _, s := range running {
		if err := s.ctx.Err(); err != nil {
			e.retire(s, Event{Err: err})
			continue
		}
		keep = append(keep, s)
	}
	clear(running[len(keep):])
	return keep
}

// step builds one batch from running, runs it, samples and emits, and
// returns the sequences that go on.
func (e *Engine) step(running []*sequence) []*sequence {
	if e.flight != nil {
		return e.stepAhead(running) // pipelined.go
	}
	start := time.Now()
	e.draft(running)
	running = e.growPages(running)
	if len(running) == 0 {
		return running
	}
	batch := make([]SeqStep, 0, len(running))
	members := make([]*sequence, 0, len(running))
	budget := e.cfg.MaxBatchTokens
	add := func(s *sequence, n int) {
		st := SeqStep{
			Seq:    s.id,
			Pos:    s.cached,
			Tokens: s.all[s.cached : s.cached+n],
			Logits: s.cached+n == len(s.all),
		}
		if e.share {
			st.Pages = s.pages
		}
		batch = append(batch, st)
		members = append(members, s)
		budget -= n
	}
	// Decodes first: every prefilled sequence feeds its one new token, and
	// a speculating one its drafts after it, an entry each.
	groups := map[int]int{} // first entry of a speculating sequence → its entries
	for _, s := range running {
		if s.prefilled() {
			first := len(batch)
			add(s, 1)
			for j := range s.spec.drafts {
				batch = append(batch, SeqStep{Seq: DraftSeq(s.id, j), Pos: s.cached + 1 + j, Tokens: s.spec.drafts[j : j+1],
					Logits: true, Pages: s.pages})
				members = append(members, s)
				budget--
			}
			if len(s.spec.drafts) > 0 {
				groups[first] = 1 + len(s.spec.drafts)
			}
		}
	}
	// Then prompt chunks, in admission order, within the budget.
	var prompt int64
	for _, s := range running {
		if s.prefilled() || budget <= 0 {
			continue
		}
		if n := promptChunk(len(s.all)-s.cached, e.cfg.PrefillChunk, budget); n > 0 {
			prompt += int64(n)
			add(s, n)
		}
	}
	if prompt == 0 {
		if ahead, ok := e.launch(batch, members, running); ok { // pipelined.go
			return ahead
		}
	}
	var logits [][]float32
	var greedy []int32
	var dev []Sampled // tokens chosen on the device, where an entry has no Logits
	var err error
	t0 := time.Now()
	if gs, ok := e.b.(GreedyStepper); ok && allPlainGreedy(batch, members) {
		greedy, err = gs.StepGreedy(e.stepCtx, batch)
		if err == nil && len(greedy) != len(batch) {
			err = fmt.Errorf("backend returned %d greedy tokens for %d sequences", len(greedy), len(batch))
		}
	} else if ss, ok := e.b.(SamplingStepper); ok {
		dev, err = ss.StepSample(e.stepCtx, batch, e.deviceParams(batch, members))
		if err == nil && len(dev) != len(batch) {
			err = fmt.Errorf("backend returned %d sampled tokens for %d sequences", len(dev), len(batch))
		}
		logits = make([][]float32, len(dev))
		for i := range dev {
			logits[i] = dev[i].Logits // the entries left to the host's sampler
		}
	} else {
		logits, err = e.b.Step(e.stepCtx, batch)
		if err == nil && len(logits) != len(batch) {
			err = fmt.Errorf("backend returned %d logits for %d sequences", len(logits), len(batch))
		}
	}
	t1 := time.Now()
	defer func() {
		e.mu.Lock()
		e.stats.HostSeconds += time.Since(t1).Seconds() + t0.Sub(start).Seconds()
		e.mu.Unlock()
	}()
	e.countStep(prompt, len(batch), t1.Sub(t0))
	if err != nil {
		if e.stepCtx.Err() != nil {
			return running // closing: the loop's exit ends them
		}
		for _, s := range members {
			e.retire(s, Event{Err: fmt.Errorf("%w: %w", ErrBackend, err)})
		}
		return remaining(running, members)
	}
	return remaining(running, e.apply(batch, members, groups, greedy, dev, logits))
}

// apply takes a step's results (greedy ids, the device's choices or
// logits to sample) for the sequences of batch (members, groups as in
// step), emits what they release and returns the sequences that finished.
// A member retired since the step was launched is passed over.
func (e *Engine) apply(batch []SeqStep, members []*sequence, groups map[int]int, greedy []int32, dev []Sampled, logits [][]float32) []*sequence {
	var pre []sampled
	if greedy == nil && logits != nil {
		pre = sampleParallel(batch, members, logits)
	}
	var finished []*sequence
	for i := 0; i < len(members); i++ {
		s := members[i]
		if s.retired {
			continue
		}
		if n := groups[i]; n > 0 {
			if e.verify(s, i, n, greedy, logits) {
				finished = append(finished, s)
			}
			i += n - 1
			continue
		}
		s.cached += len(batch[i].Tokens)
		e.publish(s)
		if !batch[i].Logits {
			continue
		}
		if greedy != nil {
			if greedy[i] == -1 {
				e.retire(s, Event{Err: fmt.Errorf("%w: the logits of sequence %d hold a NaN (model %s)", ErrBackend, s.id, e.info.Name)})
				finished = append(finished, s)
			} else if greedy[i] < 0 || (e.info.VocabSize > 0 && int(greedy[i]) >= e.info.VocabSize) {
				e.retire(s, Event{Err: fmt.Errorf("%w: greedy token %d for sequence %d", ErrBackend, greedy[i], s.id)})
				finished = append(finished, s)
			} else if e.accept(s, greedy[i], nil, nil) {
				finished = append(finished, s)
			}
			continue
		}
		if dev != nil && dev[i].Logits == nil {
			if e.deviceSampled(s, &dev[i]) {
				finished = append(finished, s)
			}
			continue
		}
		if len(logits[i]) == 0 {
			e.retire(s, Event{Err: fmt.Errorf("%w: no logits for sequence %d", ErrBackend, s.id)})
			finished = append(finished, s)
			continue
		}
		var done bool
		if pre != nil && pre[i].ok {
			done = e.sampled(s, pre[i].tok, pre[i].err, logits[i])
		} else {
			done = e.sample(s, logits[i])
		}
		if done {
			finished = append(finished, s)
		}
	}
	return finished
}

// countStep adds a step of rows entries, prompt of them prompt tokens
// (a prefill step when any), whose backend call took backend, to the
// engine's counters.
func (e *Engine) countStep(prompt int64, rows int, backend time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.StepsRun++
	e.stats.PromptTokens += prompt
	e.stats.BackendSeconds += backend.Seconds()
	if prompt > 0 {
		e.stats.PrefillSteps++
		e.stats.PrefillRows += int64(rows)
		e.stats.PrefillSeconds += backend.Seconds()
	} else {
		e.stats.DecodeSteps++
		e.stats.DecodeRows += int64(rows)
	}
}

// deviceParams returns the device sampling of each entry of batch that
// wants a token, nil where the sequence's mask only the host can apply.
func (e *Engine) deviceParams(batch []SeqStep, members []*sequence) []*DeviceSampling {
	params := make([]*DeviceSampling, len(batch))
	for i, s := range members {
		// a speculating sequence's entries come back as logits: the host
		// accepts or rejects its drafts (Sampler.Speculate)
		if batch[i].Logits && len(s.spec.drafts) == 0 && e.deviceSampling(s) {
			params[i] = &s.dev
		}
	}
	return params
}

// deviceSampling fills s.dev with the device form of s's next token's
// sampling and the logprobs its request asks for; false where the host
// must sample it (a mask only the host can apply, no vocabulary known).
func (e *Engine) deviceSampling(s *sequence) bool {
	if e.info.VocabSize <= 0 || !s.sampler.Device(&s.dev, e.info.VocabSize) {
		return false
	}
	s.dev.Logprobs, s.dev.TopLogprobs = s.req.Logprobs || s.req.TopLogprobs > 0, s.req.TopLogprobs
	return true
}

// deviceSampled is sampled for the token d the backend chose on the device.
func (e *Engine) deviceSampled(s *sequence, d *Sampled) bool {
	var err error
	switch tok := d.Token; {
	case tok == SampledNaN:
		err = fmt.Errorf("%w: the logits of sequence %d hold a NaN (model %s)", ErrBackend, s.id, e.info.Name)
	case tok == SampledNoFinite && s.req.Mask == nil:
		err = fmt.Errorf("sequence %d: %w", s.id, e.noFiniteLogit())
	case tok == SampledNone || tok == SampledNoFinite:
		err = fmt.Errorf("sequence %d: %w", s.id, ErrNoCandidates)
	case tok < 0 || (e.info.VocabSize > 0 && int(tok) >= e.info.VocabSize):
		err = fmt.Errorf("%w: sampled token %d for sequence %d", ErrBackend, tok, s.id)
	default:
		return e.accept(s, tok, nil, d)
	}
	e.retire(s, Event{Err: err})
	return true
}

// sampled is a token sampleParallel drew (ok), or the error it met.
type sampled struct {
	tok int32
	err error
	ok  bool
}

// parallelSampleMin is the vocabulary from which sampleParallel draws the
// tokens of a step's sequences on several cores: at 32k tokens a sample
// at temperature 1 (a softmax over the whole vocabulary) takes hundreds of
// µs, and a step of 64 sequences pays that 64 times on the loop goroutine.
const parallelSampleMin = 1024

// sampleParallel draws, on up to GOMAXPROCS goroutines, the next token of
// each entry of batch that wants one and whose sampler reads nothing but
// its own state and logits (no Mask: masks may share caches or run
// plugins, so they are sampled in the loop's order afterwards). Each
// Sampler owns its random stream, so the tokens are those a serial pass
// draws. It returns nil when fewer than two entries qualify or the
// vocabulary is small; out[i].ok marks the entries it sampled.
func sampleParallel(batch []SeqStep, members []*sequence, logits [][]float32) []sampled {
	var idx []int
	for i, s := range members {
		if batch[i].Logits && len(logits[i]) >= parallelSampleMin && s.req.Mask == nil && len(s.spec.drafts) == 0 {
			idx = append(idx, i)
		}
	}
	workers := min(len(idx), goruntime.GOMAXPROCS(0))
	if workers < 2 {
		return nil
	}
	out := make([]sampled, len(members))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(idx) {
					return
				}
				i := idx[k]
				tok, err := members[i].sampler.Sample(logits[i])
				out[i] = sampled{tok: tok, err: err, ok: true}
			}
		}()
	}
	wg.Wait()
	return out
}

// remaining returns running without the sequences in drop.
func remaining(running, drop []*sequence) []*sequence {
	if len(drop) == 0 {
		return running
	}
	gone := make(map[*sequence]bool, len(drop))
	for _, s := range drop {
		gone[s] = true
	}
	keep := running[:0]
	for _, s := range running {
		if !gone[s] {
			keep = append(keep, s)
		}
	}
	clear(running[len(keep):])
	return keep
}

// allPlainGreedy reports whether every entry of batch that wants a token
// belongs to a sequence whose next token is the plain argmax of its logits
// (see plainGreedy), and at least one entry wants a token.
func allPlainGreedy(batch []SeqStep, members []*sequence) bool {
	wants := false
	for i, st := range batch {
		if !st.Logits {
			continue
		}
		if !members[i].plainGreedy() {
			return false
		}
		wants = true
	}
	return wants
}

// plainGreedy reports whether s samples the argmax of the raw logits and
// needs nothing else from them: temperature ≤ 0, no logit bias, no
// penalties, no logprobs, no mask.
func (s *sequence) plainGreedy() bool {
	p := s.req.Sampling
	rep := p.RepeatPenalty
	return !(p.Temperature > 0) && len(p.LogitBias) == 0 && (rep <= 0 || rep == 1) &&
		p.PresencePenalty == 0 && p.FrequencyPenalty == 0 &&
		!s.req.Logprobs && s.req.TopLogprobs == 0 && s.req.Mask == nil
}

// sample chooses s's next token from logits, emits what it releases and
// reports whether s finished (and was retired).
func (e *Engine) sample(s *sequence, logits []float32) bool {
	tok, err := s.sampler.Sample(logits)
	return e.sampled(s, tok, err, logits)
}

// sampled is sample after s's sampler returned tok or err for logits.
func (e *Engine) sampled(s *sequence, tok int32, err error, logits []float32) bool {
	if err != nil {
		if errors.Is(err, ErrNoCandidates) && s.req.Mask == nil && !anyFinite(logits) {
			err = e.noFiniteLogit()
		}
		e.retire(s, Event{Err: fmt.Errorf("sequence %d: %w", s.id, err)})
		return true
	}
	return e.accept(s, tok, logits, nil)
}

// noFiniteLogit is the error of a sequence whose choice nothing
// constrained, yet no logit is a number: the model computed NaN or −Inf
// everywhere (corrupt weights, say).
func (e *Engine) noFiniteLogit() error {
	return fmt.Errorf("%w: %s produced no finite logit (NaN or -Inf everywhere); its weights may be corrupt", ErrBackend, e.info.Name)
}

// accept records tok as s's next token, emits what it releases and reports
// whether s finished (and was retired). logits, when not nil, are those tok
// was sampled from (for logprobs); dev, when not nil, is the device's
// choice with its logprobs; the greedy path has neither.
func (e *Engine) accept(s *sequence, tok int32, logits []float32, dev *Sampled) bool {
	s.sampler.Accept(tok)
	s.generated++
	e.mu.Lock()
	e.stats.TokensGenerated++
	e.mu.Unlock()

	if !s.req.IgnoreEOS && e.vocab != nil && e.vocab.IsEOG(tok) {
		e.finish(s, FinishStop, false)
		return true
	}
	g := GeneratedToken{TokenLogprob: TokenLogprob{Token: tok}}
	if e.vocab != nil {
		g.Bytes = e.vocab.TokenBytes(tok)
	}
	if (logits != nil || dev != nil) && (s.req.Logprobs || s.req.TopLogprobs > 0) {
		if dev != nil {
			g.Logprob, g.Top = dev.Logprob, slices.Clone(dev.Top) // the backend's, until the next step
		} else {
			g.Logprob, g.Top = Logprobs(logits, tok, s.req.TopLogprobs)
		}
		for i := range g.Top {
			if e.vocab != nil {
				g.Top[i].Bytes = e.vocab.TokenBytes(g.Top[i].Token)
			}
		}
	}
	text, toks, stopped := s.text.add(tok, g)
	if stopped {
		e.emitText(s, text, toks, true)
		e.finish(s, FinishStop, true)
		return true
	}
	if !e.emitText(s, text, toks, false) {
		return true
	}
	if s.req.MaxTokens > 0 && s.generated >= s.req.MaxTokens {
		e.finish(s, FinishLength, false)
		return true
	}
	if e.info.ContextLength > 0 && len(s.req.Prompt)+s.generated >= e.info.ContextLength {
		// Prompt and output together fill the context.
		e.finish(s, FinishLength, false)
		return true
	}
	s.all = append(s.all, tok)
	return false
}

// emitText sends a text event when there is text or tokens to report. It
// reports false when the reader fell behind and s was retired.
func (e *Engine) emitText(s *sequence, text string, toks []GeneratedToken, final bool) bool {
	if text == "" && len(toks) == 0 {
		return true
	}
	if !final && len(s.out) >= s.buffer {
		e.retire(s, Event{Err: ErrSlowConsumer})
		return false
	}
	s.send(Event{Text: text, Tokens: toks})
	return true
}

// finish releases the rest of s's text and retires it with reason (a stop
// string in the flushed text turns it into FinishStop).
func (e *Engine) finish(s *sequence, reason FinishReason, stopped bool) {
	if !stopped {
		text, toks, hit := s.text.finish()
		if hit {
			reason = FinishStop
		}
		e.emitText(s, text, toks, true)
	}
	e.retire(s, Event{Done: true, Finish: reason})
}

// retire frees s's pages and backend sequence, sends its last event and
// closes its channel. An Err event is also marked Done.
func (e *Engine) retire(s *sequence, last Event) {
	s.retired = true
	e.dropPages(s)
	if s.stopWake != nil {
		s.stopWake()
	}
	if last.Err != nil {
		last.Done = true
	}
	last.Usage = s.usage()
	s.send(last)
	close(s.out)
}

// send delivers ev without blocking; the two reserved slots of the channel
// guarantee room for the final events.
func (s *sequence) send(ev Event) {
	select {
	case s.out <- ev:
	default:
	}
}

// count refreshes the running counters of Stats.
func (e *Engine) count(running []*sequence) {
	e.mu.Lock()
	e.running = len(running)
	e.stats.Running = len(running)
	e.mu.Unlock()
}

// anyFinite reports whether some value of x is a finite number.
func anyFinite(x []float32) bool {
	for _, v := range x {
		if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
			return true
		}
	}
	return false
}

// promptChunk is how many of a prompt's rem uncomputed tokens a step feeds,
// within chunk and the step's budget, leaving two tokens or more for the
// last chunk where it can (chunks of three or more). A backend runs a step
// of one-token entries as a decode step and longer ones as a prefill (on
// the GPU, different products), so a prompt's last token would otherwise
// be computed by the one or the other depending on where its chunks fell,
// and the same prompt could give other logits cold, from the prefix cache
// or beside other requests. A tail of chunk/16 tokens or fewer rides with
// the chunk before it where the budget holds both: a 516-token prompt is
// one step of 516, not 512 and a second pass over the weights for 4.
func promptChunk(rem, chunk, budget int) int {
	if rem > chunk && rem-chunk <= chunk/16 && rem <= budget {
		return rem
	}
	n := min(rem, chunk, budget)
	if rem-n == 1 && n > 2 {
		n-- // leave two for the last chunk
	}
	return n
}
