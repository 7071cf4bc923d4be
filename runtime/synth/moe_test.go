package synth

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// The mixture-of-experts presets have the published models' parameter
// counts, and their standard mixes the published files' sizes.
func TestMoEPresetSizes(t *testing.T) {
	for _, c := range []struct {
		preset, quant string
		params        float64 // billions, the model card's
		gb            float64 // published file size, GB
	}{
		{"qwen3-30b-a3b", "q4_k_m", 30.5, 18.6},
		{"qwen3-30b-a3b", "q8_0", 30.5, 32.5},
		{"mixtral-8x7b", "q8_0", 46.7, 49.62},
	} {
		pl, err := NewPlan(Options{Preset: c.preset, Quant: c.quant})
		require.NoError(t, err)
		require.InDelta(t, c.params, float64(pl.Params)/1e9, 0.05, c.preset)
		got := float64(pl.Bytes) / 1e9
		require.InDelta(t, c.gb, got, c.gb*0.01, "%s %s: %.3f GB", c.preset, c.quant, got)
		require.True(t, pl.Blocks, "a model this large writes random blocks")
	}
}

func TestMoEMixRules(t *testing.T) {
	types := func(preset string) map[string]dtype.Type {
		pl, err := NewPlan(Options{Preset: preset, Quant: "q4_k_m"})
		require.NoError(t, err)
		m := map[string]dtype.Type{}
		for _, tt := range pl.Tensors {
			m[tt.Name] = tt.Type
			if tt.Name == "blk.0.ffn_down_exps.weight" {
				require.Len(t, tt.Shape, 3)
				require.Equal(t, pl.HParams.Experts, tt.Shape[2])
			}
		}
		return m
	}
	mx := types("mixtral-8x7b")
	for l := 0; l < 32; l++ {
		// eight experts: attn_k and attn_v in Q8_0, attn_output in Q5_K
		require.Equal(t, dtype.Q8_0, mx[blkName(l, "attn_v")], l)
		require.Equal(t, dtype.Q8_0, mx[blkName(l, "attn_k")], l)
		require.Equal(t, dtype.Q5_K, mx[blkName(l, "attn_output")], l)
		require.Equal(t, dtype.Q4_K, mx[blkName(l, "attn_q")], l)
		require.Equal(t, dtype.F32, mx[blkName(l, "ffn_gate_inp")], l)
		require.Equal(t, dtype.Q4_K, mx[blkName(l, "ffn_gate_exps")], l)
		require.Equal(t, dtype.Q4_K, mx[blkName(l, "ffn_up_exps")], l)
		down := dtype.Q4_K
		if useMoreBits(l, 32) {
			down = dtype.Q6_K
		}
		require.Equal(t, down, mx[blkName(l, "ffn_down_exps")], l)
		require.NotContains(t, mx, blkName(l, "ffn_up"))
	}
	qw := types("qwen3-30b-a3b")
	require.False(t, useMoreBits(7, 48))
	for _, l := range []int{0, 6, 7, 8, 47} {
		want := dtype.Q4_K
		if useMoreBits(l, 48) {
			want = dtype.Q6_K
		}
		require.Equal(t, want, qw[blkName(l, "attn_v")], "128 experts: the dense rule, layer %d", l)
		require.Equal(t, want, qw[blkName(l, "ffn_down_exps")], l)
		require.Equal(t, dtype.Q4_K, qw[blkName(l, "attn_k")], l)
		require.Equal(t, dtype.F32, qw[blkName(l, "ffn_gate_inp")], l)
	}
}

func TestMoEOverrides(t *testing.T) {
	pl, err := NewPlan(Options{Preset: "qwen3-30b-a3b", Layers: 2, Dim: 256})
	require.NoError(t, err)
	hp := pl.HParams
	require.Equal(t, []int{128, 8, 96}, []int{hp.Experts, hp.ExpertsUsed, hp.ExpertFFN}, "768 scaled by 256/2048")
	pl, err = NewPlan(Options{Preset: "mixtral-8x7b", Layers: 2, Dim: 256, FFN: 512})
	require.NoError(t, err)
	require.Equal(t, []int{8, 2, 512, 512}, []int{pl.HParams.Experts, pl.HParams.ExpertsUsed, pl.HParams.ExpertFFN, pl.HParams.FFN})
}

func TestSmallMoEModels(t *testing.T) {
	for _, c := range []struct{ preset, quant, arch string }{
		{"qwen3-30b-a3b", "q4_k_m", "qwen3moe"}, {"mixtral-8x7b", "q4_k_m", "mixtral"}, {"mixtral-8x7b", "q8_0", "mixtral"},
	} {
		m := small(t, c.preset, c.quant, false)
		p, _ := Lookup(c.preset)
		require.Equal(t, c.arch, m.HParams.Arch, c.preset)
		require.Equal(t, p.HParams.Experts, m.HParams.Experts)
		require.Equal(t, p.HParams.ExpertsUsed, m.HParams.ExpertsUsed)
		require.True(t, m.HParams.ExpertNorm)
		if c.arch == "mixtral" {
			a, _ := m.GGUF.String("general.architecture")
			require.Equal(t, "llama", a, "as llama.cpp writes Mixtral")
		}
		ids := m.Tokenizer.Encode("Hello world, this is memra.", false, false)
		require.Contains(t, m.Tokenizer.Decode(ids), "Hello world, this is memra.")
		require.Equal(t, p.Template != "", m.ChatTemplate != "")
		// the CPU runs it, and its logits are finite
		l := logits(t, m, ids)
		for _, v := range l {
			require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0))
		}
	}
}

// A mixture-of-experts GGUF and its Hugging Face twin (experts as one
// tensor each, routers in float32 in both) give the same logits on the CPU.
func TestMoEGGUFAndHFTwinSameLogits(t *testing.T) {
	for _, preset := range []string{"qwen3-30b-a3b", "mixtral-8x7b"} {
		g := small(t, preset, "f16", false)
		h := small(t, preset, "f16", true)
		require.Equal(t, g.HParams.Experts, h.HParams.Experts, preset)
		require.Equal(t, g.HParams.ExpertFFN, h.HParams.ExpertFFN, preset)
		require.Equal(t, g.HParams.Arch, h.HParams.Arch, preset)
		prompt := g.Tokenizer.Encode("The quick brown fox jumps over the lazy dog", true, false)
		require.Equal(t, prompt, h.Tokenizer.Encode("The quick brown fox jumps over the lazy dog", true, false), preset)
		lg, lh := logits(t, g, prompt), logits(t, h, prompt)
		require.Len(t, lh, len(lg))
		maxDiff, mx := 0.0, 0.0
		for i := range lg {
			maxDiff = math.Max(maxDiff, math.Abs(float64(lg[i]-lh[i])))
			mx = math.Max(mx, math.Abs(float64(lg[i])))
		}
		require.Greater(t, mx, 0.1, preset)
		require.Less(t, maxDiff, 1e-3, "%s max |diff|", preset)
	}
}
