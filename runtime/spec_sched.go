package runtime

import "fmt"

// DraftSeq is the backend sequence of draft j of sequence id in a step:
// entries of one step must name distinct sequences, and the backend keeps
// no state of a sequence whose pages the engine gives (SeqStep.Pages).
func DraftSeq(id SeqID, j int) SeqID { return id | SeqID(j+1)<<48 }

// speculates reports whether s drafts this step: the engine speculates,
// its pages are the backend's, few enough sequences run, s decodes and
// its request did not turn speculation off.
func (e *Engine) speculates(s *sequence, running int) bool {
	if e.spec.Mode == "" || !e.share || running > e.spec.MaxBatch || !s.prefilled() {
		return false
	}
	return s.req.Speculative == nil || *s.req.Speculative
}

// draft gives each speculating sequence of running its drafts for this
// step (none where the drafter has nothing, or where they would run past
// the request's max tokens or the context).
//
// Drafts take entries beside the running sequences' own, at most
// MaxRunning in all: a backend sized for MaxRunning sequences (a CUDA
// graph a batch size) runs the step in one launch sequence, and a batch
// that fills it speculates no more.
func (e *Engine) draft(running []*sequence) {
	var model []*sequence
	room := e.cfg.MaxRunning - len(running)
	for _, s := range running {
		s.spec.drafts = s.spec.drafts[:0]
		if !e.speculates(s, len(running)) {
			continue
		}
		if s.spec.k == 0 {
			s.spec.k = e.spec.MaxDraft
		}
		k := s.spec.k
		if s.req.MaxTokens > 0 {
			k = min(k, s.req.MaxTokens-s.generated-1) // the step's own token comes on top
		}
		if ctx := e.info.ContextLength; ctx > 0 {
			k = min(k, ctx-len(s.all)-1)
		}
		k = min(k, room)
		if k <= 0 {
			continue
		}
		switch e.spec.Mode {
		case "ngram":
			s.spec.drafts = append(s.spec.drafts, ngramDraft(s.all, k)...)
			room -= len(s.spec.drafts)
		case "draft":
			s.spec.k = k // this step's bound, restored by adapt
			model = append(model, s)
			room -= k
		}
	}
	if len(model) > 0 {
		e.modelDraft(model)
	}
	e.mu.Lock()
	for _, s := range running {
		if n := len(s.spec.drafts); n > 0 {
			e.stats.SpecSteps++
			e.stats.SpecDrafted += int64(n)
		}
	}
	e.mu.Unlock()
}

// modelDraft drafts for seqs with the draft model, greedily and in one
// batch: the tokens each sequence's draft cache lacks (its newest among
// them) give the first draft, each draft fed back gives the next.
func (e *Engine) modelDraft(seqs []*sequence) {
	d := e.spec.Draft
	greedy, _ := d.(GreedyStepper)
	next := func(batch []SeqStep) ([]int32, error) {
		if greedy != nil {
			return greedy.StepGreedy(e.stepCtx, batch)
		}
		logits, err := d.Step(e.stepCtx, batch)
		if err != nil {
			return nil, err
		}
		out := make([]int32, len(logits))
		for i, l := range logits {
			out[i] = Argmax(l)
		}
		return out, nil
	}
	batch := make([]SeqStep, len(seqs))
	for i, s := range seqs {
		from := min(s.spec.draftFed, len(s.all)-1)
		batch[i] = SeqStep{Seq: s.id, Pos: from, Tokens: s.all[from:], Logits: true}
	}
	active := seqs
	for round := 0; len(active) > 0; round++ {
		toks, err := next(batch)
		if err != nil || len(toks) != len(batch) {
			for _, s := range seqs { // nothing to speculate with this step
				s.spec.drafts = s.spec.drafts[:0]
				s.spec.draftFed = 0
				d.Free(s.id)
			}
			return
		}
		keep, kb := active[:0], batch[:0]
		for i, s := range active {
			if round == 0 {
				s.spec.draftFed = len(s.all)
			} else {
				s.spec.draftFed++ // the draft fed this round
			}
			if toks[i] < 0 {
				continue
			}
			s.spec.drafts = append(s.spec.drafts, toks[i])
			if len(s.spec.drafts) < s.spec.k {
				keep = append(keep, s)
				kb = append(kb, SeqStep{Seq: s.id, Pos: s.spec.draftFed, Tokens: s.spec.drafts[len(s.spec.drafts)-1:], Logits: true})
			}
		}
		active, batch = keep, kb
	}
}

// verify takes the target's results of speculating sequence s's n entries
// from entry i on (its newest token, then its drafts): drafts are
// accepted in order while the target agrees (Sampler.Speculate), the
// first disagreement is the target's token instead, and after every draft
// accepted the last entry gives one token more. It reports whether s
// finished (and was retired).
func (e *Engine) verify(s *sequence, i, n int, greedy []int32, logits [][]float32) bool {
	drafts := s.spec.drafts
	before := len(s.all) - 1 // the draft cache's tokens of all, draft mode
	s.cached++               // the newest token, fed by the first entry
	accepted := 0
	done := false
	for j := range n {
		draft := int32(-1)
		if j < len(drafts) {
			draft = drafts[j]
		}
		var tok int32
		var lg []float32
		ok := false
		if greedy != nil {
			tok = greedy[i+j]
			if tok < 0 || (e.info.VocabSize > 0 && int(tok) >= e.info.VocabSize) {
				e.retire(s, Event{Err: fmt.Errorf("%w: the logits of sequence %d hold a NaN, or its greedy token %d is not in the vocabulary", ErrBackend, s.id, tok)})
				return true
			}
			ok = draft >= 0 && tok == draft
		} else {
			lg = logits[i+j]
			if len(lg) == 0 {
				e.retire(s, Event{Err: fmt.Errorf("%w: no logits for sequence %d", ErrBackend, s.id)})
				return true
			}
			var err error
			if tok, ok, err = s.sampler.Speculate(lg, draft); err != nil {
				return e.sampled(s, 0, err, lg)
			}
		}
		if ok {
			s.cached++ // the draft's keys and values, written by its entry, stand
			accepted++
		}
		if e.accept(s, tok, lg, nil) {
			done = true
			break
		}
		if !ok {
			break
		}
	}
	e.mu.Lock()
	e.stats.SpecAccepted += int64(accepted)
	e.mu.Unlock()
	if done {
		return true
	}
	e.publish(s)
	if e.spec.Mode == "draft" {
		s.spec.draftFed = min(s.spec.draftFed, before+1+min(accepted, len(drafts)-1))
	}
	s.spec.adapt(accepted, len(drafts), e.spec.MaxDraft)
	s.spec.drafts = s.spec.drafts[:0]
	return false
}
