package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNgramDraft(t *testing.T) {
	all := []int32{5, 6, 7, 8, 9, 1, 2, 6, 7}
	// the last two tokens (6, 7) occurred at 1: what followed them
	require.Equal(t, []int32{8, 9, 1}, ngramDraft(all, 3))
	require.Equal(t, []int32{8, 9, 1, 2, 6, 7, 8}, ngramDraft(all, 7))
	require.Equal(t, []int32{8}, ngramDraft(all, 1))
	// the latest occurrence wins, and a continuation that reaches the end
	// goes on with what it drafted (4 1 2 4 1 2 …: the period of the text)
	all = []int32{1, 2, 3, 1, 2, 4, 1, 2}
	require.Equal(t, []int32{4, 1, 2, 4, 1}, ngramDraft(all, 5))
	require.Equal(t, []int32{7, 7, 7, 7}, ngramDraft([]int32{5, 7, 7, 7}, 4), "a repeated token")
	require.Nil(t, ngramDraft([]int32{1, 2, 3}, 4), "nothing repeats")
	require.Nil(t, ngramDraft([]int32{1}, 4))
}

func TestSpecAdapt(t *testing.T) {
	var sp specState
	sp.adapt(4, 4, 6)
	require.Equal(t, 5, sp.k, "all accepted: one more")
	sp.adapt(5, 5, 5)
	require.Equal(t, 5, sp.k, "never past the maximum")
	sp.adapt(1, 5, 5)
	require.Equal(t, 2, sp.k)
	sp.adapt(0, 2, 5)
	require.Equal(t, 1, sp.k, "at least one")
}

// speculateDist draws n tokens of Speculate for draft over logits with
// the sampler's parameters and returns their frequencies.
func speculateDist(t *testing.T, p SamplingParams, logits []float32, draft int32, n int, spec func(*Sampler, []float32, int32) (int32, error)) []float64 {
	t.Helper()
	seed := uint64(42)
	p.Seed = &seed
	s := NewSampler(p)
	freq := make([]float64, len(logits))
	for range n {
		tok, err := spec(s, logits, draft)
		require.NoError(t, err)
		freq[tok]++
	}
	return freq
}

// chiSquare is Σ (observed - expected)² / expected over the tokens the
// reference gives probability, and +Inf when a token it rules out occurs.
func chiSquare(freq []float64, ref []candidate, n int) float64 {
	expected := make([]float64, len(freq))
	for _, c := range ref {
		expected[c.id] = c.p * float64(n)
	}
	x := 0.0
	for id, o := range freq {
		e := expected[id]
		if e == 0 {
			if o > 0 {
				return math.Inf(1)
			}
			continue
		}
		x += (o - e) * (o - e) / e
	}
	return x
}

// TestSpeculateDistribution: the tokens Speculate returns for a draft are
// distributed as the sampler's own (the draft accepted with probability
// p(draft), else a draw from the rest), for drafts the target likes, ones
// it dislikes and ones it rules out; a rule that accepts every draft fails
// the same test.
func TestSpeculateDistribution(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 40)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 1.5)
	}
	const n = 60000
	for _, p := range []SamplingParams{{Temperature: 1}, {Temperature: 0.7, TopK: 12}, {Temperature: 1.2, TopP: 0.8}} {
		ref, err := NewSampler(p).candidates(logits)
		require.NoError(t, err)
		ref = append([]candidate(nil), ref...)
		likely, unlikely := ref[0].id, ref[len(ref)-1].id
		out := int32(-1) // a token the filters rule out, where there is one
		for id := range logits {
			in := false
			for _, c := range ref {
				in = in || c.id == int32(id)
			}
			if !in {
				out = int32(id)
				break
			}
		}
		speculate := func(s *Sampler, l []float32, d int32) (int32, error) {
			tok, _, err := s.Speculate(l, d)
			return tok, err
		}
		// degrees of freedom len(ref)-1; 3.5σ above the mean of the χ² distribution
		limit := float64(len(ref)-1) + 3.5*math.Sqrt(2*float64(len(ref)-1)) + 10
		for _, d := range []int32{likely, unlikely, out, -1} {
			if d < 0 && out < 0 {
				continue
			}
			x := chiSquare(speculateDist(t, p, logits, d, n, speculate), ref, n)
			require.Less(t, x, limit, "params %+v, draft %d", p, d)
		}
		// the mutant: always accept the draft
		acceptAll := func(s *Sampler, l []float32, d int32) (int32, error) {
			if s.rng.Float64() < 0.5 {
				return d, nil
			}
			return s.Sample(l)
		}
		x := chiSquare(speculateDist(t, p, logits, unlikely, n, acceptAll), ref, n)
		require.Greater(t, x, limit, "a biased rule must fail: params %+v", p)
	}
	// greedy: accepted exactly when the draft is the argmax
	s := NewSampler(SamplingParams{})
	best := Argmax(logits)
	tok, ok, err := s.Speculate(logits, best)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, best, tok)
	tok, ok, err = s.Speculate(logits, (best+1)%40)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, best, tok)
}

func TestPromptChunk(t *testing.T) {
	for _, c := range []struct{ rem, chunk, budget, want int }{
		{1000, 512, 2048, 512},
		{513, 512, 2048, 513}, // a short tail rides with the chunk
		{544, 512, 2048, 544},
		{545, 512, 2048, 512}, // a tail above chunk/16 is a chunk of its own
		{513, 512, 512, 511},  // the budget holds 512: not 512 and a lone last token
		{512, 512, 2048, 512},
		{3, 2, 2048, 2}, // a chunk of two cannot leave two
		{5, 512, 4, 3},
		{1, 512, 2048, 1},
		{7, 512, 0, 0},
	} {
		require.Equal(t, c.want, promptChunk(c.rem, c.chunk, c.budget), "%+v", c)
	}
}
