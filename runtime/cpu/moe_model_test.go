package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

// moeOf returns hp as family arch with E experts, k used a token, and the
// tensors of m with each layer's feed-forward turned into E experts: copies
// of the dense one when same, else fresh random experts; the router is
// random either way.
func moeOf(t testing.TB, hp ir.HParams, m memSource, arch string, E, k int, norm, same bool, seed uint64) (ir.HParams, memSource) {
	r := rand.New(rand.NewPCG(seed, 5))
	hp.Arch, hp.Experts, hp.ExpertsUsed, hp.ExpertFFN, hp.ExpertNorm = arch, E, k, hp.FFN, norm
	out := memSource{}
	for name, e := range m {
		out[name] = e
	}
	for l := 0; l < hp.Layers; l++ {
		b := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		for _, p := range []string{"gate", "up", "down"} {
			d := m[b("ffn_"+p+".weight")]
			delete(out, b("ffn_"+p+".weight"))
			var data []byte
			for x := 0; x < E; x++ {
				if same {
					data = append(data, d.data...)
					continue
				}
				v := make([]float32, d.ne[0]*d.ne[1])
				for i := range v {
					v[i] = float32(r.NormFloat64() / math.Sqrt(float64(d.ne[0])))
				}
				q, err := dtype.Quantize(d.t, v)
				require.NoError(t, err)
				data = append(data, q...)
			}
			out[b("ffn_"+p+"_exps.weight")] = memTensor{d.t, []int{d.ne[0], d.ne[1], E}, data}
		}
		v := make([]float32, hp.Embedding*E)
		for i := range v {
			v[i] = float32(r.NormFloat64() / math.Sqrt(float64(hp.Embedding))) // logits of about unit spread
		}
		q, err := dtype.Quantize(dtype.F32, v)
		require.NoError(t, err)
		out[b("ffn_gate_inp.weight")] = memTensor{dtype.F32, []int{hp.Embedding, E}, q}
	}
	return hp, out
}

// A mixture whose experts are all the dense feed-forward, with weights
// that sum to 1, is the dense model: the same logits at every step.
// Unnormalised weights (their sum below 1) must not be.
func TestMoEOfCopiesIsDense(t *testing.T) {
	prompt := []int32{1, 17, 42, 99, 5, 250}
	for _, c := range []struct {
		hp   ir.HParams
		arch string
		E, k int
	}{{smallQwen3, "qwen3moe", 8, 3}, {smallLlama, "mixtral", 4, 2}} {
		dense := randomModel(t, c.hp, dtype.Q8_0, 9)
		ref, err := NewFromSource(c.hp, dense, Options{Threads: 2})
		require.NoError(t, err)
		want := decode(t, ref, 1, prompt, 3)
		for _, norm := range []bool{true, false} {
			hp, src := moeOf(t, c.hp, dense, c.arch, c.E, c.k, norm, true, 3)
			b, err := NewFromSource(hp, src, Options{Threads: 2})
			require.NoError(t, err)
			got := decode(t, b, 1, prompt, 3)
			for i := range want {
				if norm {
					requireRel(t, want[i], got[i], 1e-4, fmt.Sprintf("%s step %d", c.arch, i))
				} else {
					require.Less(t, runtime.Cosine(want[i], got[i]), 0.9999, "%s step %d: unnormalised weights changed nothing", c.arch, i)
				}
			}
		}
	}
}

// Experts computed for a whole prompt at once (grouped, several rows an
// expert) and for one token a step give the same logits.
func TestMoEPromptEqualsSteps(t *testing.T) {
	hp, src := moeOf(t, smallQwen3, randomModel(t, smallQwen3, dtype.Q4_K, 11), "qwen3moe", 16, 4, true, false, 4)
	prompt := []int32{3, 9, 27, 81, 243, 7, 49, 100}
	a, err := NewFromSource(hp, src, Options{Threads: 2})
	require.NoError(t, err)
	whole, err := a.Step(context.Background(), []runtime.SeqStep{{Seq: 1, Tokens: prompt, Logits: true}})
	require.NoError(t, err)
	b, err := NewFromSource(hp, src, Options{Threads: 3})
	require.NoError(t, err)
	var last []float32
	for i, tok := range prompt {
		res, err := b.Step(context.Background(), []runtime.SeqStep{{Seq: 1, Pos: i, Tokens: []int32{tok}, Logits: true}})
		require.NoError(t, err)
		last = res[0]
	}
	requireRel(t, whole[0], last, 1e-4, "prompt against steps")
}
