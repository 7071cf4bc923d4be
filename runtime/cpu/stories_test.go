package cpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/format/gguf"
)

// openGGUF reads a GGUF file for the executor: its llama.* hyperparameters
// and its tensors (a stand-in for runtime/load in tests).

func openGGUF(t *testing.T, path string) (ir.HParams, Source) {
	f, err := gguf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	u := func(k string) int { v, _ := f.Uint("llama." + k); return int(v) }
	fl := func(k string) float32 { v, _ := f.Float("llama." + k); return float32(v) }
	hp := ir.HParams{Arch: "llama", Name: path, ContextLength: u("context_length"), Embedding: u("embedding_length"),
		Layers: u("block_count"), FFN: u("feed_forward_length"), Heads: u("attention.head_count"),
		HeadsKV: u("attention.head_count_kv"), RopeDim: u("rope.dimension_count"), RopeBase: fl("rope.freq_base"),
		RMSEps: fl("attention.layer_norm_rms_epsilon")}
	_, hasOut := f.Tensor("output.weight")
	hp.TiedEmbedding = !hasOut
	return hp, fileSource{f}
}

type fileSource struct{ f *gguf.File }

func (s fileSource) Lookup(name string) (t dtype.Type, shape []int, ok bool) {
	ti, ok := s.f.Tensor(name)
	if !ok {
		return 0, nil, false
	}
	for _, d := range ti.Dims {
		shape = append(shape, int(d))
	}
	return ti.Type, shape, true
}

func (s fileSource) Data(name string) ([]byte, error) {
	ti, _ := s.f.Tensor(name)
	return s.f.TensorData(ti)
}

// TestStories260K checks greedy decoding from BOS against the story
// llama2.c documents for this model.
func TestStories260K(t *testing.T) {
	hp, src := openGGUF(t, "../../testdata/models/tinyllamas-stories-260k-f32.gguf")
	require.Equal(t, 64, hp.Embedding)
	b, err := NewFromSource(hp, src, Options{Threads: 2})
	require.NoError(t, err)
	want := []int32{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}
	steps := decode(t, b, 1, []int32{1}, len(want)-1)
	var got []int32
	for _, l := range steps {
		got = append(got, runtime.Argmax(l))
	}
	require.Equal(t, want, got)

	// Prefill of the same 8 tokens in one step matches the step-by-step logits.
	prompt := append([]int32{1}, want[:7]...)
	res, err := b.Step(context.Background(), []runtime.SeqStep{{Seq: 2, Tokens: prompt, Logits: true}})
	require.NoError(t, err)
	requireRel(t, steps[7], res[0], 1e-4, "prefill")

	// Two sequences batched give each one's logits alone.
	both, err := b.Step(context.Background(), []runtime.SeqStep{
		{Seq: 3, Tokens: prompt[:4], Logits: true}, {Seq: 4, Tokens: prompt, Logits: true}})
	require.NoError(t, err)
	requireRel(t, steps[3], both[0], 1e-4, "batched seq 3")
	requireRel(t, steps[7], both[1], 1e-4, "batched seq 4")
}

// TestLlama2TinyRandom loads the F16 llama-2-tiny-random file and generates.
func TestLlama2TinyRandom(t *testing.T) {
	hp, src := openGGUF(t, "../../testdata/models/llama-2-tiny-random.gguf")
	b, err := NewFromSource(hp, src, Options{Threads: 2})
	require.NoError(t, err)
	require.Equal(t, 32000, b.Info().VocabSize)
	steps := decode(t, b, 1, []int32{1, 15043}, 8)
	for _, l := range steps {
		require.Len(t, l, 32000)
		for _, v := range l {
			require.False(t, v != v, "NaN logit")
		}
	}
}
