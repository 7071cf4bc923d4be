package cuda

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/synth"
)

// TestLowerHiddenProgram lowers the embedding program (no GPU needed): it
// ends in the hidden_out buffer of every token's row, has no logits, reads
// only weights the prefill program uploads, and every product kernel it
// launches is one of the prefill program's, so the cuBLASLt arm covers it.
func TestLowerHiddenProgram(t *testing.T) {
	for _, c := range []struct{ preset, quant string }{{"qwen3-8b", "q4_k_m"}, {"llama3.2-1b", "q8_0"}} {
		m := synthModel(t, c.preset, c.quant, synth.WeightsBlocks)
		opts := BackendOptions{MaxSeqs: 4, PrefillTokens: 64}
		_, pre, err := Lower(m, opts)
		require.NoError(t, err)
		hid, fn, err := lowerHidden(m, opts)
		require.NoError(t, err, c.preset)
		require.Equal(t, "output_norm.weight", fn.Weight)
		require.Equal(t, codegen.Prefill, hid.Class)
		require.Equal(t, 64, hid.MaxTokens)
		require.Equal(t, -1, hid.Logits)
		require.Equal(t, -1, hid.Argmax)
		require.Equal(t, -1, hid.SampleOut)
		require.GreaterOrEqual(t, hid.HiddenOut, 0)
		out := hid.Buffers.Buffers[hid.HiddenOut]
		require.Equal(t, len(hid.Launches)-1, out.Last, "hidden_out lives to the last launch")

		_, before := uniqueWeights(pre)
		_, after := uniqueWeights(pre, hid)
		require.Equal(t, before, after, "no weight beyond the prefill program's")

		plan, err := planPrefill(pre, 64)
		require.NoError(t, err)
		require.NotEmpty(t, plan.prods)
		same := sameProducts(pre, hid, plan.prods)
		for i, k := range hid.Kernels {
			if k.Family == "mma" && k.Product != nil {
				require.NotNil(t, same[i], "%s: product %s has a cuBLASLt replacement", c.preset, k.Name)
			}
		}
		require.NotEmpty(t, same)
	}
}

// TestSplitPieces: launch sequences of at most maxTokens tokens and
// maxSeqs pieces, a long sequence continued where it stopped.
func TestSplitPieces(t *testing.T) {
	tok := func(n int) []int32 { return make([]int32, n) }
	batch := []runtime.SeqStep{{Seq: 1, Tokens: tok(5)}, {Seq: 2, Tokens: tok(11)}, {Seq: 3, Tokens: tok(2)}}
	tables := [][]int32{{1}, {2}, {3}}
	got := splitPieces(batch, tables, 8, 4)
	type p struct{ entry, pos, n int }
	var flat [][]p
	for _, seq := range got {
		var row []p
		for _, x := range seq {
			row = append(row, p{x.entry, x.pos, len(x.tokens)})
			require.Equal(t, tables[x.entry], x.pages)
		}
		flat = append(flat, row)
	}
	require.Equal(t, [][]p{{{0, 0, 5}, {1, 0, 3}}, {{1, 3, 8}}, {{2, 0, 2}}}, flat)
	got = splitPieces(batch, tables, 64, 2)
	require.Len(t, got, 2, "two pieces a launch sequence")
	require.Len(t, got[0], 2)
}

// TestEmbedCopies: the rows each pooling reads, found in the launch
// sequences a chunked input was cut into.
func TestEmbedCopies(t *testing.T) {
	tok := func(n int) []int32 { return make([]int32, n) }
	// entry 0: 5 tokens whole; entry 1: positions 3..10 of 11 in this launch
	pieces := []piece{{entry: 0, pos: 0, tokens: tok(5)}, {entry: 1, pos: 3, tokens: tok(8)}}
	for _, c := range []struct {
		pool runtime.Pooling
		want []rowCopy
	}{
		{runtime.PoolMean, []rowCopy{{0, 0, 0, 5}, {1, 3, 5, 8}}},
		{runtime.PoolLast, []rowCopy{{0, 0, 4, 1}, {1, 0, 12, 1}}},
		{runtime.PoolCLS, []rowCopy{{0, 0, 0, 1}}}, // entry 1's first token was in an earlier launch
	} {
		var need [][2]int
		for _, n := range []int{5, 11} {
			lo, hi := c.pool.Rows(n)
			need = append(need, [2]int{lo, hi})
		}
		require.Equal(t, c.want, embedCopies(pieces, need), "%v", c.pool)
	}
}

// TestGPUEmbedMatchesCPU: the GPU's embeddings of inputs that share a
// launch sequence and of one cut into several (prefill chunks of 32
// tokens) point where the CPU reference's do, for every pooling.
func TestGPUEmbedMatchesCPU(t *testing.T) {
	gpuOrSkip(t)
	for _, c := range []struct{ preset, quant string }{{"qwen3-8b", "f16"}, {"qwen3-8b", "q4_k_m"}, {"llama3.2-1b", "q8_0"}} {
		m := synthModel(t, c.preset, c.quant, synth.WeightsFloat)
		ref, err := cpu.New(m, cpu.Options{Embedding: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = ref.Close() })
		for _, o := range []BackendOptions{{MaxSeqs: 4, Embedding: true}, {MaxSeqs: 4, Embedding: true, PrefillTokens: 32}} {
			g := gpuBackend(t, m, o)
			require.Equal(t, m.HParams.Embedding, g.EmbedWidth())
			ins := prompts(m.HParams.VocabSize, 3, 70, 5)
			var batch []runtime.EmbedStep
			for i, in := range ins {
				batch = append(batch, runtime.EmbedStep{Seq: runtime.SeqID(1 + i), Tokens: in})
			}
			for _, pool := range []runtime.Pooling{runtime.PoolMean, runtime.PoolLast, runtime.PoolCLS} {
				want, err := ref.Embed(context.Background(), batch, pool)
				require.NoError(t, err)
				got, err := g.Embed(context.Background(), batch, pool)
				require.NoError(t, err)
				for i := range batch {
					ref.Free(batch[i].Seq)
					g.Free(batch[i].Seq)
					cos := 0.0
					for j := range want[i] {
						cos += float64(want[i][j]) * float64(got[i][j])
					}
					require.Greater(t, cos, 0.999, "%s %s %v input %d (prefill %d)", c.preset, c.quant, pool, i, o.PrefillTokens)
					require.False(t, math.IsNaN(cos))
				}
			}
		}
	}
}
