package runtime

import (
	"errors"
	"fmt"
)

// Speculative decoding: a drafter proposes the next K tokens of a
// decoding sequence, and one target step scores all of them. The step
// feeds the sequence's newest token and the K drafts as K+1 one-token
// entries that share the sequence's page table, each at its own position
// (the backend writes every entry's key and value before attention reads
// them, so entry j sees the drafts before it): the same decode step, and
// the same products, as K+1 sequences of one token. Entry j's result is
// the target's choice after position cached+j. The drafts are accepted in
// order while they agree with the target (greedy: its argmax; sampled: the
// rule that leaves the target's distribution unchanged, Sampler.Speculate),
// and the first disagreement is replaced by the target's own token; when
// every draft is accepted, entry K gives one token more. The keys and
// values of rejected drafts stay in the pages past the sequence's length,
// where nothing reads them, and are overwritten by the next step.

// SpecConfig configures speculative decoding in an Engine.
type SpecConfig struct {
	// Mode is "" or "off" (none), "ngram" (prompt lookup: the continuation
	// of the latest earlier occurrence of the sequence's last tokens) or
	// "draft" (a smaller model of the same vocabulary, Draft).
	Mode string
	// MaxDraft bounds the tokens drafted per step (default
	// DefaultSpecMaxDraft); each sequence adapts its own K below it to its
	// recent acceptance.
	MaxDraft int
	// MaxBatch is the most running sequences at which the engine still
	// speculates (default DefaultSpecMaxBatch): a wide batch already reads
	// each weight once for many tokens, and its rows are better spent on
	// other sequences. Drafts also fit in EngineConfig.MaxRunning entries
	// beside the running sequences: a batch that fills it drafts nothing.
	MaxBatch int
	// Draft is the draft model's backend ("draft" mode). The engine owns
	// it from then on and closes it.
	Draft Backend
}

// Defaults of SpecConfig.
const (
	DefaultSpecMaxDraft = 4
	// MaxSpecDraft bounds SpecConfig.MaxDraft. A verify step's entries of
	// one sequence (its token and the drafts) write its newest rows in one
	// step; the CUDA backend's decode attention reads that many again after
	// its dependency wait (codegen.MaxSharedRows, one more than this).
	MaxSpecDraft        = 16
	DefaultSpecMaxBatch = 8
	// ngramMax and ngramMin bound the suffix the n-gram drafter looks up.
	ngramMax, ngramMin = 3, 1
)

// ErrSpecConfig reports a SpecConfig the engine cannot run.
var ErrSpecConfig = errors.New("runtime: speculative decoding configuration")

// Check reports whether the engine can run c (NewEngine turns an invalid
// c off).
func (c SpecConfig) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c SpecConfig) withDefaults() (SpecConfig, error) {
	switch c.Mode {
	case "", "off":
		c.Mode = ""
	case "ngram":
	case "draft":
		if c.Draft == nil {
			return c, fmt.Errorf("%w: draft mode without a draft model", ErrSpecConfig)
		}
	default:
		return c, fmt.Errorf("%w: mode %q (off, ngram or draft)", ErrSpecConfig, c.Mode)
	}
	if c.MaxDraft < 0 || c.MaxDraft > MaxSpecDraft || c.MaxBatch < 0 {
		return c, fmt.Errorf("%w: at most %d drafted tokens (1 to %d), speculating up to %d sequences", ErrSpecConfig, c.MaxDraft, MaxSpecDraft, c.MaxBatch)
	}
	if c.MaxDraft == 0 {
		c.MaxDraft = DefaultSpecMaxDraft
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultSpecMaxBatch
	}
	return c, nil
}

// specState is a sequence's speculation: its adaptive draft length and the
// drafts of the running step.
type specState struct {
	k      int     // tokens to draft next (adapted to acceptance)
	drafts []int32 // this step's drafts, fed after the sequence's newest token
	// draftFed is how many of all's tokens the draft model's cache holds
	// (draft mode)
	draftFed int
}

// ngramDraft proposes up to k tokens: the tokens that followed the latest
// earlier occurrence of the last n tokens of all, for the longest n from
// ngramMax down to ngramMin that occurred before. A continuation that
// runs into the end of all goes on with the tokens it drafted, as a copy
// that overlaps itself does: a text that repeats with a short period is
// drafted k tokens ahead, not only up to its end. nil when nothing
// occurred before.
func ngramDraft(all []int32, k int) []int32 {
	for n := min(ngramMax, len(all)-1); n >= ngramMin; n-- {
		suffix := all[len(all)-n:]
		// the latest match that leaves at least one token after it
		for p := len(all) - n - 1; p >= 0; p-- {
			if !equalTokens(all[p:p+n], suffix) {
				continue
			}
			from := p + n
			drafts := make([]int32, 0, k)
			for i := range k {
				if j := from + i; j < len(all) {
					drafts = append(drafts, all[j])
				} else {
					drafts = append(drafts, drafts[j-len(all)])
				}
			}
			return drafts
		}
	}
	return nil
}

func equalTokens(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// specRows is how one speculating sequence's entries lie in a step's
// batch: its main entry at first, then one entry per draft.
type specRows struct {
	first int
	n     int // 1 + drafts
}

// adapt sets the next draft length from this step's: one more after a
// step that accepted every draft, one more than it accepted otherwise.
func (sp *specState) adapt(accepted, drafted, maxDraft int) {
	if accepted == drafted {
		sp.k = min(drafted+1, maxDraft)
	} else {
		sp.k = max(1, accepted+1)
	}
}

// Speculate is Sample for a step whose input was draft: it returns draft
// when the draft is accepted, and otherwise a token from the residual
// distribution, so that the token has exactly the distribution Sample
// would draw from (the drafters propose one token with certainty: accept
// with probability p(draft), else draw from p without draft, renormalised).
// Greedy sequences accept exactly when the draft is the argmax. A draft
// of -1 (none) is Sample.
func (s *Sampler) Speculate(logits []float32, draft int32) (tok int32, accepted bool, err error) {
	cands, err := s.candidates(logits)
	if err != nil {
		return 0, false, err
	}
	if draft < 0 {
		return s.draw(cands), false, nil
	}
	pd := 0.0
	for _, c := range cands {
		if c.id == draft {
			pd = c.p
			break
		}
	}
	if pd >= 1 {
		return draft, true, nil
	}
	if pd > 0 && s.rng.Float64() < pd {
		return draft, true, nil
	}
	// the residual: p without the draft, renormalised
	r := s.rng.Float64() * (1 - pd)
	last := int32(-1)
	for _, c := range cands {
		if c.id == draft {
			continue
		}
		last = c.id
		r -= c.p
		if r < 0 {
			return c.id, false, nil
		}
	}
	if last < 0 {
		return 0, false, ErrNoCandidates
	}
	return last, false, nil // rounding: r landed past the sum
}

// draw picks a token from cands by their probabilities (one draw of the
// random stream unless a single candidate is left).
func (s *Sampler) draw(cands []candidate) int32 {
	if len(cands) == 1 {
		return cands[0].id
	}
	r := s.rng.Float64()
	for _, c := range cands {
		r -= c.p
		if r < 0 {
			return c.id
		}
	}
	return cands[len(cands)-1].id // rounding: r landed past the sum
}
