package runtime

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// ErrNoCandidates is returned by Sampler.Sample when every token was ruled
// out (all logits -Inf after the mask, the bias and the penalties).
var ErrNoCandidates = errors.New("runtime: no token left to sample")

// Mask constrains the next token. It is the one place where constraints
// (json_object, json_schema, grammars) enter sampling: Apply sets the logit of
// every token that is not allowed next to -Inf, and Accept advances the
// constraint's state after a token was chosen. A Mask belongs to one request
// and is called from the engine's goroutine only.
type Mask interface {
	Apply(logits []float32)
	Accept(token int32)
}

// BitsetMask is a Mask that can also give the tokens it allows as a
// bitset, so the sampler reads the logits of allowed tokens only instead
// of writing -Inf over every other one of a large vocabulary. The two
// forms must agree: a token's bit is set exactly when Apply leaves its
// logit alone.
type BitsetMask interface {
	Mask
	// AllowedBits writes into dst, grown as needed, the tokens allowed next
	// (bit id%64 of word id/64) and returns it; ids past the returned words
	// are not allowed.
	AllowedBits(dst []uint64) []uint64
}

// Sampler chooses the next token of one sequence from the model's logits.
// Each Sampler owns its random stream (PCG seeded from SamplingParams.Seed),
// so a seeded request samples the same tokens whatever else runs beside it.
//
// Sample transforms a copy of the logits in this fixed order:
//
//  1. mask: Mask.Apply (structured output), disallowed tokens to -Inf;
//  2. logit bias: LogitBias[id] is added to the logit of id;
//  3. repetition penalty (llama.cpp): every distinct token among the last
//     PenaltyLastN tokens of prompt and output has a positive logit divided
//     by RepeatPenalty, a negative one multiplied by it;
//  4. presence and frequency penalties (OpenAI): every token generated so far
//     (within the same window, output only, not the prompt) loses
//     PresencePenalty once plus FrequencyPenalty × its count;
//  5. Temperature ≤ 0: the argmax is the token (ties: lowest id), done;
//  6. temperature: logits divided by Temperature;
//  7. top-k: the TopK highest logits survive;
//  8. top-p: the smallest set of most likely tokens whose probability
//     (renormalised over the survivors) reaches TopP survives;
//  9. min-p: tokens with probability below MinP × the highest probability
//     are dropped;
//  10. a token is drawn from the softmax over the survivors.
//
// Candidates are ordered by logit, ties by id, so every step is deterministic
// given the seed. Logprobs (Logprobs) come from the raw logits, before all of
// the above, as OpenAI reports them.
type Sampler struct {
	p       SamplingParams
	seed    uint64
	rng     *rand.Rand
	mask    Mask
	history []int32 // prompt then output tokens
	nPrompt int     // how many of history are prompt tokens

	scratch []float32
	bits    []uint64
	cands   []candidate
	counts  map[int32]int
}

type candidate struct {
	id    int32
	logit float32
	p     float64
}

// NewSampler returns a Sampler for p. A nil p.Seed draws a random seed.
func NewSampler(p SamplingParams) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		seed = rand.Uint64()
	}
	return &Sampler{
		p:      p,
		seed:   seed,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		counts: make(map[int32]int),
	}
}

// SetMask installs m (nil removes it); see Mask.
func (s *Sampler) SetMask(m Mask) { s.mask = m }

// AddPrompt records prompt tokens for the repetition penalty. Call it before
// the first Accept.
func (s *Sampler) AddPrompt(tokens []int32) {
	s.history = append(s.history, tokens...)
	s.nPrompt = len(s.history)
}

// Accept records a generated token for the penalties and advances the mask.
func (s *Sampler) Accept(token int32) {
	s.history = append(s.history, token)
	if s.mask != nil {
		s.mask.Accept(token)
	}
}

// Sample chooses the next token from logits (one per vocabulary entry),
// which it does not modify.
func (s *Sampler) Sample(logits []float32) (int32, error) {
	cands, err := s.candidates(logits)
	if err != nil {
		return 0, err
	}
	return s.draw(cands), nil
}

// candidates applies steps 1–9 of the order documented on Sampler and
// returns the surviving tokens with their probabilities, most likely first.
func (s *Sampler) candidates(logits []float32) ([]candidate, error) {
	if bm, ok := s.mask.(BitsetMask); ok {
		return s.maskedCandidates(logits, bm)
	}
	x := append(s.scratch[:0], logits...)
	s.scratch = x
	if s.mask != nil {
		s.mask.Apply(x)
	}
	for id, b := range s.p.LogitBias {
		if id >= 0 && int(id) < len(x) {
			x[id] += b
		}
	}
	s.applyPenalties(x)

	cands := s.cands[:0]
	if s.greedy() {
		best, bestV := int32(-1), float32(math.Inf(-1))
		for i, v := range x {
			if v > bestV {
				best, bestV = int32(i), v
			}
		}
		return s.argmax(best, bestV)
	}
	invT := 1 / s.p.Temperature
	for i, v := range x {
		if !math.IsInf(float64(v), -1) && !math.IsNaN(float64(v)) {
			cands = append(cands, candidate{id: int32(i), logit: v * invT})
		}
	}
	s.cands = cands
	return s.filter(cands)
}

// maskedCandidates is candidates for a BitsetMask: the same steps over the
// allowed tokens only, in id order as the full scan visits them. A token
// the mask rules out would be -Inf after every step, so leaving it out
// changes nothing.
func (s *Sampler) maskedCandidates(logits []float32, bm BitsetMask) ([]candidate, error) {
	s.bits = bm.AllowedBits(s.bits)
	cands := s.cands[:0]
	for w, word := range s.bits {
		for ; word != 0; word &= word - 1 {
			id := w*64 + bits.TrailingZeros64(word)
			if id >= len(logits) {
				break
			}
			cands = append(cands, candidate{id: int32(id), logit: logits[id]})
		}
	}
	s.cands = cands
	// find returns the candidate of id, or nil when id is not allowed.
	find := func(id int32) *candidate {
		i, ok := slices.BinarySearchFunc(cands, id, func(c candidate, id int32) int { return int(c.id - id) })
		if !ok {
			return nil
		}
		return &cands[i]
	}
	for id, b := range s.p.LogitBias {
		if c := find(id); c != nil {
			c.logit += b
		}
	}
	s.eachPenalty(len(logits), func(id int32, n int) {
		if c := find(id); c != nil {
			c.logit = s.penalize(c.logit, n)
		}
	})
	if s.greedy() {
		best, bestV := int32(-1), float32(math.Inf(-1))
		for _, c := range cands {
			if c.logit > bestV {
				best, bestV = c.id, c.logit
			}
		}
		return s.argmax(best, bestV)
	}
	invT := 1 / s.p.Temperature
	keep := cands[:0]
	for _, c := range cands {
		if v := c.logit; !math.IsInf(float64(v), -1) && !math.IsNaN(float64(v)) {
			keep = append(keep, candidate{id: c.id, logit: v * invT})
		}
	}
	return s.filter(keep)
}

// greedy reports whether step 5 applies: the argmax is the token.
func (s *Sampler) greedy() bool {
	return s.p.Temperature <= 0 || math.IsNaN(float64(s.p.Temperature))
}

// argmax returns the greedy choice best (-1: none) as the only candidate.
func (s *Sampler) argmax(best int32, bestV float32) ([]candidate, error) {
	if best < 0 {
		return nil, ErrNoCandidates
	}
	cands := append(s.cands[:0], candidate{id: best, logit: bestV, p: 1})
	s.cands = cands
	return cands, nil
}

// filter applies steps 7–9 to the temperature-scaled cands.
func (s *Sampler) filter(cands []candidate) ([]candidate, error) {
	if len(cands) == 0 {
		return nil, ErrNoCandidates
	}
	sorted := false
	if k := s.p.TopK; k > 0 && k < len(cands) {
		selectTop(cands, k)
		cands = cands[:k]
		slices.SortFunc(cands, byLikelihood)
		sorted = true
	}
	softmax(cands)
	if tp := float64(s.p.TopP); tp > 0 && tp < 1 {
		if !sorted {
			sortLikelyPrefix(cands, tp)
		}
		sum := 0.0
		for i := range cands {
			sum += cands[i].p
			if sum >= tp {
				cands = cands[:i+1]
				break
			}
		}
		renormalize(cands)
	}
	if mp := float64(s.p.MinP); mp > 0 {
		best := 0.0
		for _, c := range cands {
			best = math.Max(best, c.p)
		}
		keep := cands[:0]
		for _, c := range cands {
			if c.p >= mp*best {
				keep = append(keep, c)
			}
		}
		cands = keep
		renormalize(cands)
	}
	return cands, nil
}

// applyPenalties applies the repetition, presence and frequency penalties
// over the window of history the parameters select.
func (s *Sampler) applyPenalties(x []float32) {
	s.eachPenalty(len(x), func(id int32, n int) { x[id] = s.penalize(x[id], n) })
}

// eachPenalty calls f for every token id < vocab the penalties touch, with
// its count among the output tokens of the window (0: seen in the prompt
// only). It calls nothing when no penalty is set.
func (s *Sampler) eachPenalty(vocab int, f func(id int32, n int)) {
	rep := s.p.RepeatPenalty
	if !(rep > 0 && rep != 1) && s.p.PresencePenalty == 0 && s.p.FrequencyPenalty == 0 {
		return
	}
	start := 0
	if n := s.p.PenaltyLastN; n > 0 && len(s.history) > n {
		start = len(s.history) - n
	}
	clear(s.counts)
	for i := start; i < len(s.history); i++ {
		id := s.history[i]
		if id < 0 || int(id) >= vocab {
			continue
		}
		if i >= s.nPrompt {
			s.counts[id]++
		} else if _, ok := s.counts[id]; !ok {
			s.counts[id] = 0 // seen in the prompt only
		}
	}
	for id, n := range s.counts {
		f(id, n)
	}
}

// penalize applies the penalties to logit v of a token counted n times.
func (s *Sampler) penalize(v float32, n int) float32 {
	if rep := s.p.RepeatPenalty; rep > 0 && rep != 1 {
		if v > 0 {
			v /= rep
		} else {
			v *= rep
		}
	}
	if n > 0 {
		v -= s.p.PresencePenalty + s.p.FrequencyPenalty*float32(n)
	}
	return v
}

// softmax fills p of cands with their softmax over cands.
func softmax(cands []candidate) {
	// a plain comparison: the candidates hold no NaN (candidates drops
	// them), and math.Max's care for them cost a tenth of a sample
	max := math.Inf(-1)
	for _, c := range cands {
		if v := float64(c.logit); v > max {
			max = v
		}
	}
	sum := 0.0
	for i := range cands {
		e := math.Exp(float64(cands[i].logit) - max)
		cands[i].p = e
		sum += e
	}
	for i := range cands {
		cands[i].p /= sum
	}
}

// byLikelihood orders candidates most likely first, ties by id.
func byLikelihood(a, b candidate) int {
	switch {
	case a.logit > b.logit:
		return -1
	case a.logit < b.logit:
		return 1
	}
	return int(a.id - b.id)
}

// selectTop moves the k most likely candidates to the front of cands (in
// no particular order): a quickselect, linear on average, instead of
// sorting the whole vocabulary.
func selectTop(cands []candidate, k int) {
	lo, hi := 0, len(cands)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		pivot := cands[mid]
		cands[mid], cands[hi] = cands[hi], cands[mid]
		store := lo
		for i := lo; i < hi; i++ {
			if byLikelihood(cands[i], pivot) < 0 {
				cands[i], cands[store] = cands[store], cands[i]
				store++
			}
		}
		cands[store], cands[hi] = cands[hi], cands[store]
		switch {
		case store == k-1 || store == k:
			return
		case store < k:
			lo = store + 1
		default:
			hi = store - 1
		}
	}
}

// likelyFloor bounds the probabilities sortLikelyPrefix sorts first.
const likelyFloor = 1e-4

// sortLikelyPrefix sorts cands most likely first as far as top-p needs: it
// sorts the candidates with probability ≥ likelyFloor, and the rest only when
// those do not reach mass p (flat distributions).
func sortLikelyPrefix(cands []candidate, p float64) {
	n, mass := 0, 0.0
	for i := range cands {
		if cands[i].p >= likelyFloor {
			cands[i], cands[n] = cands[n], cands[i]
			mass += cands[i].p
			n++
		}
	}
	if mass < p {
		n = len(cands)
	}
	slices.SortFunc(cands[:n], byLikelihood)
}

// renormalize rescales p of the surviving cands to sum to one.
func renormalize(cands []candidate) {
	sum := 0.0
	for _, c := range cands {
		sum += c.p
	}
	for i := range cands {
		cands[i].p /= sum
	}
}

// Logprobs returns the log-probability of chosen and the top alternatives
// (at most top, highest first, ties by id) under log-softmax(logits): the
// model's own distribution before any sampling filter.
func Logprobs(logits []float32, chosen int32, top int) (float32, []TokenLogprob) {
	max := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > max {
			max = float64(v)
		}
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - max)
	}
	logZ := max + math.Log(sum)
	lp := func(id int32) float32 { return float32(float64(logits[id]) - logZ) }

	var chosenLP float32
	if chosen >= 0 && int(chosen) < len(logits) {
		chosenLP = lp(chosen)
	} else {
		panic(fmt.Sprintf("BUG: Logprobs: chosen token %d outside vocabulary of %d", chosen, len(logits)))
	}
	if top <= 0 {
		return chosenLP, nil
	}
	top = min(top, len(logits))
	best := make([]int32, 0, top+1)
	better := func(a, b int32) bool {
		return logits[a] > logits[b] || (logits[a] == logits[b] && a < b)
	}
	for i := range logits {
		id := int32(i)
		if len(best) == top && !better(id, best[top-1]) {
			continue
		}
		j := len(best)
		if j < top {
			best = append(best, id)
		} else {
			j = top - 1
		}
		for j > 0 && better(id, best[j-1]) {
			best[j] = best[j-1]
			j--
		}
		best[j] = id
	}
	out := make([]TokenLogprob, len(best))
	for i, id := range best {
		out[i] = TokenLogprob{Token: id, Logprob: lp(id)}
	}
	return chosenLP, out
}
