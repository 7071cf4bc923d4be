package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// walkMask allows a pseudo-random set of tokens that changes with every
// accepted token (some steps: one token, or none but a fixed one), through
// Apply and AllowedBits alike.
type walkMask struct {
	vocab   int // tokens the mask knows; logits past it are never allowed
	state   uint64
	allowed []bool
}

func newWalkMask(vocab int, seed uint64) *walkMask {
	m := &walkMask{vocab: vocab, state: seed}
	m.refresh()
	return m
}

func (m *walkMask) refresh() {
	r := rand.New(rand.NewPCG(m.state, 99))
	m.allowed = make([]bool, m.vocab)
	switch m.state % 5 {
	case 0:
		m.allowed[r.IntN(m.vocab)] = true
	default:
		share := []float64{0, 0.02, 0.5, 0.97}[m.state%4]
		for i := range m.allowed {
			m.allowed[i] = r.Float64() < share
		}
		m.allowed[m.vocab-1] = true
	}
}

func (m *walkMask) Apply(logits []float32) {
	for i := range logits {
		if i >= m.vocab || !m.allowed[i] {
			logits[i] = float32(math.Inf(-1))
		}
	}
}

func (m *walkMask) Accept(tok int32) {
	m.state = m.state*6364136223846793005 + uint64(tok) + 1
	m.refresh()
}

func (m *walkMask) AllowedBits(dst []uint64) []uint64 {
	dst = append(dst[:0], make([]uint64, (m.vocab+63)/64)...)
	for i, ok := range m.allowed {
		if ok {
			dst[i>>6] |= 1 << (i & 63)
		}
	}
	return dst
}

// applyOnly hides AllowedBits, so the sampler takes the Apply path.
type applyOnly struct{ m *walkMask }

func (a applyOnly) Apply(l []float32) { a.m.Apply(l) }
func (a applyOnly) Accept(t int32)    { a.m.Accept(t) }

var _ BitsetMask = (*walkMask)(nil)

// TestSamplerBitsetMaskSameTokens: sampling through AllowedBits gives
// exactly the tokens of sampling through Apply, for the same seed, under
// every sampling setting (greedy, filters, bias, penalties), with -Inf and
// NaN logits and a padded logit row.
func TestSamplerBitsetMaskSameTokens(t *testing.T) {
	const vocab = 700
	for i, p := range []SamplingParams{
		{Temperature: 0},
		{Temperature: 1},
		{Temperature: 0.7, TopK: 40},
		{Temperature: 1.3, TopP: 0.9},
		{Temperature: 1, MinP: 0.05},
		{Temperature: 0.9, TopK: 100, TopP: 0.8, MinP: 0.01},
		{Temperature: 1, LogitBias: map[int32]float32{3: 5, 699: -2, 12: 100}},
		{Temperature: 0, LogitBias: map[int32]float32{5: 50}},
		{Temperature: 1, RepeatPenalty: 1.3, PresencePenalty: 0.5, FrequencyPenalty: 0.4, PenaltyLastN: 16},
		{Temperature: 0, RepeatPenalty: 1.8, FrequencyPenalty: 2},
	} {
		p.Seed = seed(uint64(i) + 1)
		a, b := NewSampler(p), NewSampler(p)
		a.AddPrompt([]int32{1, 2, 3, 5, 699})
		b.AddPrompt([]int32{1, 2, 3, 5, 699})
		bitsMask, applyMask := newWalkMask(vocab, 7), newWalkMask(vocab, 7)
		a.SetMask(bitsMask)
		b.SetMask(applyOnly{applyMask})
		r := rand.New(rand.NewPCG(uint64(i), 3))
		logits := make([]float32, vocab+20) // padded past the vocabulary
		for step := range 300 {
			for j := range logits {
				logits[j] = float32(r.NormFloat64() * 4)
			}
			logits[r.IntN(len(logits))] = float32(math.Inf(-1))
			logits[r.IntN(len(logits))] = float32(math.NaN())
			ta, errA := a.Sample(logits)
			tb, errB := b.Sample(logits)
			require.Equal(t, errB, errA, "params %d step %d", i, step)
			require.Equal(t, tb, ta, "params %d step %d", i, step)
			if errA != nil {
				ta = vocab - 1
			}
			a.Accept(ta)
			b.Accept(ta)
		}
	}
}
