package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

// TestYarnModel runs a tiny llama with YaRN scaling (factor 4 over an
// original context of 16) past its original context. Its logits differ
// from the same weights unscaled, and equal those of an unscaled twin
// built to compute the same thing by other means: rope_freqs.weight
// holding YaRN's divisors, and q and k projections multiplied by the
// attention factor m = 1 + 0.1·ln 4 (YaRN multiplies cos and sin by m).
func TestYarnModel(t *testing.T) {
	hp := smallLlama
	hp.RopeScaling = ir.RopeScaling{}
	plain := randomModel(t, hp, dtype.F32, 11)
	yarn := hp
	yarn.RopeScaling = ir.RopeScaling{Type: "yarn", Factor: 4, OriginalContext: 16}

	// Head size 32, base 1e4: pair i turns 32 times over 16 positions at
	// i = 32·ln(16/(2π·32))/(2·ln 1e4) < 0, once at 1.62; so the ramp runs
	// from pair 0 (kept) to pair 2 (θ/4), and pair 1 gets θ·(0.5/4 + 0.5).
	twin := memSource{}
	for k, v := range plain {
		twin[k] = v
	}
	div := make([]float32, hp.RopeDim/2)
	for i := range div {
		div[i] = 4
	}
	div[0], div[1] = 1, 1/(0.5/4+0.5)
	data, err := dtype.Quantize(dtype.F32, div)
	require.NoError(t, err)
	twin["rope_freqs.weight"] = memTensor{dtype.F32, []int{len(div)}, data}
	m := 1 + 0.1*math.Log(4)
	for l := 0; l < hp.Layers; l++ {
		for _, name := range []string{"attn_q.weight", "attn_k.weight"} {
			name = fmt.Sprintf("blk.%d.%s", l, name)
			e := plain[name]
			v := make([]float32, len(e.data)/4)
			require.NoError(t, dtype.Dequantize(dtype.F32, e.data, v))
			for i := range v {
				v[i] = float32(float64(v[i]) * m)
			}
			data, err := dtype.Quantize(dtype.F32, v)
			require.NoError(t, err)
			twin[name] = memTensor{dtype.F32, e.ne, data}
		}
	}

	run := func(hp ir.HParams, src memSource) [][]float32 {
		b, err := NewFromSource(hp, src, Options{Threads: 2})
		require.NoError(t, err)
		prompt := make([]int32, 24)
		for i := range prompt {
			prompt[i] = int32(1 + i*7%(hp.VocabSize-1))
		}
		return decode(t, b, 1, prompt, 4) // positions 0–23, then 24–27
	}
	got := run(yarn, plain)
	want := run(hp, twin)
	unscaled := run(hp, plain)
	for i := range got {
		requireRel(t, want[i], got[i], 1e-5, "yarn vs its unscaled twin")
		require.Less(t, runtime.Cosine(got[i], unscaled[i]), 0.999, "step %d: yarn changes the logits", i)
	}
}
