package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

var (
	// Gemma 2's layer at a small size: head dim ≠ dim/heads, the first of
	// two layers sliding (window 5), soft caps on scores and logits.
	smallGemma2 = ir.HParams{Arch: "gemma2", Name: "gemma2-small", ContextLength: 256, Embedding: 256, Layers: 2, FFN: 512,
		Heads: 4, HeadsKV: 2, HeadDim: 96, RopeDim: 96, RopeBase: 10000, RopeStyle: ir.RopeHalf, RMSEps: 1e-6,
		VocabSize: 300, TiedEmbedding: true, AttnScale: 0.125, AttnSoftcap: 50, FinalSoftcap: 30, SlidingWindow: 5, SlidingPattern: 2}
	// Gemma 3's: two sliding layers (window 5, base 10000) and a global
	// one (base 1e6, linear scaling 8), q/k norms, no caps.
	smallGemma3 = ir.HParams{Arch: "gemma3", Name: "gemma3-small", ContextLength: 256, Embedding: 256, Layers: 3, FFN: 512,
		Heads: 4, HeadsKV: 2, HeadDim: 64, RopeDim: 64, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6,
		VocabSize: 300, TiedEmbedding: true, AttnScale: 0.125, SlidingWindow: 5, SlidingPattern: 3, RopeBaseLocal: 10000,
		QKNorm: true, RopeScaling: ir.RopeScaling{Type: "linear", Factor: 8}}
)

// randomGemma is randomModel with Gemma's post-norms.
func randomGemma(t testing.TB, hp ir.HParams, mt dtype.Type, seed uint64) memSource {
	m := randomModel(t, hp, mt, seed)
	r := rand.New(rand.NewPCG(seed, 100))
	for l := 0; l < hp.Layers; l++ {
		for _, n := range []string{"post_attention_norm", "post_ffw_norm"} {
			v := randVec(r, hp.Embedding, 0.3)
			for i := range v {
				v[i]++
			}
			data, err := dtype.Quantize(dtype.F32, v)
			require.NoError(t, err)
			m[fmt.Sprintf("blk.%d.%s.weight", l, n)] = memTensor{dtype.F32, []int{hp.Embedding}, data}
		}
	}
	return m
}

// Gemma models run: a prefill equals the same tokens one at a time (the
// window slides across steps), two sequences batched equal each alone, and
// quantised twins stay close to the F32 model.
func TestGemmaModels(t *testing.T) {
	prompt := []int32{2, 8, 77, 200, 3, 3, 64, 19, 250, 41, 7}
	other := []int32{2, 150, 9, 31}
	ctx := context.Background()
	for _, hp := range []ir.HParams{smallGemma2, smallGemma3} {
		t.Run(hp.Arch, func(t *testing.T) {
			b, err := NewFromSource(hp, randomGemma(t, hp, dtype.F32, 5), Options{Threads: 2})
			require.NoError(t, err)
			pre, err := b.Step(ctx, []runtime.SeqStep{{Seq: 1, Tokens: prompt, Logits: true}})
			require.NoError(t, err)
			prefill := append([]float32(nil), pre[0]...)
			for _, v := range prefill {
				if c := hp.FinalSoftcap; c > 0 {
					require.Less(t, v, c, "logits are capped")
					require.Greater(t, v, -c)
				}
			}
			var single []float32
			for i, tok := range prompt {
				res, err := b.Step(ctx, []runtime.SeqStep{{Seq: 2, Pos: i, Tokens: []int32{tok}, Logits: i == len(prompt)-1}})
				require.NoError(t, err)
				if i == len(prompt)-1 {
					single = append([]float32(nil), res[0]...)
				}
			}
			requireRel(t, prefill, single, 1e-4, "prefill vs single steps")
			alone, err := b.Step(ctx, []runtime.SeqStep{{Seq: 3, Tokens: other, Logits: true}})
			require.NoError(t, err)
			aloneOther := append([]float32(nil), alone[0]...)
			both, err := b.Step(ctx, []runtime.SeqStep{{Seq: 4, Tokens: prompt, Logits: true}, {Seq: 5, Tokens: other, Logits: true}})
			require.NoError(t, err)
			requireRel(t, prefill, both[0], 1e-5, "batched seq 4")
			requireRel(t, aloneOther, both[1], 1e-5, "batched seq 5")

			want := decode(t, b, 6, prompt, 3)
			q, err := NewFromSource(hp, randomGemma(t, hp, dtype.Q8_0, 5), Options{Threads: 2})
			require.NoError(t, err)
			got := decode(t, q, 1, prompt, 0)
			require.GreaterOrEqual(t, runtime.Cosine(want[0], got[0]), 0.999, "Q8_0 twin")
		})
	}
}

// A model whose sliding layers have a window at least as long as the
// sequence gives the logits of the same model without windows, bit for
// bit; past the window they differ.
func TestGemmaWindowEqualsFullWithin(t *testing.T) {
	for _, hp := range []ir.HParams{smallGemma2, smallGemma3} {
		t.Run(hp.Arch, func(t *testing.T) {
			src := randomGemma(t, hp, dtype.F32, 9)
			logits := func(window int, tokens []int32) []float32 {
				h := hp
				h.SlidingWindow = window
				b, err := NewFromSource(h, src, Options{Threads: 2})
				require.NoError(t, err)
				out := decode(t, b, 1, tokens, 0)
				return out[0]
			}
			// the same rotation in every layer, so that only the window differs
			hp.RopeBaseLocal, hp.RopeScaling = 0, ir.RopeScaling{}
			hp.RopeBase = 10000
			short, long := []int32{2, 5, 9, 44, 3}, []int32{2, 5, 9, 44, 3, 17, 8, 101, 6}
			require.Equal(t, logits(0, short), logits(5, short), "5 tokens, window 5")
			require.Equal(t, logits(0, long), logits(9, long), "9 tokens, window 9")
			require.NotEqual(t, logits(0, long), logits(5, long), "9 tokens, window 5")
		})
	}
}
