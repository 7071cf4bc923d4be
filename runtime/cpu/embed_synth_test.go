package cpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
)

// TestSynthEmbeddingVariants writes the embedding variant of a qwen3 shape
// as a GGUF file and as a checkpoint in the Qwen3-Embedding layout, for
// each pooling: each loads as an embedding model with its pooling, its
// last-pooling tokenizer ends inputs with EOS, its embeddings pass the
// float64 reference of TestEmbedAgainstLogits, and the two files embed
// alike.
func TestSynthEmbeddingVariants(t *testing.T) {
	dir := t.TempDir()
	for _, pool := range []string{load.PoolLast, load.PoolMean, load.PoolCLS} {
		o := synth.Options{Preset: "qwen3-8b", Layers: 2, Dim: 128, FFN: 256, Quant: "f32", Context: 256, Pooling: pool}
		gpath, hpath := filepath.Join(dir, pool+".gguf"), filepath.Join(dir, pool+"-hf")
		_, err := synth.WriteGGUF(gpath, o)
		require.NoError(t, err)
		_, err = synth.WriteHF(hpath, o)
		require.NoError(t, err)
		var vecs [][]float32
		for _, path := range []string{gpath, hpath} {
			m, err := load.Open(path)
			require.NoError(t, err)
			defer m.Close()
			require.Equal(t, pool, m.Pooling, path)
			require.NotContains(t, m.Tensors, "output.weight", "no head")
			require.Contains(t, m.Tensors, "output_norm.weight")
			ids := m.Tokenizer.Encode("hello world", true, false)
			require.Equal(t, pool == load.PoolLast, ids[len(ids)-1] == m.Tokenizer.EOS(), "%s: EOS ends the input", path)
			b, err := New(m, Options{Threads: 2, Embedding: true})
			require.NoError(t, err)
			defer b.Close()
			embd := m.Tensors["token_embd.weight"]
			data, err := embd.Data()
			require.NoError(t, err)
			flat := make([]float32, embd.Elements())
			require.NoError(t, dtype.Dequantize(embd.Type, data, flat))
			E := m.HParams.Embedding
			W := make([][]float64, embd.Shape[1])
			for v := range W {
				W[v] = make([]float64, E)
				for i := range W[v] {
					W[v][i] = float64(flat[v*E+i])
				}
			}
			requireEmbedLogits(t, b, W, ids)
			p, err := runtime.ParsePooling(pool)
			require.NoError(t, err)
			got, err := b.Embed(context.Background(), []runtime.EmbedStep{{Seq: 3, Tokens: ids}}, p)
			require.NoError(t, err)
			vecs = append(vecs, got[0])
		}
		requireRel(t, vecs[0], vecs[1], 1e-4, pool+": GGUF and checkpoint embed alike")
	}
	// without modules.json, a qwen3 backbone without prefix or head is the
	// Qwen3-Embedding layout: last-token pooling
	hpath := filepath.Join(dir, "mean-hf")
	require.NoError(t, os.Remove(filepath.Join(hpath, "modules.json")))
	m, err := load.Open(hpath)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, load.PoolLast, m.Pooling)
}
