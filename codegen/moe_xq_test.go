package codegen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// TestMoEXQ: the int8-activation expert products take the float
// products' grids and parameters (with the quantised rows for x), read the
// expert's rows of the repacked E·N-row matrix after pdl_wait, and refuse
// what they do not handle.
func TestMoEXQ(t *testing.T) {
	s := MoEShape{Type: dtype.Q4_K, Up: dtype.Q4_K, SwiGLU: true, N: 768, K: 2048, Experts: 128, Used: 8}
	for _, a := range []MoEArm{DefaultMoEArm, DefaultMoEOneArm} {
		x, err := MoEXQ(s, a)
		require.NoError(t, err)
		f, err := MoEGEMV(s, a)
		require.NoError(t, err)
		require.Equal(t, f.Launch(Dims{Tokens: 5}), x.Launch(Dims{Tokens: 5}), "the float product's grid")
		require.Len(t, x.Params, len(f.Params))
		require.Equal(t, "xq", x.Params[2].Name)
		require.Equal(t, "moe_xq", x.Family)
		src := x.Source
		require.Less(t, strings.Index(src, "pdl_wait();"), strings.Index(src, "q0[i] = qp0[uu];"), "weights load once the expert is known")
		require.Contains(t, src, "(const uint4*)Wu + (size_t)rr1 * UPR", "the up rows from their own matrix")
		require.Contains(t, src, "#define N 98304", "the planes of all 128 experts")
	}
	down := MoEShape{Type: dtype.Q6_K, N: 2048, K: 768, Experts: 128, Used: 8, PerSlot: true}
	k, err := MoEXQ(down, DefaultMoEOneArm)
	require.NoError(t, err)
	require.Contains(t, k.Source, fmt.Sprintf("#define XR %d ", XQRowBytes(8*768)), "a token row of its 8 slots")
	require.Contains(t, k.Source, "#define XMT(s) (USED * K + (s) % USED * (K / 32) * 16)")
	viaGEMV, err := MoEGEMV(down, MoEArm{RowsPerBlock: 8, BatchRows: 1, One: 1, XQ: 1})
	require.NoError(t, err)
	require.Equal(t, "moe_xq", viaGEMV.Family, "MoEGEMV sends XQ arms to MoEXQ")
	require.True(t, strings.HasSuffix(viaGEMV.Name, "_one_xq"), viaGEMV.Name)
	for _, bad := range []MoEShape{
		{Type: dtype.Q4_K, Up: dtype.Q6_K, SwiGLU: true, N: 768, K: 2048, Experts: 128, Used: 8}, // a pair of two types
		{Type: dtype.Q5_K, N: 768, K: 2048, Experts: 128, Used: 8},                               // no repacked layout
		{Type: dtype.Q6_K, N: 4096, K: 14336, Experts: 8, Used: 2, PerSlot: true},                // 14 units a lane
		{Type: dtype.Q6_K, N: 4096, K: 4096, Experts: 8, Used: 8, PerSlot: true, Sum: true},      // slot rows past shared memory
	} {
		_, err := MoEXQ(bad, DefaultMoEOneArm)
		require.ErrorIs(t, err, ErrUnsupported, "%+v", bad)
	}
}

// TestMoEXQSum: the summing int8 down product quantises the token's float
// slot rows in its block (no xq parameter), reads each slot's expert from
// ids, adds into the residual row as MoESum does, and runs one-row arms
// only.
func TestMoEXQSum(t *testing.T) {
	s := MoEShape{Type: dtype.Q6_K, N: 2048, K: 768, Experts: 128, Used: 8, PerSlot: true, Sum: true}
	a := DefaultMoEOneArm
	a.XQ = 1
	k, err := MoEGEMV(s, a)
	require.NoError(t, err)
	require.Equal(t, "moe_xq", k.Family)
	f, err := MoEGEMV(s, DefaultMoEOneArm)
	require.NoError(t, err)
	require.Equal(t, f.Params, k.Params, "the float summing product's parameters: x as floats")
	require.Equal(t, f.Launch(Dims{Tokens: 1}), k.Launch(Dims{Tokens: 1}))
	src := k.Source
	require.Contains(t, src, fmt.Sprintf("#define XR %d ", XQRowBytes(8*768)))
	require.Less(t, strings.Index(src, "xq_pack4(a, inv, is)"), strings.Index(src, "__syncthreads();"), "quantised before the products")
	require.Contains(t, src, "sum = __fmaf_rn(wts[j], d[j], sum);")
	require.Contains(t, src, "y[r] = y[r] + sum;")
	_, err = MoEGEMV(s, MoEArm{RowsPerBlock: 8, BatchRows: 8, XQ: 1})
	require.ErrorIs(t, err, ErrUnsupported, "a grouped arm")
}
