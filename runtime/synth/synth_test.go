package synth

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load"
)

// The standard mixes must give files of the size the published GGUF files
// of these models have, or a synthesized file is no fair stand-in.
func TestPlanSizesMatchPublishedFiles(t *testing.T) {
	for _, c := range []struct {
		preset, quant string
		gb            float64 // published file size, GB
	}{
		{"llama2-7b", "q4_k_m", 4.08},
		{"llama2-7b", "q4_0", 3.83},
		{"llama2-7b", "q8_0", 7.16},
		{"llama2-7b", "f16", 13.48},
		{"llama3-8b", "q4_k_m", 4.92},
		// the 2- and 3-bit and IQ4 mixes (files made by the current quantiser)
		{"llama3-8b", "q3_k_m", 4.02},
		{"llama3-8b", "q3_k_s", 3.66},
		{"llama3-8b", "q2_k", 3.18},
		{"llama3-8b", "iq4_xs", 4.45},
		{"llama2-7b", "q3_k_m", 3.30},
		{"llama2-7b", "q3_k_s", 2.95},
	} {
		pl, err := NewPlan(Options{Preset: c.preset, Quant: c.quant})
		require.NoError(t, err)
		got := float64(pl.Bytes) / 1e9
		require.InDelta(t, c.gb, got, c.gb*0.01, "%s %s: %.3f GB", c.preset, c.quant, got)
	}
}

func TestMixRules(t *testing.T) {
	pl, err := NewPlan(Options{Preset: "llama2-7b", Quant: "q4_k_m"})
	require.NoError(t, err)
	types := map[string]dtype.Type{}
	for _, tt := range pl.Tensors {
		types[tt.Name] = tt.Type
	}
	require.Equal(t, dtype.Q6_K, types["output.weight"])
	require.Equal(t, dtype.Q4_K, types["token_embd.weight"])
	require.Equal(t, dtype.F32, types["blk.0.attn_norm.weight"])
	// use_more_bits for 32 layers: 0–3, 6, 9, …, 27, 28–31.
	for l, want := range map[int]dtype.Type{0: dtype.Q6_K, 3: dtype.Q6_K, 4: dtype.Q4_K, 5: dtype.Q4_K, 6: dtype.Q6_K, 27: dtype.Q6_K, 28: dtype.Q6_K, 26: dtype.Q4_K} {
		require.Equal(t, want, types[blkName(l, "attn_v")], "layer %d attn_v", l)
		require.Equal(t, want, types[blkName(l, "ffn_down")], "layer %d ffn_down", l)
		require.Equal(t, dtype.Q4_K, types[blkName(l, "attn_q")], "layer %d attn_q", l)
	}
	// A tied model keeps its embeddings in 6 bits; a row length that is
	// not a multiple of 256 falls back.
	pl, err = NewPlan(Options{Preset: "qwen2.5-0.5b", Quant: "q4_k_m"})
	require.NoError(t, err)
	for _, tt := range pl.Tensors {
		switch tt.Name {
		case "token_embd.weight":
			require.Equal(t, dtype.Q8_0, tt.Type, "896 is not a multiple of 256: Q6_K falls back to Q8_0")
		case "blk.1.attn_q.weight":
			require.Equal(t, dtype.Q5_0, tt.Type, "Q4_K falls back to Q5_0")
		}
	}
}

// The 2- and 3-bit and IQ4 mixes follow the quantiser's rules: Q3_K_M
// bumps attn_v (first two layers Q5_K), ffn_down (first sixteenth Q5_K)
// and attn_output; Q2_K and IQ4_XS bump attn_v by the GQA group; the
// embeddings of a model with an output head stay in the base type.
func TestLowBitMixRules(t *testing.T) {
	types := func(preset, quant string) map[string]dtype.Type {
		pl, err := NewPlan(Options{Preset: preset, Quant: quant})
		require.NoError(t, err)
		m := map[string]dtype.Type{}
		for _, tt := range pl.Tensors {
			m[tt.Name] = tt.Type
		}
		return m
	}
	for _, c := range []struct {
		preset, quant           string
		embd, q, out            dtype.Type
		v0, v2, down0, down2, o dtype.Type
	}{
		// llama3-8b: 32 layers, 4 query heads a KV head
		{"llama3-8b", "q3_k_m", dtype.Q3_K, dtype.Q3_K, dtype.Q6_K, dtype.Q5_K, dtype.Q4_K, dtype.Q5_K, dtype.Q4_K, dtype.Q4_K},
		{"llama3-8b", "q3_k_s", dtype.Q3_K, dtype.Q3_K, dtype.Q6_K, dtype.Q3_K, dtype.Q3_K, dtype.Q3_K, dtype.Q3_K, dtype.Q3_K},
		{"llama3-8b", "q2_k", dtype.Q2_K, dtype.Q2_K, dtype.Q6_K, dtype.Q4_K, dtype.Q4_K, dtype.Q3_K, dtype.Q3_K, dtype.Q3_K},
		{"llama3-8b", "iq4_xs", dtype.IQ4_XS, dtype.IQ4_XS, dtype.Q6_K, dtype.Q5_K, dtype.Q5_K, dtype.IQ4_XS, dtype.IQ4_XS, dtype.IQ4_XS},
		// llama2-7b: one query head a KV head
		{"llama2-7b", "q2_k", dtype.Q2_K, dtype.Q2_K, dtype.Q6_K, dtype.Q3_K, dtype.Q3_K, dtype.Q3_K, dtype.Q3_K, dtype.Q3_K},
		{"llama2-7b", "iq4_xs", dtype.IQ4_XS, dtype.IQ4_XS, dtype.Q6_K, dtype.IQ4_XS, dtype.IQ4_XS, dtype.IQ4_XS, dtype.IQ4_XS, dtype.IQ4_XS},
	} {
		m := types(c.preset, c.quant)
		name := c.preset + " " + c.quant
		require.Equal(t, c.embd, m["token_embd.weight"], name)
		require.Equal(t, c.out, m["output.weight"], name)
		require.Equal(t, c.q, m[blkName(5, "attn_q")], name)
		require.Equal(t, c.q, m[blkName(5, "ffn_up")], name)
		require.Equal(t, c.v0, m[blkName(1, "attn_v")], name)
		require.Equal(t, c.v2, m[blkName(2, "attn_v")], name)
		require.Equal(t, c.down0, m[blkName(1, "ffn_down")], name)
		require.Equal(t, c.down2, m[blkName(2, "ffn_down")], name)
		require.Equal(t, c.o, m[blkName(7, "attn_output")], name)
	}
	// rows that are not whole super-blocks fall back to IQ4_NL (Q3_K, Q2_K,
	// IQ4_XS) and Q5_0 (Q4_K): qwen2.5-0.5b's 896
	m := types("qwen2.5-0.5b", "q3_k_m")
	require.Equal(t, dtype.IQ4_NL, m[blkName(3, "attn_q")])
	require.Equal(t, dtype.Q5_0, m[blkName(3, "attn_output")])
}

func blkName(l int, role string) string {
	return "blk." + strconv.Itoa(l) + "." + role + ".weight"
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Preset: "nope"},
		{Preset: "llama3-8b", Arch: "qwen2"},
		{Preset: "llama3-8b", Quant: "q9_9"},
		{Preset: "llama3-8b", Dim: 100},
		{Preset: "llama3-8b", Weights: "sometimes"},
	} {
		_, err := NewPlan(o)
		require.ErrorIs(t, err, ErrOptions, "%+v", o)
	}
}

// small writes a small model of a preset and opens it.
func small(t *testing.T, preset, quant string, hf bool) *load.Model {
	t.Helper()
	o := Options{Preset: preset, Quant: quant, Layers: 2, Dim: 256, FFN: 512, Context: 256, Seed: 7}
	path := filepath.Join(t.TempDir(), "m.gguf")
	var err error
	if hf {
		path = filepath.Dir(path) + "/hf"
		_, err = WriteHF(path, o)
	} else {
		_, err = WriteGGUF(path, o)
	}
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func TestSmallModelsLoadAndTokenize(t *testing.T) {
	for _, c := range []struct{ preset, quant string }{
		{"llama3-8b", "q4_k_m"}, {"qwen2.5-7b", "q8_0"}, {"qwen3-8b", "bf16"}, {"llama2-7b", "q4_0"}, {"qwen2.5-7b-yarn", "q8_0"},
		{"llama3-8b", "q3_k_m"}, {"llama3-8b", "q2_k"}, {"llama3-8b", "iq4_xs"},
	} {
		m := small(t, c.preset, c.quant, false)
		p, _ := Lookup(c.preset)
		require.Equal(t, p.HParams.Arch, m.HParams.Arch, c.preset)
		require.Equal(t, 2, m.HParams.Layers)
		require.Equal(t, 256, m.HParams.Embedding)
		require.Equal(t, p.HParams.VocabSize, m.HParams.VocabSize)
		require.Equal(t, p.HParams.QKVBias, m.HParams.QKVBias)
		require.Equal(t, p.HParams.QKNorm, m.HParams.QKNorm)
		if p.HParams.RopeScaling.Type == "yarn" {
			require.Equal(t, p.HParams.RopeScaling, m.HParams.RopeScaling)
			require.Equal(t, 131072, m.HParams.ContextLength, "factor 4 × 32768")
		}
		ids := m.Tokenizer.Encode("Hello world, this is memra.", false, false)
		require.NotEmpty(t, ids)
		require.Contains(t, m.Tokenizer.Decode(ids), "Hello world, this is memra.")
		if p.Template != "" {
			require.NotEmpty(t, m.ChatTemplate)
		}
	}
}

func TestDeterministic(t *testing.T) {
	o := Options{Preset: "qwen3-8b", Quant: "q4_k", Layers: 1, Dim: 256, FFN: 512, Seed: 3}
	pl, err := NewPlan(o)
	require.NoError(t, err)
	tt := &pl.Tensors[2]
	a, err := pl.tensorBytes(3, tt)
	require.NoError(t, err)
	b, err := pl.tensorBytes(3, tt)
	require.NoError(t, err)
	c, err := pl.tensorBytes(4, tt)
	require.NoError(t, err)
	require.True(t, bytes.Equal(a, b))
	require.False(t, bytes.Equal(a, c))
}

// Random blocks must decode to finite values of about the intended spread.
func TestRandomBlocksAreValid(t *testing.T) {
	for _, ty := range []dtype.Type{dtype.Q4_0, dtype.Q4_1, dtype.Q5_0, dtype.Q5_1, dtype.Q8_0, dtype.Q2_K,
		dtype.Q3_K, dtype.Q4_K, dtype.Q5_K, dtype.Q6_K, dtype.IQ4_NL, dtype.IQ4_XS} {
		const ne0, rows = 1024, 64
		b, err := randomBlocks(1, "w", ty, ne0, rows, 1/math.Sqrt(ne0))
		require.NoError(t, err)
		x := make([]float32, ne0*rows)
		require.NoError(t, dtype.Dequantize(ty, b, x))
		var ss float64
		for _, v := range x {
			require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), ty.String())
			ss += float64(v) * float64(v)
		}
		std := math.Sqrt(ss / float64(len(x)))
		require.Greater(t, std, 0.1/math.Sqrt(ne0), ty.String())
		require.Less(t, std, 10/math.Sqrt(ne0), ty.String())
	}
}

// A GGUF and its Hugging Face twin are the same model: the CPU reference
// gives the same logits for both (llama's GGUF has permuted Q/K rows and
// interleaved RoPE, the checkpoint rotate-half; the maths is the same).
func TestGGUFAndHFTwinSameLogits(t *testing.T) {
	for _, preset := range []string{"llama3-8b", "qwen3-8b", "qwen2.5-7b", "qwen2.5-7b-yarn"} {
		g := small(t, preset, "f16", false)
		h := small(t, preset, "f16", true)
		require.Equal(t, g.HParams.Heads, h.HParams.Heads)
		require.Equal(t, g.HParams.RopeScaling, h.HParams.RopeScaling)
		require.Equal(t, g.HParams.ContextLength, h.HParams.ContextLength)
		prompt := g.Tokenizer.Encode("The quick brown fox jumps over the lazy dog", true, false)
		require.Equal(t, prompt, h.Tokenizer.Encode("The quick brown fox jumps over the lazy dog", true, false), preset)
		lg := logits(t, g, prompt)
		lh := logits(t, h, prompt)
		require.Len(t, lh, len(lg))
		var dot, ng, nh float64
		maxDiff := 0.0
		for i := range lg {
			dot += float64(lg[i]) * float64(lh[i])
			ng += float64(lg[i]) * float64(lg[i])
			nh += float64(lh[i]) * float64(lh[i])
			maxDiff = math.Max(maxDiff, math.Abs(float64(lg[i]-lh[i])))
		}
		cos := dot / math.Sqrt(ng*nh)
		require.Greater(t, cos, 0.99999, "%s cosine", preset)
		require.Less(t, maxDiff, 1e-3, "%s max |diff|", preset)
	}
}

func logits(t *testing.T, m *load.Model, prompt []int32) []float32 {
	t.Helper()
	b, err := cpu.New(m, cpu.Options{Threads: 2})
	require.NoError(t, err)
	defer b.Close()
	out, err := b.Step(context.Background(), []runtime.SeqStep{{Seq: 1, Tokens: prompt, Logits: true}})
	require.NoError(t, err)
	return append([]float32(nil), out[0]...)
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }

// TestEmbeddingPlan: an embedding variant has no output head and declares
// its pooling; an unknown pooling is refused.
func TestEmbeddingPlan(t *testing.T) {
	pl, err := NewPlan(Options{Preset: "qwen3-8b", Layers: 1, Dim: 64, Quant: "f32", Pooling: "last"})
	require.NoError(t, err)
	require.True(t, pl.HParams.TiedEmbedding)
	for _, ts := range pl.Tensors {
		require.NotEqual(t, "output.weight", ts.Name)
	}
	kvs, err := pl.metadata()
	require.NoError(t, err)
	found := false
	for _, x := range kvs {
		if x.key == "qwen3.pooling_type" {
			found = true
			require.Equal(t, uint32(3), x.val)
		}
	}
	require.True(t, found)
	v, err := pl.vocab()
	require.NoError(t, err)
	require.True(t, *v.AddEOS)
	plain, err := vocabFor(pl.Preset.Vocab, pl.HParams.VocabSize)
	require.NoError(t, err)
	require.True(t, plain.AddEOS == nil || !*plain.AddEOS, "the shared vocabulary is not changed")
	_, err = NewPlan(Options{Preset: "qwen3-8b", Layers: 1, Dim: 64, Pooling: "max"})
	require.ErrorIs(t, err, ErrOptions)
}
