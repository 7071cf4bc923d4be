package cpu

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

// int8Types are the weight types with int8 products, with the least cosine
// of the int8 backend's logits against the exact backend's on the same
// weights (measured on the three small families: ≥ 0.99989 for every type;
// the bound leaves room for other seeds).
var int8Types = []struct {
	t   dtype.Type
	cos float64
}{{dtype.Q8_0, 0.999}, {dtype.Q4_0, 0.999}, {dtype.IQ4_NL, 0.999}, {dtype.Q4_K, 0.999},
	{dtype.Q5_K, 0.999}, {dtype.Q6_K, 0.999}, {dtype.IQ4_XS, 0.999},
	{dtype.F32, 0.99999}, {dtype.F16, 0.99999}, {dtype.BF16, 0.99999}}

// TestInt8AgainstExact runs each family with the int8 products against the
// exact products on the same weights, teacher-forced on the exact
// backend's greedy tokens, and checks that every matrix was packed.
func TestInt8AgainstExact(t *testing.T) {
	prompt := []int32{1, 17, 42, 99, 5, 250}
	for _, hp := range []ir.HParams{smallLlama, smallQwen2, smallQwen3} {
		for _, c := range int8Types {
			t.Run(hp.Arch+"/"+c.t.String(), func(t *testing.T) {
				src := randomModel(t, hp, c.t, 7)
				ref, err := NewFromSource(hp, src, Options{Threads: 2})
				require.NoError(t, err)
				want := decode(t, ref, 1, prompt, 3)
				b, err := NewFromSource(hp, src, Options{Threads: 2, Products: ProductsInt8})
				require.NoError(t, err)
				for _, n := range b.e.g.Nodes {
					if n.Op == ir.OpMatmul {
						require.NotNil(t, b.e.weights[n.Args[1].ID].packed, "%s not packed", b.e.weights[n.Args[1].ID].name)
					}
				}
				pos, toks := 0, prompt
				for i, w := range want {
					res, err := b.Step(context.Background(), []runtime.SeqStep{{Seq: 1, Pos: pos, Tokens: toks, Logits: true}})
					require.NoError(t, err)
					require.GreaterOrEqual(t, runtime.Cosine(w, res[0]), c.cos, "step %d", i)
					require.NotEqual(t, w, res[0], "step %d: the int8 products gave the exact products' bits", i)
					pos += len(toks)
					toks = []int32{runtime.Argmax(w)}
				}
			})
		}
	}
}

// TestInt8Reproducible requires the int8 backend's logits to be the same
// bits whatever the threads, the blocking (tokens a kernel call, tokens a
// tile), the kernel set
// (assembly or the portable Go kernels) and whether a prompt is one step
// or one token a step: each output is a fixed sequence of operations on its
// own token's activations.
func TestInt8Reproducible(t *testing.T) {
	prompt := []int32{1, 8, 77, 200, 3, 3, 64, 9, 11, 250}
	hp := smallLlama
	for _, typ := range []dtype.Type{dtype.Q4_K, dtype.Q8_0, dtype.Q6_K, dtype.F16} {
		src := randomModel(t, hp, typ, 5)
		run := func(threads, block int, oneByOne bool) []float32 {
			tiles := func(dtype.Type, int, int) Tiles { return Tiles{TokenBlock: block, TokenTile: 3 + block} }
			if block == 0 {
				tiles = nil
			}
			b, err := NewFromSource(hp, src, Options{Threads: threads, Products: ProductsInt8, Tiles: tiles})
			require.NoError(t, err)
			ctx := context.Background()
			if !oneByOne {
				res, err := b.Step(ctx, []runtime.SeqStep{{Seq: 1, Tokens: prompt, Logits: true}})
				require.NoError(t, err)
				return append([]float32(nil), res[0]...)
			}
			var out []float32
			for i, tok := range prompt {
				res, err := b.Step(ctx, []runtime.SeqStep{{Seq: 1, Pos: i, Tokens: []int32{tok}, Logits: true}})
				require.NoError(t, err)
				out = append(out[:0], res[0]...)
			}
			return out
		}
		want := run(1, 0, false)
		for _, c := range []struct {
			threads, block int
			oneByOne       bool
		}{{2, 0, false}, {3, 0, false}, {2, 1, false}, {2, 3, false}, {1, 0, true}, {2, 0, true}} {
			requireBits(t, want, run(c.threads, c.block, c.oneByOne), "%v threads %d block %d one by one %v", typ, c.threads, c.block, c.oneByOne)
		}
		saved := dtype.Q8Kernels()
		for _, set := range dtype.Q8KernelSets() {
			require.NoError(t, dtype.SetQ8Kernels(set))
			requireBits(t, want, run(2, 0, false), "%v kernel set %s", typ, set)
		}
		require.NoError(t, dtype.SetQ8Kernels(saved))
	}
}

// requireBits requires the same float32 bits.
func requireBits(t *testing.T, want, got []float32, format string, args ...any) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("element %d: %g, want %g: "+format, append([]any{i, got[i], want[i]}, args...)...)
		}
	}
}

// TestStories260KInt8: the embedded model (F32 matrices, float products in
// tiles, the fast attention) tells llama2.c's story, as the reference does.
func TestStories260KInt8(t *testing.T) {
	hp, src := openGGUF(t, "../../testdata/models/tinyllamas-stories-260k-f32.gguf")
	b, err := NewFromSource(hp, src, Options{Threads: 2, Products: ProductsInt8})
	require.NoError(t, err)
	want := []int32{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}
	var got []int32
	for _, l := range decode(t, b, 1, []int32{1}, len(want)-1) {
		got = append(got, runtime.Argmax(l))
	}
	require.Equal(t, want, got)
}
