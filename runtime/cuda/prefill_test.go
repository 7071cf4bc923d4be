package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime/synth"
)

// TestPlanPrefillResident: the plan lists each weight the prefill
// program's products dequantise once, with its bf16 bytes, so that
// keeping them resident is sized before the KV pool is (no GPU needed).
func TestPlanPrefillResident(t *testing.T) {
	m := synthModel(t, "llama3-8b", "q4_k_m", synth.WeightsBlocks)
	_, pre, err := lowerStage(m, BackendOptions{MaxSeqs: 4, PrefillTokens: 256}, 0, m.HParams.Layers)
	require.NoError(t, err)
	plan, err := planPrefill(pre, 256)
	require.NoError(t, err)
	require.NotEmpty(t, plan.deq)
	var bytes int64
	for wi, bp := range plan.deq {
		w := pre.Weights[wi]
		require.Equal(t, codegen.WeightMatrix, w.Kind, w.Name)
		require.Equal(t, w.Type, bp.shape.Type, w.Name)
		require.Equal(t, w.Rows(), bp.shape.N, w.Name)
		bytes += 2 * int64(bp.shape.N) * int64(bp.shape.K)
	}
	require.Equal(t, bytes, plan.deqBytes)
	// every launch of a dequantising product reads a listed weight
	launches := 0
	for _, l := range pre.Launches {
		if bp := plan.prods[l.Kernel]; bp != nil && bp.deq != nil {
			launches++
			require.Same(t, bp, plan.deq[l.Args[0].Index])
		}
	}
	require.Greater(t, launches, len(plan.deq)-1)
}

// TestResidentWeightsPolicy: resident by default where the bf16 rows take
// at most a quarter of what is left for the KV cache; the option forces
// either way; nothing to keep, nothing kept.
func TestResidentWeightsPolicy(t *testing.T) {
	for _, c := range []struct {
		mode        string
		deq, left   int64
		want, error bool
	}{
		{"", 10, 40, true, false},
		{"", 10, 39, false, false},
		{"", 0, 40, false, false},
		{"resident", 10, 1, true, false},
		{"resident", 0, 1, false, false},
		{"dequant", 1, 100, false, false},
		{"bf16", 1, 100, false, true},
	} {
		got, err := residentWeights(c.mode, c.deq, c.left, 0)
		if c.error {
			require.ErrorIs(t, err, ErrArg)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%+v", c)
	}
}
