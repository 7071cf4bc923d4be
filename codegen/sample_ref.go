package codegen

import (
	"math"
	"math/bits"
	"slices"
)

// RefSample runs the sampling kernel's algorithm (Sample) over one row of
// vocab logits in Go: the same passes, keys, pivots, tie cuts, three-level
// rank search, fixed-point weights and Philox draw, float32 arithmetic
// where the kernel's is (unfused), and the kernel's order for its one
// order-dependent float sum (the logprobs' normaliser). exp and log are
// float64 rounded to float32, where the device's expf and logf may differ
// in the last place. rec is the row's record; bias, pen and mask are the
// whole buffers the record points into. It returns the row's
// SampleOutWords output words, nil for an inactive record (the kernel
// leaves those alone).
func RefSample(vocab int, arm BlockArm, logits []float32, rec []uint32, bias, pen, mask []uint32) []uint32 {
	r := DecodeSampleRecord(rec)
	if !r.Active {
		return nil
	}
	s := &refSampler{lay: SampleLayoutOf(vocab, arm), r: r, x: logits[:vocab], w: make([]float32, vocab), ck: vocab, cp: vocab}
	out := make([]uint32, SampleOutWords)
	tok := s.run(out, bias, pen, mask)
	out[soToken] = uint32(tok)
	return out
}

// refSampler is the kernel's sample_state and its block.
type refSampler struct {
	lay      SampleLayout
	r        SampleRecord
	x, src   []float32
	w        []float32
	ymax     float32
	tk, tp   uint32
	ck, cp   int
	t        uint32
	mode     int
	rmax     float32
	finite   bool
	anyNaN   bool
	edit     bool
	maskWord func(i int) bool
}

func (s *refSampler) run(out []uint32, bias, pen, mask []uint32) int32 {
	r, vocab := s.r, s.lay.Vocab
	s.maskWord = func(i int) bool {
		if i>>5 >= int(r.MaskWords) {
			return false
		}
		return mask[int(r.MaskOff)+i>>5]>>(i&31)&1 != 0
	}
	allowed := func(i int) bool { return !r.Masked || s.maskWord(i) }
	s.edit = r.Masked || r.BiasN > 0 || r.PenN > 0
	// step 1
	s.rmax = float32(math.Inf(-1))
	for i, v := range s.x {
		s.anyNaN = s.anyNaN || v != v
		s.finite = s.finite || math.Abs(float64(v)) < math.Inf(1)
		if v > s.rmax {
			s.rmax = v
		}
		if s.edit {
			s.w[i] = float32(math.Inf(-1))
			if allowed(i) {
				s.w[i] = v
			}
		}
	}
	if s.anyNaN {
		return SampleNaN
	}
	// steps 2-4
	if s.edit {
		for j := range int(r.BiasN) {
			id := bias[2*(int(r.BiasOff)+j)]
			if id < uint32(vocab) && allowed(int(id)) {
				s.w[id] += math.Float32frombits(bias[2*(int(r.BiasOff)+j)+1])
			}
		}
		for j := range int(r.PenN) {
			id := pen[2*(int(r.PenOff)+j)]
			if id < uint32(vocab) && allowed(int(id)) {
				s.w[id] = refPenalize(s.w[id], pen[2*(int(r.PenOff)+j)+1], r.Repeat, r.Presence, r.Frequency)
			}
		}
		s.src = s.w
	} else {
		s.src = s.x
	}
	var tok int32
	if r.Greedy {
		tok = s.greedy()
	} else {
		tok = s.draw()
	}
	if tok < 0 {
		tok = SampleNone
		if !s.finite {
			tok = SampleNoFinite
		}
	}
	if r.Logprobs || r.TopN > 0 {
		s.logprobs(out, tok)
	}
	return tok
}

// refPenalize is the kernel's penalize.
func refPenalize(v float32, n uint32, rep, pres, freq float32) float32 {
	if rep > 0 && rep != 1 {
		if v > 0 {
			v = float32(v / rep)
		} else {
			v = float32(v * rep)
		}
	}
	if n > 0 {
		v = float32(v - float32(pres+float32(freq*float32(n))))
	}
	return v
}

// ordKey is the kernel's ord_key.
func ordKey(f float32) uint32 {
	u := math.Float32bits(f)
	if u&0x80000000 != 0 {
		return ^u
	}
	return u | 0x80000000
}

// weightFx is the kernel's weight_fx.
func weightFx(e float32) uint64 {
	if !(e > 0) {
		return 0
	}
	return uint64(min(e, 1) * float32(uint64(1)<<sampleFxBits))
}

// ceilFrac is the kernel's ceil_frac: ⌈f·total⌉ for 0 < f < 1, exactly.
func ceilFrac(f float32, total uint64) uint64 {
	u := math.Float32bits(f)
	e := u >> 23 & 0xff
	m, sh := uint64(u&0x7fffff), 149
	if e != 0 {
		m, sh = m|0x800000, 150-int(e)
	}
	hi, lo := bits.Mul64(m, total)
	if sh >= 128 {
		if lo|hi != 0 {
			return 1
		}
		return 0
	}
	var q, rest uint64
	if sh >= 64 {
		q, rest = hi>>(sh-64), lo|hi&(uint64(1)<<(sh-64)-1)
	} else {
		q, rest = lo>>sh|hi<<(64-sh), lo&(uint64(1)<<sh-1)
	}
	if rest != 0 {
		q++
	}
	return q
}

// expf and logf stand for the device's: float64, rounded to float32.
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }
func logf(x float32) float32 { return float32(math.Log(float64(x))) }

// Philox4x32 is Philox4x32-10 (Salmon et al., SC11): the four random
// words of counter ctr under key, as the kernel's philox computes them.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c, k0, k1 := ctr, key[0], key[1]
	for range 10 {
		hi0, lo0 := bits.Mul32(0xD2511F53, c[0])
		hi1, lo1 := bits.Mul32(0xCD9E8D57, c[2])
		c = [4]uint32{hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0}
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	return c
}

// SampleUniform is the 64-bit number the kernel draws with for a sequence
// of seed at token index.
func SampleUniform(seed, index uint64) uint64 {
	c := Philox4x32([4]uint32{uint32(index), uint32(index >> 32), SampleStream, 0}, [2]uint32{uint32(seed), uint32(seed >> 32)})
	return uint64(c[1])<<32 | uint64(c[0])
}

// row is the kernel's sample_row.
func (s *refSampler) row(mode int) []float32 {
	switch mode {
	case keyY:
		return s.src
	case keyRaw:
		return s.x
	}
	return s.w
}

// key is the kernel's sample_key.
func (s *refSampler) key(mode int, v float32) (uint32, uint64) {
	switch mode {
	case keyY:
		if v > float32(math.Inf(-1)) {
			return ordKey(float32(v * s.r.InvTemp)), 1
		}
		return 0, 0
	case keyRaw:
		return ordKey(v), 1
	}
	return math.Float32bits(v), weightFx(v)
}

// drawn is the kernel's drawn.
func (s *refSampler) drawn(e float32, i int) uint64 {
	k := math.Float32bits(e)
	if (k > s.tp || (k == s.tp && i <= s.cp)) && e >= s.r.MinP {
		return weightFx(e)
	}
	return 0
}

// rankQty is the kernel's rank_qty.
func (s *refSampler) rankQty(what, i int) uint64 {
	if what == rankDraw {
		return s.drawn(s.w[i], i)
	}
	if k, q := s.key(s.mode, s.row(s.mode)[i]); k == s.t && q > 0 {
		return 1
	}
	return 0
}

// warpOf is the warp whose chunk holds id i.
func (s *refSampler) warpOf(i int) int { return i / s.lay.Chunk() }

// search is the kernel's search: PIV pivots a pass over the row.
func (s *refSampler) search(mode int, need uint64, hi uint32) uint32 {
	return s.searchIn(s.row(mode), mode, need, hi)
}

// compactSearch is the kernel's compact_search: the search over the
// elements with keys of at least kl (keyW: weights of at least lq), where
// they hold need and are at most sampleCompact, else over the row. Where
// they hold need, the threshold is among them, so it is the same either way.
func (s *refSampler) compactSearch(mode int, need uint64, hi, kl uint32, lq uint64) uint32 {
	var c []float32
	var held uint64
	for _, v := range s.row(mode) {
		k, q := s.key(mode, v)
		if q > 0 && ((mode == keyW && q >= lq) || (mode != keyW && k >= kl)) {
			held += q
			c = append(c, v)
		}
	}
	if len(c) > sampleCompact || held < need {
		return s.search(mode, need, hi)
	}
	return s.searchIn(c, mode, need, hi)
}

// searchIn is search over the values of row, in any order.
func (s *refSampler) searchIn(row []float32, mode int, need uint64, hi uint32) uint32 {
	lo := uint32(0)
	for lo < hi {
		size := uint64(hi-lo) + 1
		var p [samplePivots]uint32
		var c [samplePivots]uint64
		for j := range p {
			p[j] = lo + uint32(size*uint64(j+1)/(samplePivots+1))
		}
		for _, v := range row {
			k, q := s.key(mode, v)
			for j := range p {
				if k >= p[j] {
					c[j] += q
				}
			}
		}
		nlo, nhi := lo, hi
		for j := range p {
			if c[j] >= need {
				nlo = max(nlo, p[j])
			} else {
				nhi = min(nhi, p[j]-1)
			}
		}
		lo, hi = nlo, nhi
	}
	return lo
}

// tieCut is the kernel's tie_cut.
func (s *refSampler) tieCut(mode int, t uint32, need uint64) int {
	var above, all uint64
	wties := make([]uint64, s.lay.Warps)
	for i, v := range s.row(mode) {
		k, q := s.key(mode, v)
		if k > t {
			above += q
		} else if k == t && q > 0 {
			all++
			wties[s.warpOf(i)]++
		}
	}
	unit := uint64(1)
	if mode == keyW {
		unit = weightFx(math.Float32frombits(t))
	}
	if unit == 0 || above >= need {
		return s.lay.Vocab
	}
	keep := (need - above + unit - 1) / unit
	if keep >= all {
		return s.lay.Vocab
	}
	s.t, s.mode = t, mode
	return s.findRank(rankTie, keep-1, wties)
}

// findRank is the kernel's find_rank, given every warp's chunk total.
func (s *refSampler) findRank(what int, target uint64, warpTotal []uint64) int {
	lay := s.lay
	c := 0
	for c < lay.Warps-1 && warpTotal[c] <= target {
		target -= warpTotal[c]
		c++
	}
	inSplit := func(warp, k, lane int) (int, bool) {
		r := warp*lay.Split + k
		i := c*lay.Chunk() + r*32 + lane
		return i, k < lay.Split && r < lay.Rounds && i < lay.Vocab
	}
	sub := make([]uint64, lay.Warps)
	for warp := range lay.Warps {
		for k := range lay.Split {
			for lane := range 32 {
				if i, ok := inSplit(warp, k, lane); ok {
					sub[warp] += s.rankQty(what, i)
				}
			}
		}
	}
	v := 0
	for v < lay.Warps-1 && sub[v] <= target {
		target -= sub[v]
		v++
	}
	run := uint64(0)
	for k := range lay.Split {
		for lane := range 32 {
			i, ok := inSplit(v, k, lane)
			if !ok {
				continue
			}
			if run += s.rankQty(what, i); run > target {
				return i
			}
		}
	}
	return -1
}

// greedy is the kernel's sample_greedy.
func (s *refSampler) greedy() int32 {
	best, bi := float32(math.Inf(-1)), -1
	for i, v := range s.src {
		if v > best {
			best, bi = v, i
		}
	}
	return int32(bi)
}

// draw is the kernel's sample_draw.
func (s *refSampler) draw() int32 {
	r := s.r
	var n uint64
	s.ymax = float32(math.Inf(-1))
	for _, v := range s.src {
		if v > float32(math.Inf(-1)) {
			n++
			s.ymax = max(s.ymax, float32(v*r.InvTemp))
		}
	}
	if n == 0 {
		return -1
	}
	if k := r.TopK; k > 0 && uint64(k) < n {
		s.tk = s.compactSearch(keyY, uint64(k), ordKey(s.ymax), ordKey(float32(s.ymax-sampleCompactSpan)), 0)
		s.ck = s.tieCut(keyY, s.tk, uint64(k))
	}
	var total uint64
	for i, v := range s.src {
		e := float32(0)
		if v > float32(math.Inf(-1)) {
			y := float32(v * r.InvTemp)
			if k := ordKey(y); k > s.tk || (k == s.tk && i <= s.ck) {
				e = expf(float32(y - s.ymax))
			}
		}
		s.w[i] = e
		total += weightFx(e)
	}
	if tp := r.TopP; tp > 0 && tp < 1 && total > 0 {
		need := ceilFrac(tp, total)
		s.tp = s.compactSearch(keyW, need, math.Float32bits(1), 0, (total-need)/uint64(len(s.w)))
		s.cp = s.tieCut(keyW, s.tp, need)
	}
	var mass uint64
	wmass := make([]uint64, s.lay.Warps)
	for i, e := range s.w {
		d := s.drawn(e, i)
		mass += d
		wmass[s.warpOf(i)] += d
	}
	if mass == 0 {
		best, bi := float32(math.Inf(-1)), -1
		for i, v := range s.src {
			if y := float32(v * r.InvTemp); v > float32(math.Inf(-1)) && (bi < 0 || y > best) {
				best, bi = y, i
			}
		}
		return int32(bi)
	}
	hi, _ := bits.Mul64(mass, SampleUniform(r.Seed, r.Index))
	return int32(s.findRank(rankDraw, hi, wmass))
}

// logprobs is the kernel's sample_logprobs.
func (s *refSampler) logprobs(out []uint32, tok int32) {
	logz := float32(s.rmax + logf(s.expSum()))
	if tok >= 0 {
		out[soLogprob] = math.Float32bits(float32(s.x[tok] - logz))
	}
	n := min(int(s.r.TopN), MaxSampleTop)
	if n <= 0 {
		return
	}
	k := min(n, s.lay.Vocab)
	t, cut := uint32(0), s.lay.Vocab
	if k < s.lay.Vocab {
		t = s.compactSearch(keyRaw, uint64(k), ordKey(s.rmax), ordKey(float32(s.rmax-sampleCompactSpan)), 0)
		cut = s.tieCut(keyRaw, t, uint64(k))
	}
	var top []int
	for i, v := range s.x {
		if key := ordKey(v); key > t || (key == t && i <= cut) {
			top = append(top, i)
		}
	}
	slices.SortFunc(top, func(a, b int) int {
		switch {
		case s.x[a] > s.x[b]:
			return -1
		case s.x[a] < s.x[b]:
			return 1
		}
		return a - b
	})
	top = top[:min(len(top), k, MaxSampleTop)]
	out[soTopN] = uint32(len(top))
	for j, id := range top {
		out[soTopIDs+j] = uint32(id)
		out[soTopProbs+j] = math.Float32bits(float32(s.x[id] - logz))
	}
}

// expSum is the kernel's Σ expf(x − rmax) in its order: each thread over
// its elements (ids increasing), a butterfly over the lanes, then the
// warps in order.
func (s *refSampler) expSum() float32 {
	lay := s.lay
	var total float32
	for warp := range lay.Warps {
		var lane [32]float32
		for l := range lane {
			for r := range lay.Rounds {
				if i := warp*lay.Chunk() + r*32 + l; i < lay.Vocab {
					lane[l] = float32(lane[l] + expf(float32(s.x[i]-s.rmax)))
				}
			}
		}
		for o := 16; o > 0; o >>= 1 {
			var next [32]float32
			for l := range lane {
				next[l] = float32(lane[l] + lane[l^o])
			}
			lane = next
		}
		if warp == 0 {
			total = lane[0]
		} else {
			total = float32(total + lane[0])
		}
	}
	return total
}
