package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
)

// bitsMask is a fixed runtime.BitsetMask.
type bitsMask struct{ bits []uint64 }

func (m bitsMask) Apply(l []float32) {
	for i := range l {
		if i/64 >= len(m.bits) || m.bits[i/64]>>(i%64)&1 == 0 {
			l[i] = float32(math.Inf(-1))
		}
	}
}
func (bitsMask) Accept(int32)                        {}
func (m bitsMask) AllowedBits(dst []uint64) []uint64 { return append(dst[:0], m.bits...) }

// randomMask allows each of vocab tokens with probability share.
func randomMask(rng *rand.Rand, vocab int, share float64) bitsMask {
	m := bitsMask{bits: make([]uint64, (vocab+63)/64)}
	for i := range vocab {
		if rng.Float64() < share {
			m.bits[i/64] |= 1 << (i % 64)
		}
	}
	return m
}

// mirror packs d as the backend does (one sequence) and runs the kernel's
// Go mirror on logits.
func mirror(t testing.TB, arm codegen.BlockArm, logits []float32, d *runtime.DeviceSampling) codegen.SampleResult {
	p := newSamplePack(len(logits))
	require.True(t, p.fits(d))
	p.reset(1)
	p.set(0, d)
	out := codegen.RefSample(len(logits), arm, logits, p.rec, p.bias, p.pen, p.mask)
	require.NotNil(t, out)
	return codegen.DecodeSampleOut(out)
}

// device returns the sampler's device form for vocab tokens.
func device(t testing.TB, s *runtime.Sampler, vocab int) *runtime.DeviceSampling {
	d := &runtime.DeviceSampling{}
	require.True(t, s.Device(d, vocab))
	return d
}

// TestSamplePack: the records, pairs and mask words a launch sequence
// uploads; entries left to the host; the rows a step without sampling
// clears.
func TestSamplePack(t *testing.T) {
	const vocab = 100
	p := newSamplePack(vocab)
	require.Equal(t, 4, p.maskWords)
	d0 := &runtime.DeviceSampling{
		Params: runtime.SamplingParams{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, PresencePenalty: 0.5, FrequencyPenalty: 0.25},
		Bias:   []runtime.TokenBias{{Token: 3, Bias: 1.5}, {Token: 9, Bias: -100}}, Penalties: []runtime.TokenCount{{Token: 4, Count: 0}, {Token: 7, Count: 2}},
		Masked: true, Mask: []uint64{0x0123456789abcdef, 0xfedcba9876543210, 0xffff}, // a word past the vocabulary
		Seed: 1<<40 + 3, Index: 17, Logprobs: true, TopLogprobs: 5,
	}
	d1 := &runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: float32(math.NaN())}, Bias: []runtime.TokenBias{{Token: 99, Bias: 2}},
		Penalties: []runtime.TokenCount{{Token: 1, Count: 1}}, Masked: true}
	p.reset(4)
	p.set(0, d0)
	p.set(2, d1)
	r0 := codegen.DecodeSampleRecord(p.rec)
	require.Equal(t, codegen.SampleRecord{Active: true, Masked: true, Logprobs: true, TopK: 40, TopP: 0.9, MinP: 0.05, InvTemp: 1 / float32(0.7),
		Repeat: 1.1, Presence: 0.5, Frequency: 0.25, Seed: 1<<40 + 3, Index: 17, BiasOff: 0, BiasN: 2, PenOff: 0, PenN: 2,
		MaskOff: 0, MaskWords: 4, TopN: 5}, r0)
	r2 := codegen.DecodeSampleRecord(p.rec[2*codegen.SampleRecordWords:])
	require.Equal(t, codegen.SampleRecord{Active: true, Greedy: true, Masked: true, BiasOff: 2, BiasN: 1, PenOff: 2, PenN: 1, MaskOff: 4, MaskWords: 0}, r2,
		"a NaN temperature is greedy, as on the CPU; an empty mask allows nothing")
	require.False(t, codegen.DecodeSampleRecord(p.rec[codegen.SampleRecordWords:]).Active, "rows without an entry stay inactive")
	require.Equal(t, []uint32{3, math.Float32bits(1.5), 9, math.Float32bits(-100), 99, math.Float32bits(2)}, p.bias)
	require.Equal(t, []uint32{4, 0, 7, 2, 1, 1}, p.pen)
	require.Equal(t, []uint32{0x89abcdef, 0x01234567, 0x76543210, 0xfedcba98}, p.mask, "u64 words as little-endian u32 pairs, cut at the vocabulary")
	require.Equal(t, []bool{true, false, true, false}, p.active)
	// what does not fit goes to the host
	for _, d := range []*runtime.DeviceSampling{{Bias: make([]runtime.TokenBias, SampleBiasCap+1)},
		{Penalties: make([]runtime.TokenCount, SamplePenaltyCap+1)}, {TopLogprobs: codegen.MaxSampleTop + 1}} {
		require.False(t, p.fits(d))
	}
	require.True(t, p.fits(&runtime.DeviceSampling{Bias: make([]runtime.TokenBias, SampleBiasCap), Penalties: make([]runtime.TokenCount, SamplePenaltyCap)}))

	// A launch sequence: entries without params, without logits or too
	// large stay on the host; the next step without sampling clears the
	// rows left active, the one after uploads nothing.
	b := &Backend{spack: newSamplePack(vocab)}
	big := &runtime.DeviceSampling{Bias: make([]runtime.TokenBias, SampleBiasCap+1)}
	b.params = []*runtime.DeviceSampling{nil, d0, d1, big, d0}
	pieces := []piece{{entry: 0, logits: true}, {entry: 1, logits: false}, {entry: 2, logits: true}, {entry: 3, logits: true}, {entry: 4, logits: true}}
	b.pack(pieces, 8, stepSample)
	require.Equal(t, []bool{false, false, true, false, true, false, false, false}, b.spack.active)
	require.Len(t, b.spack.rec, 8*codegen.SampleRecordWords)
	require.Equal(t, 5, b.recLive)
	b.pack(pieces[:2], 2, stepLogits)
	require.Len(t, b.spack.rec, 5*codegen.SampleRecordWords, "zero records over every row left active")
	for _, w := range b.spack.rec {
		require.Zero(t, w)
	}
	require.Zero(t, b.recLive)
	b.pack(pieces[:2], 2, stepGreedy)
	require.Empty(t, b.spack.rec)
	require.Equal(t, [codegen.NumSampleInputs]int{4 * 2 * codegen.SampleRecordWords, 8 * 2 * SampleBiasCap, 8 * 2 * SamplePenaltyCap, 4 * 2 * 4}, sampleBytes(2, vocab))
}

// TestSampleMirrorGreedy (a): at temperature ≤ 0 the kernel's mirror
// chooses exactly the CPU sampler's argmax (ties: lowest id) over random
// logits with ties, -Inf and bitset masks, logit biases and penalties over
// a history window, for several block sizes.
func TestSampleMirrorGreedy(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	arms := []codegen.BlockArm{codegen.DefaultSampleArm, {Threads: 64}, {Threads: 256}}
	for trial := range 300 {
		vocab := []int{1000, 257, 40, 2048}[trial%4]
		p := runtime.SamplingParams{Temperature: []float32{0, -1}[trial%2], PenaltyLastN: rng.IntN(50)}
		if trial%3 != 0 {
			p.RepeatPenalty, p.PresencePenalty, p.FrequencyPenalty = 1+rng.Float32(), rng.Float32(), rng.Float32()-0.3
		}
		if trial%5 != 0 {
			p.LogitBias = map[int32]float32{}
			for range rng.IntN(30) {
				p.LogitBias[int32(rng.IntN(vocab))] = rng.Float32()*20 - 10
			}
		}
		s := runtime.NewSampler(p)
		if trial%2 == 1 {
			s.SetMask(randomMask(rng, vocab, []float64{0.5, 0.02, 0.97}[trial%3]))
		}
		hist := make([]int32, rng.IntN(80))
		for i := range hist {
			hist[i] = int32(rng.IntN(vocab))
		}
		s.AddPrompt(hist[:len(hist)/2])
		for _, h := range hist[len(hist)/2:] {
			s.Accept(h)
		}
		logits := make([]float32, vocab)
		for i := range logits {
			logits[i] = float32(rng.IntN(16)) / 4 // ties
			if rng.IntN(50) == 0 {
				logits[i] = float32(math.Inf(-1))
			}
		}
		want, err := s.Sample(logits)
		d := device(t, s, vocab)
		for _, arm := range arms {
			got := mirror(t, arm, logits, d)
			if err != nil {
				require.ErrorIs(t, err, runtime.ErrNoCandidates)
				require.Equal(t, int32(codegen.SampleNone), got.Token, "trial %d", trial)
				continue
			}
			require.Equal(t, want, got.Token, "trial %d, %v", trial, arm)
		}
	}
}

// TestSampleMirrorLogprobs: the chosen token's logprob and the top-N of
// the raw logits equal runtime.Logprobs (ids exactly, ties by id; values
// to float32 rounding), whatever the transforms chose.
func TestSampleMirrorLogprobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for trial := range 60 {
		vocab := []int{1000, 20, 333}[trial%3]
		logits := make([]float32, vocab)
		for i := range logits {
			logits[i] = float32(rng.IntN(12))/3 - 2
		}
		logits[rng.IntN(vocab)] = float32(math.Inf(-1))
		s := runtime.NewSampler(runtime.SamplingParams{Temperature: float32(trial%2) * 0.9, TopK: 10, Seed: new(uint64(trial)),
			LogitBias: map[int32]float32{int32(trial % vocab): 50}})
		d := device(t, s, vocab)
		d.Logprobs, d.TopLogprobs = true, []int{1, 5, 20}[trial%3]
		got := mirror(t, codegen.BlockArm{Threads: []int{64, 1024}[trial%2]}, logits, d)
		require.GreaterOrEqual(t, got.Token, int32(0))
		lp, top := runtime.Logprobs(logits, got.Token, d.TopLogprobs)
		require.InDelta(t, lp, got.Logprob, 1e-5)
		require.Len(t, got.TopIDs, len(top))
		for j := range top {
			require.Equal(t, top[j].Token, got.TopIDs[j], "trial %d rank %d", trial, j)
			if math.IsInf(float64(top[j].Logprob), -1) {
				require.True(t, math.IsInf(float64(got.TopLogprobs[j]), -1))
				continue
			}
			require.InDelta(t, top[j].Logprob, got.TopLogprobs[j], 1e-5)
		}
	}
}

// TestSampleMirrorCodes: a NaN anywhere, a mask that leaves nothing, no
// finite logit.
func TestSampleMirrorCodes(t *testing.T) {
	const vocab = 300
	logits := make([]float32, vocab)
	d := &runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 1}}
	nan := slices.Clone(logits)
	nan[299] = float32(math.NaN())
	require.Equal(t, int32(codegen.SampleNaN), mirror(t, codegen.DefaultSampleArm, nan, d).Token)
	none := &runtime.DeviceSampling{Params: d.Params, Masked: true, Mask: make([]uint64, 5)}
	require.Equal(t, int32(codegen.SampleNone), mirror(t, codegen.DefaultSampleArm, logits, none).Token)
	inf := slices.Repeat([]float32{float32(math.Inf(-1))}, vocab)
	require.Equal(t, int32(codegen.SampleNoFinite), mirror(t, codegen.DefaultSampleArm, inf, d).Token)
	greedy := &runtime.DeviceSampling{}
	require.Equal(t, int32(codegen.SampleNoFinite), mirror(t, codegen.DefaultSampleArm, inf, greedy).Token)
}

// chiSquare2 is the two-sample chi-square statistic of equal-sized samples
// a and b over the categories either holds (those with fewer than 10
// draws in both together pooled into one) and its degrees of freedom.
func chiSquare2(a, b map[int32]int) (float64, int) {
	keys := map[int32]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var x2 float64
	var restA, restB, cats int
	for k := range keys {
		if n := a[k] + b[k]; n < 10 {
			restA, restB = restA+a[k], restB+b[k]
			continue
		}
		d := float64(a[k] - b[k])
		x2 += d * d / float64(a[k]+b[k])
		cats++
	}
	if restA+restB > 0 {
		d := float64(restA - restB)
		x2 += d * d / float64(restA+restB)
		cats++
	}
	return x2, max(cats-1, 1)
}

// chiSquareLimit is the χ² value a statistic of df degrees of freedom
// exceeds with probability about 1e-6 (Wilson–Hilferty).
func chiSquareLimit(df int) float64 {
	k := float64(df)
	c := 1 - 2/(9*k) + 4.75*math.Sqrt(2/(9*k))
	return k * c * c * c
}

// sampleCase is a distribution test's logits and sampler.
type sampleCase struct {
	name   string
	logits []float32
	p      runtime.SamplingParams
	mask   runtime.Mask
	hist   []int32 // prompt (first half) and accepted tokens (second half)
	n      int     // draws
}

func (c sampleCase) sampler() *runtime.Sampler {
	s := runtime.NewSampler(c.p)
	if c.mask != nil {
		s.SetMask(c.mask)
	}
	s.AddPrompt(c.hist[:len(c.hist)/2])
	for _, h := range c.hist[len(c.hist)/2:] {
		s.Accept(h)
	}
	return s
}

// cpuDraws draws c.n tokens with the CPU sampler (its own stream).
func (c sampleCase) cpuDraws(t *testing.T) map[int32]int {
	s := c.sampler()
	out := map[int32]int{}
	for range c.n {
		tok, err := s.Sample(c.logits)
		require.NoError(t, err)
		out[tok]++
	}
	return out
}

// mirrorDraws draws c.n tokens with the kernel's mirror, one token index
// each, after mutate (when set) has changed the device parameters.
func (c sampleCase) mirrorDraws(t *testing.T, arm codegen.BlockArm, mutate func(*runtime.DeviceSampling)) map[int32]int {
	d := device(t, c.sampler(), len(c.logits))
	if mutate != nil {
		mutate(d)
	}
	out := map[int32]int{}
	for i := range c.n {
		d.Index = uint64(i)
		got := mirror(t, arm, c.logits, d)
		require.GreaterOrEqual(t, got.Token, int32(0))
		out[got.Token]++
	}
	return out
}

// sampleCases are the distribution tests' settings over a vocabulary of
// 256: temperature with top-k, top-p, min-p, penalties with a bias, a
// bitset mask, and logits with ties at the top-k boundary.
func sampleCases() []sampleCase {
	rng := rand.New(rand.NewPCG(31, 32))
	const vocab = 256
	normal := func(scale float64) []float32 {
		x := make([]float32, vocab)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
		}
		return x
	}
	// 40 tokens at logits 0, -0.1, …, -3.9 in shuffled ids, the rest far
	// below: top-p 0.9's boundary token has probability about 1 %
	ramp := slices.Repeat([]float32{-30}, vocab)
	for k, id := range rng.Perm(vocab)[:40] {
		ramp[id] = -0.1 * float32(k)
	}
	ties := normal(1)
	for i := range ties {
		ties[i] = float32(math.Round(float64(ties[i])*2) / 2)
	}
	hist := make([]int32, 60)
	for i := range hist {
		hist[i] = int32(rng.IntN(vocab))
	}
	return []sampleCase{
		{name: "temperature 0.7, top-k 50", logits: normal(2), p: runtime.SamplingParams{Temperature: 0.7, TopK: 50, Seed: new(uint64(1))}, n: 20000},
		{name: "top-p 0.9", logits: ramp, p: runtime.SamplingParams{Temperature: 1, TopP: 0.9, Seed: new(uint64(2))}, n: 20000},
		{name: "min-p 0.05", logits: normal(1.5), p: runtime.SamplingParams{Temperature: 0.8, MinP: 0.05, Seed: new(uint64(3))}, n: 20000},
		{name: "penalties, bias, top-k 100, top-p 0.95", logits: normal(1), hist: hist, n: 20000,
			p: runtime.SamplingParams{Temperature: 0.9, TopK: 100, TopP: 0.95, RepeatPenalty: 1.3, PresencePenalty: 0.5, FrequencyPenalty: 0.3,
				PenaltyLastN: 40, LogitBias: map[int32]float32{5: 3, 6: -5, 200: 2.5}, Seed: new(uint64(4))}},
		{name: "bitset mask, top-p 0.8, min-p 0.02", logits: normal(1.5), mask: randomMask(rng, vocab, 0.5), n: 20000,
			p: runtime.SamplingParams{Temperature: 1.1, TopP: 0.8, MinP: 0.02, Seed: new(uint64(5))}},
		{name: "ties at the top-k boundary", logits: ties, p: runtime.SamplingParams{Temperature: 0.7, TopK: 20, Seed: new(uint64(6))}, n: 20000},
	}
}

// TestSampleMirrorDistribution (b): for each setting, the kernel's mirror
// and the CPU sampler draw from the same distribution (two-sample χ² at
// p ≈ 1e-6), and two deliberately wrong kernels fail the same test: the
// temperature applied twice, and top-p keeping one token too many.
func TestSampleMirrorDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("draws 260,000 tokens")
	}
	cases := sampleCases()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			arm := []codegen.BlockArm{codegen.DefaultSampleArm, {Threads: 64}, {Threads: 256}}[i%3]
			cpu := c.cpuDraws(t)
			x2, df := chiSquare2(cpu, c.mirrorDraws(t, arm, nil))
			t.Logf("χ² %.1f over %d degrees of freedom (limit %.1f)", x2, df, chiSquareLimit(df))
			require.Less(t, x2, chiSquareLimit(df), "χ² %.1f over %d degrees of freedom", x2, df)
		})
	}
	t.Run("mutant: temperature twice", func(t *testing.T) {
		c := cases[0]
		x2, df := chiSquare2(c.cpuDraws(t), c.mirrorDraws(t, codegen.DefaultSampleArm, func(d *runtime.DeviceSampling) {
			d.Params.Temperature *= d.Params.Temperature
		}))
		t.Logf("χ² %.1f over %d degrees of freedom (limit %.1f)", x2, df, chiSquareLimit(df))
		require.Greater(t, x2, chiSquareLimit(df), "χ² %.1f over %d degrees of freedom", x2, df)
	})
	t.Run("mutant: top-p one token too many", func(t *testing.T) {
		c := cases[1]
		// the mass of the CPU's kept tokens and of one more
		var ps []float64
		for _, v := range c.logits {
			ps = append(ps, math.Exp(float64(v)))
		}
		slices.SortFunc(ps, func(a, b float64) int { return -cmpFloat(a, b) })
		var sum, total float64
		for _, p := range ps {
			total += p
		}
		var next float32
		for k, p := range ps {
			sum += p
			if sum/total >= float64(c.p.TopP) {
				next = float32((sum + ps[k+1]/2) / total) // between the kept mass and one more token's
				break
			}
		}
		x2, df := chiSquare2(c.cpuDraws(t), c.mirrorDraws(t, codegen.DefaultSampleArm, func(d *runtime.DeviceSampling) { d.Params.TopP = next }))
		t.Logf("χ² %.1f over %d degrees of freedom (limit %.1f)", x2, df, chiSquareLimit(df))
		require.Greater(t, x2, chiSquareLimit(df), "χ² %.1f over %d degrees of freedom", x2, df)
	})
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestSampleMirrorSeeded (c): a seed and token index choose the same token
// every time, whatever the block size and wherever the sequence's data
// sits in the step's buffers (other sequences packed before it); another
// seed or index chooses differently somewhere.
func TestSampleMirrorSeeded(t *testing.T) {
	c := sampleCases()[3]
	d := device(t, c.sampler(), len(c.logits))
	other := device(t, sampleCases()[4].sampler(), len(c.logits))
	alone := func(arm codegen.BlockArm, idx uint64) int32 {
		d.Index = idx
		return mirror(t, arm, c.logits, d).Token
	}
	// the same sequence third in a step, after two others' pairs and mask
	behind := func(idx uint64) int32 {
		d.Index = idx
		p := newSamplePack(len(c.logits))
		p.reset(3)
		p.set(0, other)
		p.set(1, other)
		p.set(2, d)
		out := codegen.RefSample(len(c.logits), codegen.DefaultSampleArm, c.logits, p.rec[2*codegen.SampleRecordWords:], p.bias, p.pen, p.mask)
		return codegen.DecodeSampleOut(out).Token
	}
	var seq []int32
	for idx := range uint64(200) {
		tok := alone(codegen.DefaultSampleArm, idx)
		require.Equal(t, tok, alone(codegen.DefaultSampleArm, idx))
		require.Equal(t, tok, alone(codegen.BlockArm{Threads: 64}, idx))
		require.Equal(t, tok, behind(idx))
		seq = append(seq, tok)
	}
	d.Seed++
	var reseeded []int32
	for idx := range uint64(200) {
		reseeded = append(reseeded, alone(codegen.DefaultSampleArm, idx))
	}
	require.NotEqual(t, seq, reseeded)
	require.Greater(t, len(slices.Compact(slices.Sorted(slices.Values(seq)))), 5, "the index advances the stream")
}
