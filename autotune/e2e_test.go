package autotune

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
)

// fakeE2E: a step costs the sum of per-family costs of the chosen arms,
// times the batch's weight; one planted arm corrupts the logits.
type fakeE2E struct {
	cost  map[string]float64 // family:arm name → µs
	wrong string
}

func (f *fakeE2E) Step(_ context.Context, arms Assignment, batch int) (Measurement, error) {
	m := Measurement{Tol: 1e-3, Samples: 10}
	for fam, p := range arms {
		sp, err := codegen.SpaceByName(fam)
		if err != nil {
			return m, err
		}
		key := fam + ":" + sp.ArmName(p)
		c, ok := f.cost[key]
		if !ok {
			c = 10
		}
		m.TimeUS += c * float64(batch)
		if key == f.wrong {
			m.RelErr = 0.5
		}
	}
	return m, nil
}

func TestCompareE2E(t *testing.T) {
	base := DefaultAssignment()
	require.Len(t, base, len(codegen.Spaces()))
	tuned := DefaultAssignment()
	tuned["gemv"] = codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1}.Point()
	f := &fakeE2E{cost: map[string]float64{"gemv:t128_r4_u2_s1": 5}}
	res, err := CompareE2E(context.Background(), f, tuned, base, []int{1, 4})
	require.NoError(t, err)
	require.Len(t, res, 2)
	for _, r := range res {
		require.True(t, r.TunedPass)
		require.Greater(t, r.Speedup, 1.0)
	}
	f.wrong = "gemv:t128_r4_u2_s1"
	res, err = CompareE2E(context.Background(), f, tuned, base, []int{1})
	require.NoError(t, err)
	require.False(t, res[0].TunedPass, "a wrong step is refused")
	require.Contains(t, tuned.String(), "gemv:rows_per_block=4")
}
