package runtime

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func seed(v uint64) *uint64 { return &v }

// probs returns the final candidate distribution as a map id → probability.
func probs(t *testing.T, s *Sampler, logits []float32) map[int32]float64 {
	t.Helper()
	cands, err := s.candidates(logits)
	require.NoError(t, err)
	out := make(map[int32]float64, len(cands))
	for _, c := range cands {
		out[c.id] = c.p
	}
	return out
}

func softmaxOf(l ...float64) []float64 {
	max := math.Inf(-1)
	for _, v := range l {
		max = math.Max(max, v)
	}
	sum := 0.0
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = math.Exp(v - max)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func TestSamplerFilters(t *testing.T) {
	// Logits 3 > 2 > 1 > 0 > -1 for ids 1, 3, 0, 4, 2.
	logits := []float32{1, 3, -1, 2, 0}
	p5 := softmaxOf(3, 2, 1, 0, -1) // by rank
	tests := []struct {
		name string
		p    SamplingParams
		want map[int32]float64
	}{
		{"greedy", SamplingParams{}, map[int32]float64{1: 1}},
		{"temperature 1, no filter", SamplingParams{Temperature: 1},
			map[int32]float64{1: p5[0], 3: p5[1], 0: p5[2], 4: p5[3], 2: p5[4]}},
		{"temperature 2 flattens", SamplingParams{Temperature: 2}, func() map[int32]float64 {
			q := softmaxOf(1.5, 1, 0.5, 0, -0.5)
			return map[int32]float64{1: q[0], 3: q[1], 0: q[2], 4: q[3], 2: q[4]}
		}()},
		{"top-k 2", SamplingParams{Temperature: 1, TopK: 2}, func() map[int32]float64 {
			q := softmaxOf(3, 2)
			return map[int32]float64{1: q[0], 3: q[1]}
		}()},
		{"top-k 1 is greedy", SamplingParams{Temperature: 1, TopK: 1}, map[int32]float64{1: 1}},
		{"top-p keeps the smallest set reaching p", SamplingParams{Temperature: 1, TopP: float32(p5[0] + p5[1] - 1e-4)},
			func() map[int32]float64 {
				q := softmaxOf(3, 2)
				return map[int32]float64{1: q[0], 3: q[1]}
			}()},
		{"top-p just above two tokens takes three", SamplingParams{Temperature: 1, TopP: float32(p5[0] + p5[1] + 1e-4)},
			func() map[int32]float64 {
				q := softmaxOf(3, 2, 1)
				return map[int32]float64{1: q[0], 3: q[1], 0: q[2]}
			}()},
		{"min-p relative to the best", SamplingParams{Temperature: 1, MinP: 0.3},
			// p(2)/p(3) = e^-1 ≈ 0.37 ≥ 0.3; p(1)/p(3) = e^-2 ≈ 0.14 < 0.3.
			func() map[int32]float64 {
				q := softmaxOf(3, 2)
				return map[int32]float64{1: q[0], 3: q[1]}
			}()},
		{"logit bias", SamplingParams{LogitBias: map[int32]float32{2: 10}}, map[int32]float64{2: 1}},
		{"logit bias -inf bans", SamplingParams{LogitBias: map[int32]float32{1: float32(math.Inf(-1))}},
			map[int32]float64{3: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := probs(t, NewSampler(tc.p), logits)
			require.Len(t, got, len(tc.want))
			for id, p := range tc.want {
				require.InDelta(t, p, got[id], 1e-6, "token %d", id)
			}
		})
	}
}

func TestSamplerGreedyTiesLowestID(t *testing.T) {
	tok, err := NewSampler(SamplingParams{}).Sample([]float32{0, 5, 1, 5})
	require.NoError(t, err)
	require.Equal(t, int32(1), tok)
}

func TestSamplerNoCandidates(t *testing.T) {
	inf := float32(math.Inf(-1))
	for _, p := range []SamplingParams{{}, {Temperature: 1}} {
		_, err := NewSampler(p).Sample([]float32{inf, inf})
		require.ErrorIs(t, err, ErrNoCandidates)
	}
}

type banMask struct {
	banned   map[int32]bool
	accepted []int32
}

func (m *banMask) Apply(l []float32) {
	for id := range m.banned {
		l[id] = float32(math.Inf(-1))
	}
}
func (m *banMask) Accept(tok int32) { m.accepted = append(m.accepted, tok) }

func TestSamplerMask(t *testing.T) {
	m := &banMask{banned: map[int32]bool{1: true, 3: true}}
	s := NewSampler(SamplingParams{Temperature: 1, Seed: seed(1)})
	s.SetMask(m)
	logits := []float32{1, 3, -1, 2, 0}
	for range 200 {
		tok, err := s.Sample(logits)
		require.NoError(t, err)
		require.NotContains(t, []int32{1, 3}, tok)
		s.Accept(tok)
	}
	require.Len(t, m.accepted, 200)
	require.Equal(t, []float32{1, 3, -1, 2, 0}, logits, "Sample must not modify the logits")
}

func TestSamplerPenalties(t *testing.T) {
	logits := []float32{2, -2, 1, 4, -1, 3}
	tests := []struct {
		name      string
		p         SamplingParams
		prompt    []int32
		generated []int32
		want      []float32
	}{
		{"repetition divides positive, multiplies negative, prompt counts",
			SamplingParams{RepeatPenalty: 2}, []int32{0, 1}, []int32{3},
			[]float32{1, -4, 1, 2, -1, 3}},
		{"repetition window: last N tokens only",
			SamplingParams{RepeatPenalty: 2, PenaltyLastN: 2}, []int32{0, 1}, []int32{3},
			[]float32{2, -4, 1, 2, -1, 3}},
		{"repetition counts a token once",
			SamplingParams{RepeatPenalty: 2}, nil, []int32{5, 5, 5},
			[]float32{2, -2, 1, 4, -1, 1.5}},
		{"presence once per generated token, prompt ignored",
			SamplingParams{PresencePenalty: 0.5}, []int32{0}, []int32{2, 2, 4},
			[]float32{2, -2, 0.5, 4, -1.5, 3}},
		{"frequency scales with count",
			SamplingParams{FrequencyPenalty: 0.25}, []int32{0}, []int32{2, 2, 4},
			[]float32{2, -2, 0.5, 4, -1.25, 3}},
		{"all three in order",
			SamplingParams{RepeatPenalty: 2, PresencePenalty: 1, FrequencyPenalty: 1}, []int32{1}, []int32{3, 3},
			[]float32{2, -4, 1, 2 - 1 - 2, -1, 3}},
		{"penalty 1 is off", SamplingParams{RepeatPenalty: 1}, []int32{0, 1, 2}, []int32{3},
			[]float32{2, -2, 1, 4, -1, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSampler(tc.p)
			s.AddPrompt(tc.prompt)
			for _, g := range tc.generated {
				s.Accept(g)
			}
			x := append([]float32(nil), logits...)
			s.applyPenalties(x)
			require.Equal(t, tc.want, x)
		})
	}
}

func TestSamplerSeedReproducible(t *testing.T) {
	logits := make([]float32, 64)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	draw := func(sd uint64) []int32 {
		s := NewSampler(SamplingParams{Temperature: 1, TopP: 0.95, Seed: seed(sd)})
		var out []int32
		for range 100 {
			tok, err := s.Sample(logits)
			require.NoError(t, err)
			s.Accept(tok)
			out = append(out, tok)
		}
		return out
	}
	require.Equal(t, draw(42), draw(42))
	require.NotEqual(t, draw(42), draw(43))
}

// TestSamplerDistribution checks draws against the softmax with a
// chi-square statistic (fixed seed, so the test is deterministic).
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{0.5, 1.5, -0.5, 1, 0, 2}
	want := softmaxOf(0.5, 1.5, -0.5, 1, 0, 2)
	s := NewSampler(SamplingParams{Temperature: 1, Seed: seed(7)})
	const n = 60000
	counts := make([]int, len(logits))
	for range n {
		tok, err := s.Sample(logits)
		require.NoError(t, err)
		counts[tok]++
	}
	chi2 := 0.0
	for i, c := range counts {
		exp := want[i] * n
		chi2 += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	// 5 degrees of freedom: P(χ² > 20.5) ≈ 0.001.
	require.Less(t, chi2, 20.5, "counts %v", counts)

	// With top-k 2 only the two best tokens appear, in their renormalised ratio.
	s = NewSampler(SamplingParams{Temperature: 1, TopK: 2, Seed: seed(7)})
	counts = make([]int, len(logits))
	for range n {
		tok, _ := s.Sample(logits)
		counts[tok]++
	}
	require.Equal(t, n, counts[5]+counts[1])
	ratio := float64(counts[5]) / float64(counts[1])
	require.InDelta(t, math.Exp(0.5), ratio, 0.05) // logits 2 and 1.5
}

func TestLogprobs(t *testing.T) {
	logits := []float32{1, 3, -1, 3, 0}
	p := softmaxOf(1, 3, -1, 3, 0)
	lp, top := Logprobs(logits, 2, 3)
	require.InDelta(t, math.Log(p[2]), float64(lp), 1e-5)
	require.Len(t, top, 3)
	require.Equal(t, []int32{1, 3, 0}, []int32{top[0].Token, top[1].Token, top[2].Token})
	for _, c := range top {
		require.InDelta(t, math.Log(p[c.Token]), float64(c.Logprob), 1e-5)
	}
	_, none := Logprobs(logits, 0, 0)
	require.Nil(t, none)
	_, all := Logprobs(logits, 0, 50)
	require.Len(t, all, 5)
}

// referenceCandidates is the plain definition of steps 6–9: sort all, cut.
func referenceCandidates(logits []float32, p SamplingParams) map[int32]float64 {
	type c struct {
		id int32
		l  float64
	}
	var cs []c
	for i, v := range logits {
		cs = append(cs, c{int32(i), float64(v) / float64(p.Temperature)})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].l > cs[j].l })
	if p.TopK > 0 && p.TopK < len(cs) {
		cs = cs[:p.TopK]
	}
	norm := func(ps []float64) {
		sum := 0.0
		for _, v := range ps {
			sum += v
		}
		for i := range ps {
			ps[i] /= sum
		}
	}
	ps := make([]float64, len(cs))
	for i := range cs {
		ps[i] = math.Exp(cs[i].l - cs[0].l)
	}
	norm(ps)
	if p.TopP > 0 && p.TopP < 1 {
		sum := 0.0
		for i := range ps {
			sum += ps[i]
			if sum >= float64(p.TopP) {
				cs, ps = cs[:i+1], ps[:i+1]
				break
			}
		}
		norm(ps)
	}
	if p.MinP > 0 {
		n := 0
		for n < len(ps) && ps[n] >= float64(p.MinP)*ps[0] {
			n++
		}
		cs, ps = cs[:n], ps[:n]
		norm(ps)
	}
	out := map[int32]float64{}
	for i := range cs {
		out[cs[i].id] = ps[i]
	}
	return out
}

// TestSamplerMatchesReference compares the partial-sort fast paths with the
// plain definition on large random vocabularies, peaked and flat.
func TestSamplerMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, scale := range []float32{8, 0.01} { // peaked; nearly flat
		logits := make([]float32, 5000)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64()) * scale
		}
		for _, p := range []SamplingParams{
			{Temperature: 1, TopK: 40},
			{Temperature: 0.7, TopP: 0.9},
			{Temperature: 1.3, TopK: 300, TopP: 0.8},
			{Temperature: 1, MinP: 0.05},
			{Temperature: 1, TopP: 0.95, MinP: 0.1},
			{Temperature: 1, TopK: 4999, TopP: 0.5},
		} {
			want := referenceCandidates(logits, p)
			got := probs(t, NewSampler(p), logits)
			require.Len(t, got, len(want), "%+v scale %v", p, scale)
			for id, pr := range want {
				require.InDelta(t, pr, got[id], 1e-9, "%+v token %d", p, id)
			}
		}
	}
}
