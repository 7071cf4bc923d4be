package codegen

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPhiloxKnownAnswers: Philox4x32-10 gives the known-answer vectors of
// its paper's reference implementation.
func TestPhiloxKnownAnswers(t *testing.T) {
	for _, tc := range []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{}, [2]uint32{}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}, [2]uint32{^uint32(0), ^uint32(0)},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		require.Equal(t, tc.want, Philox4x32(tc.ctr, tc.key))
	}
	require.NotEqual(t, SampleUniform(1, 0), SampleUniform(1, 1), "the index advances the stream")
	require.NotEqual(t, SampleUniform(1, 0), SampleUniform(1<<32, 0), "both halves of the seed count")
}

func TestSampleRecordRoundTrip(t *testing.T) {
	r := SampleRecord{Active: true, Masked: true, Logprobs: true, TopK: 40, TopP: 0.9, MinP: 0.05, InvTemp: 1 / 0.7,
		Repeat: 1.1, Presence: 0.5, Frequency: -0.25, Seed: 0x0123456789abcdef, Index: 1<<33 + 5,
		BiasOff: 3, BiasN: 4, PenOff: 5, PenN: 6, MaskOff: 7, MaskWords: 8, TopN: 20}
	words := make([]uint32, SampleRecordWords+1)
	words[SampleRecordWords] = 0xdead
	r.Encode(words)
	require.Equal(t, r, DecodeSampleRecord(words))
	require.Equal(t, uint32(0xdead), words[SampleRecordWords], "Encode writes one record only")
	r.Greedy, r.Masked = true, false
	r.Encode(words)
	require.Equal(t, r, DecodeSampleRecord(words))
	require.False(t, DecodeSampleRecord(make([]uint32, SampleRecordWords)).Active, "a zero record is inactive")
}

// TestCeilFrac: ⌈f·total⌉ against exact rational arithmetic, down to
// denormal fractions and totals near 2^63.
func TestCeilFrac(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fs := []float32{0.5, 0.9, 0.95, math.Nextafter32(1, 0), 1e-30, math.Float32frombits(1), math.Float32frombits(0x7fffff)}
	for range 200 {
		fs = append(fs, rng.Float32())
	}
	totals := []uint64{1, 3, 1 << 40, 1<<63 - 1, 12345678901234567}
	for range 50 {
		totals = append(totals, rng.Uint64()>>rng.IntN(64))
	}
	for _, f := range fs {
		if !(f > 0 && f < 1) {
			continue
		}
		for _, tot := range totals {
			exact := new(big.Rat).Mul(new(big.Rat).SetFloat64(float64(f)), new(big.Rat).SetInt(new(big.Int).SetUint64(tot)))
			q, rem := new(big.Int).QuoRem(exact.Num(), exact.Denom(), new(big.Int))
			if rem.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			require.Equal(t, q.Uint64(), ceilFrac(f, tot), "f=%g total=%d", f, tot)
		}
	}
}

// refRow is a row for the mirror's pieces: values with many ties.
func refRow(rng *rand.Rand, vocab, levels int) []float32 {
	x := make([]float32, vocab)
	for i := range x {
		x[i] = float32(rng.IntN(levels)) / 4
	}
	return x
}

// TestSampleSearchAndTies: the mirror's search finds the k-th largest key
// and its tie cut keeps exactly the lowest-id ties, against a sort, for
// layouts whose warps own one round, many rounds, or nothing.
func TestSampleSearchAndTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		vocab   int
		threads int
	}{{1000, 1024}, {1000, 64}, {4099, 256}, {70, 128}} {
		for trial := range 20 {
			x := refRow(rng, tc.vocab, 1+trial*3)
			s := &refSampler{lay: SampleLayoutOf(tc.vocab, BlockArm{Threads: tc.threads}), r: SampleRecord{InvTemp: 1}, x: x, src: x,
				w: make([]float32, tc.vocab), ck: tc.vocab, cp: tc.vocab}
			ids := make([]int, tc.vocab)
			for i := range ids {
				ids[i] = i
			}
			slices.SortStableFunc(ids, func(a, b int) int { // by value, then id: the CPU sampler's order
				switch {
				case x[a] > x[b]:
					return -1
				case x[a] < x[b]:
					return 1
				}
				return 0
			})
			maxKey := ordKey(slices.Max(x))
			for _, k := range []int{1, 2, 7, tc.vocab / 3, tc.vocab - 1} {
				tk := s.search(keyRaw, uint64(k), maxKey)
				require.Equal(t, ordKey(x[ids[k-1]]), tk, "k=%d", k)
				cut := s.tieCut(keyRaw, tk, uint64(k))
				var kept []int
				for i, v := range x {
					if key := ordKey(v); key > tk || (key == tk && i <= cut) {
						kept = append(kept, i)
					}
				}
				want := slices.Clone(ids[:k])
				slices.Sort(want)
				require.Equal(t, want, kept, "vocab %d threads %d k=%d", tc.vocab, tc.threads, k)
			}
		}
	}
}

// TestSampleFindRank: the three-level rank search finds the element where
// the running weight in id order passes the target, for every target at
// the edges of every element's weight.
func TestSampleFindRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ vocab, threads int }{{1000, 1024}, {1000, 64}, {5000, 256}, {33, 32}} {
		lay := SampleLayoutOf(tc.vocab, BlockArm{Threads: tc.threads})
		s := &refSampler{lay: lay, r: SampleRecord{MinP: 0}, w: make([]float32, tc.vocab), cp: tc.vocab}
		for i := range s.w {
			if rng.IntN(3) > 0 {
				s.w[i] = rng.Float32()
			}
		}
		wt := make([]uint64, lay.Warps)
		var total uint64
		for i, e := range s.w {
			wt[s.warpOf(i)] += weightFx(e)
			total += weightFx(e)
		}
		var run uint64
		for i, e := range s.w {
			q := weightFx(e)
			if q == 0 {
				continue
			}
			for _, target := range []uint64{run, run + q/2, run + q - 1} {
				require.Equal(t, i, s.findRank(rankDraw, target, wt), "target %d of %d", target, total)
			}
			run += q
		}
		require.Equal(t, total, run)
	}
}

// TestSampleLayout: the warps' chunks cover the vocabulary, rounds are
// whole batches of loads, and a split covers a chunk.
func TestSampleLayout(t *testing.T) {
	for _, v := range []int{1, 31, 1000, 32000, 128256, 151936, 262144} {
		for _, th := range []int{32, 256, 1024} {
			l := SampleLayoutOf(v, BlockArm{Threads: th})
			require.GreaterOrEqual(t, l.Warps*l.Chunk(), v)
			require.Less(t, (l.Warps)*(l.Chunk()-32*sampleU), v, "no whole batch of rounds is empty in every warp")
			require.Zero(t, l.Rounds%sampleU)
			require.GreaterOrEqual(t, l.Warps*l.Split, l.Rounds)
		}
	}
	_, err := Sample(sampleMaxVocab+1, DefaultSampleArm)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = Sample(1000, BlockArm{Threads: 48})
	require.ErrorIs(t, err, ErrUnsupported)
}

// TestSampleCompactSearch: a search over the elements that can hold its
// threshold (top-p: weights of at least (total - need) / vocab; top-k and
// the top logprobs: within sampleCompactSpan of the largest) finds the
// row-wide search's threshold, for peaked and flat rows, in shared memory
// and with the row searched instead (too many candidates, or too few).
func TestSampleCompactSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	compacted, fell := map[int]int{}, map[int]int{}
	for _, vocab := range []int{1000, 32000} {
		for _, spread := range []float64{0.01, 0.5, 2, 8} {
			x := make([]float32, vocab)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * spread * 4)
			}
			if spread > 0.1 {
				x[rng.IntN(vocab)] = 40 // a peak: the rest within the span or far below it
			}
			w := make([]float32, vocab)
			ymax := slices.Max(x)
			var total uint64
			for i, v := range x {
				w[i] = expf(v - ymax)
				total += weightFx(w[i])
			}
			s := &refSampler{lay: SampleLayoutOf(vocab, DefaultSampleArm), r: SampleRecord{InvTemp: 1}, x: x, src: x, w: w, ck: vocab, cp: vocab}
			count := func(mode int, kl uint32, lq uint64) (n int, held uint64) {
				for _, v := range s.row(mode) {
					if k, q := s.key(mode, v); q > 0 && ((mode == keyW && q >= lq) || (mode != keyW && k >= kl)) {
						n, held = n+1, held+q
					}
				}
				return n, held
			}
			note := func(mode int, need uint64, kl uint32, lq uint64) {
				if n, held := count(mode, kl, lq); n <= sampleCompact && held >= need {
					compacted[mode]++
				} else {
					fell[mode]++
				}
			}
			for _, p := range []float32{0.05, 0.5, 0.9, 0.95, 0.999} {
				need := ceilFrac(p, total)
				lq := (total - need) / uint64(vocab)
				want := s.search(keyW, need, math.Float32bits(1))
				require.Equal(t, want, s.compactSearch(keyW, need, math.Float32bits(1), 0, lq), "top-p: vocab %d spread %g p %g", vocab, spread, p)
				note(keyW, need, 0, lq)
			}
			for _, mode := range []int{keyY, keyRaw} {
				hi := ordKey(ymax)
				kl := ordKey(float32(ymax - sampleCompactSpan))
				for _, k := range []uint64{1, 20, 40, 500, uint64(vocab) - 1} {
					want := s.search(mode, k, hi)
					require.Equal(t, want, s.compactSearch(mode, k, hi, kl, 0), "mode %d: vocab %d spread %g k %d", mode, vocab, spread, k)
					note(mode, k, kl, 0)
				}
			}
		}
	}
	for _, mode := range []int{keyW, keyY, keyRaw} {
		require.Positive(t, compacted[mode], "mode %d: some searches in shared memory", mode)
		require.Positive(t, fell[mode], "mode %d: some rows searched whole", mode)
	}
}
