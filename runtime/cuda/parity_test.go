package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParityPass: a flip passes when the reference's margin is within the
// fixed tie tolerance or within tie-sigma times the step's RMS logit
// difference; one flip outside both fails the report, as does a cosine.
func TestParityPass(t *testing.T) {
	r := ParityReport{MinCosine: 0.9996, Flips: []Flip{{Gap: 0.01, RMS: 0.02}, {Gap: 0.026, RMS: 0.02}}}
	require.False(t, r.Pass(0.999, 0.02, 0), "the 0.026 flip is past the fixed tolerance")
	require.True(t, r.Pass(0.999, 0.02, 3), "0.026 is 1.3× the step's noise")
	require.False(t, r.Pass(0.9999, 0.02, 3), "cosine")
	r.Flips = append(r.Flips, Flip{Gap: 0.5, RMS: 0.02})
	require.False(t, r.Pass(0.999, 0.02, 3), "a 25σ flip is a real difference")
	require.True(t, ParityReport{MinCosine: 1}.Pass(0.999, 0, 0))
	require.Equal(t, 0.5, rmsDiff([]float32{1, 2}, []float32{0.5, 2.5}))
}
