package grammar

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// costSteps is how many tokens each trajectory of BenchmarkStructuredCost
// follows at most.
const costSteps = 64

// costTrajectory samples one output of g at temperature 1 from fixed
// random logits (seed) and returns the automaton state before each token.
func costTrajectory(tb testing.TB, g *Grammar, v *Vocabulary, logits []float32, seed uint64) []int32 {
	sm := NewSamplerMask(g, v)
	s := runtime.NewSampler(runtime.SamplingParams{Temperature: 1, Seed: &seed})
	s.SetMask(sm)
	var states []int32
	for len(states) < costSteps && !sm.m.Done() {
		states = append(states, sm.m.state)
		tok, err := s.Sample(logits)
		require.NoError(tb, err)
		s.Accept(tok)
		require.NoError(tb, sm.Err())
	}
	return states
}

// BenchmarkStructuredCost is the whole per-token cost of structured output
// with the 128,256-token Llama 3 vocabulary and a JSON schema
// (testdata/schemas/48_invoice.json), one op being one decode step of the
// whole batch (1, or 16 independent matchers). Each matcher follows a
// sampled output of the schema, step by step:
//
//   - mask-hit: the allowed-token bitset from the state's cache;
//   - mask-miss: the bitset computed by a walk of the token trie (the
//     cache emptied before every step);
//   - apply: SamplerMask.Apply over 128,256 float logits (a cache hit),
//     which the sampler no longer calls (it reads AllowedBits);
//   - sample-plain, sample-masked: runtime.Sampler.Sample at temperature 1
//     without and with the mask, so their difference is what a mask adds
//     to a step's sampling.
//
// go test -run X -bench StructuredCost ./serve/grammar/
func BenchmarkStructuredCost(b *testing.B) {
	src, err := loadLlama3()
	if err != nil {
		b.Skip("llama3 vocabulary:", err)
	}
	voc := NewVocabulary(src)
	schema, err := os.ReadFile("testdata/schemas/48_invoice.json")
	require.NoError(b, err)
	g, err := FromJSONSchema(schema)
	require.NoError(b, err)
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, voc.Size())
	for i := range logits {
		logits[i] = float32(r.NormFloat64()) * 3
	}
	const maxBatch = 16
	var trajs [][]int32
	for seed := range uint64(maxBatch) {
		trajs = append(trajs, costTrajectory(b, g, voc, logits, seed))
	}
	work := append([]float32(nil), logits...)
	for _, batch := range []int{1, maxBatch} {
		ms := make([]*SamplerMask, batch)
		samplers := make([]*runtime.Sampler, batch)
		plain := make([]*runtime.Sampler, batch)
		for i := range ms {
			ms[i] = NewSamplerMask(g, voc)
			seed := uint64(i)
			samplers[i] = runtime.NewSampler(runtime.SamplingParams{Temperature: 1, Seed: &seed})
			samplers[i].SetMask(ms[i])
			plain[i] = runtime.NewSampler(runtime.SamplingParams{Temperature: 1, Seed: &seed})
		}
		step := 0
		// at moves every matcher to its trajectory's state of the next step.
		at := func() {
			for i, m := range ms {
				t := trajs[i]
				m.m.state = t[step%len(t)]
			}
			step++
		}
		// warm fills the cache with the mask of every state on the way.
		warm := func() {
			for range costSteps {
				at()
				for _, m := range ms {
					m.m.g.mu.Lock()
					_ = m.m.mask()
					m.m.g.mu.Unlock()
				}
			}
		}
		name := "/batch" + strconv.Itoa(batch)
		warm()
		b.Run("mask-hit"+name, func(b *testing.B) {
			for b.Loop() {
				at()
				for _, m := range ms {
					m.m.g.mu.Lock()
					_ = m.m.mask()
					m.m.g.mu.Unlock()
				}
			}
		})
		b.Run("mask-miss"+name, func(b *testing.B) {
			for b.Loop() {
				at()
				for _, m := range ms {
					m.m.g.mu.Lock()
					c := m.m.cache
					clear(c.entries)
					c.head, c.tail = nil, nil
					_ = m.m.mask()
					m.m.g.mu.Unlock()
				}
			}
		})
		warm()
		b.Run("apply"+name, func(b *testing.B) {
			for b.Loop() {
				at()
				for _, m := range ms {
					m.Apply(work) // the stores are the same whether or not work was reset
				}
			}
		})
		b.Run("sample-plain"+name, func(b *testing.B) {
			for b.Loop() {
				for _, s := range plain {
					if _, err := s.Sample(logits); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run("sample-masked"+name, func(b *testing.B) {
			for b.Loop() {
				at()
				for _, s := range samplers {
					if _, err := s.Sample(logits); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
