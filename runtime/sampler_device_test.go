package runtime

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// applyDevice applies a DeviceSampling's steps 1–4 to a copy of logits as
// its documentation states them, independently of the Sampler: the mask's
// bits, the bias entries, then the penalty counts (llama.cpp's
// repetition penalty, OpenAI's presence and frequency).
func applyDevice(logits []float32, d *DeviceSampling) []float32 {
	x := slices.Clone(logits)
	if d.Masked {
		for i := range x {
			if i/64 >= len(d.Mask) || d.Mask[i/64]>>(i%64)&1 == 0 {
				x[i] = float32(math.Inf(-1))
			}
		}
	}
	for _, b := range d.Bias {
		x[b.Token] += b.Bias
	}
	p := d.Params
	for _, c := range d.Penalties {
		v := x[c.Token]
		if r := p.RepeatPenalty; r > 0 && r != 1 {
			if v > 0 {
				v /= r
			} else {
				v *= r
			}
		}
		if c.Count > 0 {
			v -= p.PresencePenalty + p.FrequencyPenalty*float32(c.Count)
		}
		x[c.Token] = v
	}
	return x
}

// samplerSteps is what the Sampler itself makes of logits in steps 1–4
// (its Apply path: mask, bias, penalties).
func samplerSteps(s *Sampler, logits []float32) []float32 {
	x := slices.Clone(logits)
	if s.mask != nil {
		s.mask.Apply(x)
	}
	for id, b := range s.p.LogitBias {
		if id >= 0 && int(id) < len(x) {
			x[id] += b
		}
	}
	s.applyPenalties(x)
	return x
}

// TestSamplerDevice: the host's preparation of device sampling (penalty
// counts over the history window, the bias list, the mask's bits, the
// seed and the token index) transforms logits exactly as the Sampler
// does, over random windows, prompts, outputs, biases (some outside the
// vocabulary) and bitset masks that change with every token.
func TestSamplerDevice(t *testing.T) {
	const vocab = 300
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 200 {
		p := SamplingParams{Temperature: rng.Float32(), Seed: seed(uint64(trial)), PenaltyLastN: rng.IntN(40) - 5}
		switch trial % 4 {
		case 0:
			p.RepeatPenalty = 1 + rng.Float32()
		case 1:
			p.PresencePenalty, p.FrequencyPenalty = rng.Float32(), rng.Float32()-0.5
		case 2:
			p.RepeatPenalty, p.PresencePenalty, p.FrequencyPenalty = 0.8, 1.5, 0.25
		}
		if trial%3 == 0 {
			p.LogitBias = map[int32]float32{}
			for range 1 + rng.IntN(20) {
				p.LogitBias[int32(rng.IntN(vocab+20))-10] = rng.Float32()*200 - 100
			}
		}
		s := NewSampler(p)
		var m *walkMask
		if trial%2 == 0 {
			m = newWalkMask(vocab, uint64(trial))
			s.SetMask(m)
		}
		prompt := make([]int32, 1+rng.IntN(30))
		for i := range prompt {
			prompt[i] = int32(rng.IntN(vocab / 4))
		}
		s.AddPrompt(prompt)
		var d DeviceSampling
		for step := range 1 + rng.IntN(25) {
			require.True(t, s.Device(&d, vocab))
			require.Equal(t, *p.Seed, d.Seed)
			require.Equal(t, uint64(step), d.Index, "the index counts accepted tokens")
			require.Nil(t, d.Params.LogitBias)
			require.Equal(t, p.Temperature, d.Params.Temperature)
			require.True(t, slices.IsSortedFunc(d.Bias, func(a, b TokenBias) int { return int(a.Token - b.Token) }))
			require.True(t, slices.IsSortedFunc(d.Penalties, func(a, b TokenCount) int { return int(a.Token - b.Token) }))
			for j := 1; j < len(d.Penalties); j++ {
				require.NotEqual(t, d.Penalties[j-1].Token, d.Penalties[j].Token, "penalised ids are unique")
			}
			for _, b := range d.Bias {
				require.True(t, b.Token >= 0 && b.Token < vocab, "bias of %d outside the vocabulary", b.Token)
			}
			require.Equal(t, m != nil, d.Masked)
			require.LessOrEqual(t, len(d.Mask), (vocab+63)/64)
			logits := make([]float32, vocab)
			for i := range logits {
				logits[i] = rng.Float32()*8 - 4
			}
			require.Equal(t, samplerSteps(s, logits), applyDevice(logits, &d), "trial %d step %d", trial, step)
			s.Accept(int32(rng.IntN(vocab)))
		}
	}
	// a mask that can only Apply itself stays on the host
	s := NewSampler(SamplingParams{})
	s.SetMask(applyOnly{newWalkMask(vocab, 1)})
	require.False(t, s.Device(&DeviceSampling{}, vocab))
	// without penalties nothing is counted
	s = NewSampler(SamplingParams{RepeatPenalty: 1})
	s.AddPrompt([]int32{1, 2, 3})
	var d DeviceSampling
	require.True(t, s.Device(&d, vocab))
	require.Empty(t, d.Penalties)
	require.False(t, d.Masked)
}
