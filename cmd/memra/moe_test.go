package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
)

// autotune reads a mixture-of-experts model's experts and the types of its
// expert tensors, and lists the MoE kernels' tasks.
func TestAutotuneMoE(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "qwen3-30b-a3b", Quant: "q4_k_m", Layers: 8, Dim: 256, Weights: synth.WeightsBlocks})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	defer m.Close()
	s, w, err := modelShape(m)
	require.NoError(t, err)
	require.Equal(t, []int{128, 8, 96}, []int{s.Experts, s.ExpertsUsed, s.ExpertFFN})
	require.Equal(t, dtype.Q4_K, w.FFNUp)
	// rows of 96 fall back from Q4_K and Q6_K to Q5_0 and Q8_0: both kinds of layer
	require.ElementsMatch(t, []dtype.Type{dtype.Q5_0, dtype.Q8_0}, w.Downs)

	out, err := runAutotuneArgs(t, "--list", "--shapes", "tiny-moe", "--types", "q8_0", "--families", "moe_route,moe_gemv,moe_sum")
	require.NoError(t, err)
	require.Contains(t, out, "moe_route/e8_u2_norm")
	require.Contains(t, out, "moe_gemv/q8_0_n256_k256_e8_u2_swiglu")
	require.Contains(t, out, "moe_gemv/q8_0_n256_k256_e8_u2_slot")
	require.Contains(t, out, "moe_sum/n256_u2_res")
}

func TestInspectMoE(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "mixtral-8x7b", Quant: "q8_0", Layers: 1, Dim: 256, FFN: 256})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	defer m.Close()
	var out bytes.Buffer
	require.NoError(t, writeInspect(&out, m))
	require.Regexp(t, `architecture: +mixtral`, out.String())
	require.Regexp(t, `experts: +8, 2 a token, feed forward 256, weights renormalised true`, out.String())
	require.Regexp(t, `blk\.0\.ffn_down_exps\.weight +Q8_0 +\[256 256 8\]`, out.String())
}
