package grammar

// AllowedBits implements runtime.BitsetMask: the tokens Apply leaves
// alone, as a bitset (after a rejected token, the end-of-generation ones).
func (s *SamplerMask) AllowedBits(dst []uint64) []uint64 {
	if w := s.m.v.Words(); cap(dst) < w {
		dst = make([]uint64, w)
	} else {
		dst = dst[:w]
	}
	if s.err == nil {
		s.m.Mask(dst)
		return dst
	}
	clear(dst)
	for _, t := range s.m.v.eog {
		dst[t>>6] |= 1 << (t & 63)
	}
	return dst
}
