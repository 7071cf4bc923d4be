package runtime

import (
	"cmp"
	"slices"
)

// Device fills dst with what a SamplingStepper needs to choose this
// sampler's next token over a vocabulary of vocab tokens (see
// DeviceSampling), reusing dst's slices, and reports whether the device
// can: not when the mask is not a BitsetMask (it can only Apply itself,
// on the host). The penalties are eachPenalty's, the bias LogitBias's
// entries inside the vocabulary, the mask AllowedBits' words of the
// vocabulary, the seed the sampler's and the index the tokens it accepted.
// The logprobs wanted are the caller's to set.
func (s *Sampler) Device(dst *DeviceSampling, vocab int) bool {
	var bm BitsetMask
	if s.mask != nil {
		var ok bool
		if bm, ok = s.mask.(BitsetMask); !ok {
			return false
		}
	}
	dst.Params = s.p
	dst.Params.LogitBias = nil
	dst.Bias = dst.Bias[:0]
	for id, b := range s.p.LogitBias {
		if id >= 0 && int(id) < vocab {
			dst.Bias = append(dst.Bias, TokenBias{Token: id, Bias: b})
		}
	}
	slices.SortFunc(dst.Bias, func(a, b TokenBias) int { return cmp.Compare(a.Token, b.Token) })
	dst.Penalties = dst.Penalties[:0]
	s.eachPenalty(vocab, func(id int32, n int) {
		dst.Penalties = append(dst.Penalties, TokenCount{Token: id, Count: int32(n)})
	})
	slices.SortFunc(dst.Penalties, func(a, b TokenCount) int { return cmp.Compare(a.Token, b.Token) })
	dst.Masked = bm != nil
	dst.Mask = dst.Mask[:0]
	if bm != nil {
		dst.Mask = bm.AllowedBits(dst.Mask)
		dst.Mask = dst.Mask[:min(len(dst.Mask), (vocab+63)/64)]
	}
	dst.Seed = s.seed
	dst.Index = uint64(len(s.history) - s.nPrompt)
	return true
}
