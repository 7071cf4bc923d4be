package codegen_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestCompileGateGemmSmall compiles the small-batch product for every weight
// type (default arm, the tiny QKV shape, with and without the residual add)
// and a spread of arms, and the live-length decode attention arms, to
// compute_90 PTX.
func TestCompileGateGemmSmall(t *testing.T) {
	nv := nvrtcOrSkip(t)
	s, err := codegen.ShapeByName("tiny")
	require.NoError(t, err)
	var ks []*codegen.Kernel
	for _, ty := range codegen.WeightTypes {
		for _, res := range []bool{false, true} {
			k, err := codegen.GemmSmall(ty, (s.Heads+2*s.HeadsKV)*s.HeadDim, s.Hidden, res, codegen.DefaultGemmSmallArm)
			require.NoError(t, err)
			ks = append(ks, k)
		}
	}
	for _, arm := range []codegen.GemmSmallArm{
		{RowsPerBlock: 16, KSplit: 1, Warps: 1},
		{RowsPerBlock: 64, KSplit: 1, Warps: 2},
		{RowsPerBlock: 128, KSplit: 2, Warps: 8},
		{RowsPerBlock: 64, KSplit: 4, Warps: 16},
	} {
		for _, c := range []struct {
			ty dtype.Type
			k  int
		}{{dtype.Q4_K, 512}, {dtype.Q6_K, 256}, {dtype.Q8_0, 96}, {dtype.F16, 96}} { // ragged rows; K 96 ends in a half slice
			k, err := codegen.GemmSmall(c.ty, 1000, c.k, true, arm)
			require.NoError(t, err)
			ks = append(ks, k)
		}
	}
	for _, cache := range []dtype.Type{dtype.F32, dtype.F16, dtype.BF16} {
		for _, live := range []int{1, 2} {
			p, c, err := codegen.DecodeAttention(s.Attn(cache), codegen.DecodeArm{Threads: 64, Chunk: 64, Live: live})
			require.NoError(t, err)
			ks = append(ks, p, c)
		}
	}
	compileAll(t, nv, "compute_90", ks)
}
