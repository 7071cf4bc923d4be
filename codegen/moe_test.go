package codegen

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// goldenMoEKernels are the kernels pinned by testdata/moe_*.cu: the
// mixture-of-experts kernels at the tiny-moe shape with Q4_K experts.
func goldenMoEKernels(t *testing.T) []*Kernel {
	s, err := ShapeByName("tiny-moe")
	require.NoError(t, err)
	ks, err := MoEKernels(s, []dtype.Type{dtype.Q4_K})
	require.NoError(t, err)
	var out []*Kernel
	for _, k := range ks {
		if strings.HasPrefix(k.Family, "moe_") {
			out = append(out, k)
		}
	}
	require.Len(t, out, 10) // route, sum, gate/up and down in their grouped and one-row arms, the routing gate/up and the summing down (float and int8)
	return out
}

func TestGoldenMoE(t *testing.T) {
	for _, k := range goldenMoEKernels(t) {
		t.Run(k.Name, func(t *testing.T) {
			path := filepath.Join("testdata", k.Name+".cu")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./codegen -run TestGoldenMoE -update")
			require.Equal(t, string(want), k.Source)
			require.NotContains(t, k.Source, "#include")
			require.Contains(t, k.Source, " "+k.Name+"(")
			require.Contains(t, k.Source, "pdl_wait();")
		})
	}
}

func TestMoEGeometry(t *testing.T) {
	s := MoEShape{Type: dtype.Q4_K, Up: dtype.Q4_K, SwiGLU: true, N: 768, K: 2048, Experts: 128, Used: 8}
	g, err := MoEGEMV(s, DefaultMoEArm)
	require.NoError(t, err)
	require.Equal(t, Geometry{Grid: dim3(96, 128, 1), Block: dim3(256, 1, 1)}, g.Launch(Dims{Tokens: 37}), "a block a row set and expert")
	o, err := MoEGEMV(s, DefaultMoEOneArm)
	require.NoError(t, err)
	require.Equal(t, Geometry{Grid: dim3(96, 8, 1), Block: dim3(256, 1, 1)}, o.Launch(Dims{Tokens: 1}), "a block a row set and choice")
	require.Equal(t, g.Params, o.Params, "Launch.One needs the same parameters")
	r, err := MoERoute(128, 8, true, DefaultMoERouteArm)
	require.NoError(t, err)
	require.Equal(t, dim3(1, 1, 1), r.Launch(Dims{Tokens: 2048}).Grid, "one block groups the whole step")
	m, err := MoESum(2048, 8, true, DefaultBlockArm)
	require.NoError(t, err)
	require.Equal(t, dim3(37, 1, 1), m.Launch(Dims{Tokens: 37}).Grid)
	require.Equal(t, "q4_k+q6_k_n768_k2048_e128_u8_swiglu", MoEClass(MoEShape{Type: dtype.Q4_K, Up: dtype.Q6_K, SwiGLU: true, N: 768, K: 2048, Experts: 128, Used: 8}))
	mixed, err := MoEGEMV(MoEShape{Type: dtype.Q4_K, Up: dtype.Q6_K, SwiGLU: true, N: 768, K: 2048, Experts: 128, Used: 8}, DefaultMoEArm)
	require.NoError(t, err)
	require.NotContains(t, mixed.Name, "+")
	require.Contains(t, mixed.Source, "dq32_q6_k(ur, u, vu)")
	sum, err := MoEGEMV(MoEShape{Type: dtype.Q6_K, N: 2048, K: 768, Experts: 128, Used: 8, PerSlot: true, Sum: true}, DefaultMoEOneArm)
	require.NoError(t, err)
	require.Equal(t, Geometry{Grid: dim3(256, 1, 1), Block: dim3(256, 1, 1)}, sum.Launch(Dims{Tokens: 1}), "a block a row set, every slot")
	require.Equal(t, "q6_k_n2048_k768_e128_u8_slot_sum", MoEClass(MoEShape{Type: dtype.Q6_K, N: 2048, K: 768, Experts: 128, Used: 8, PerSlot: true, Sum: true}))
}

func TestMoEUnsupported(t *testing.T) {
	for _, c := range []struct {
		s   MoEShape
		arm MoEArm
	}{
		{MoEShape{Type: dtype.Q4_K, N: 8, K: 100, Experts: 4, Used: 2}, DefaultMoEArm},                                // rows of 100
		{MoEShape{Type: dtype.Q8_0, N: 8, K: 64, Experts: 4, Used: 5}, DefaultMoEArm},                                 // more used than experts
		{MoEShape{Type: dtype.Q8_0, N: 0, K: 64, Experts: 4, Used: 2}, DefaultMoEArm},                                 // no rows
		{MoEShape{Type: dtype.Q8_0, N: 8, K: 64, Experts: 4, Used: 2}, MoEArm{RowsPerBlock: 8, BatchRows: 4, One: 1}}, // a one-row arm of 4 slots
		{MoEShape{Type: dtype.Q8_K, N: 8, K: 256, Experts: 4, Used: 2}, DefaultMoEArm},                                // a type the dequantisers lack
		{MoEShape{Type: dtype.Q8_0, N: 8, K: 64, Experts: 4, Used: 2, PerSlot: true, Sum: true}, DefaultMoEArm},       // a summing grouped arm
		{MoEShape{Type: dtype.Q8_0, N: 8, K: 64, Experts: 4, Used: 2, Sum: true}, DefaultMoEOneArm},                   // a summing product of token rows
	} {
		_, err := MoEGEMV(c.s, c.arm)
		require.ErrorIs(t, err, ErrUnsupported, "%+v %v", c.s, c.arm)
	}
	_, err := MoERoute(MoERouteMaxExperts+1, 2, true, DefaultMoERouteArm)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = MoERoute(8, 9, true, DefaultMoERouteArm)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = MoESum(30, 2, true, DefaultBlockArm)
	require.ErrorIs(t, err, ErrUnsupported)
}

// The references agree with each other: the route's weights sum to 1 with
// norm, a Mixtral top-k-then-softmax is the same, and groups built the
// kernel's way pass CheckMoEGroups while a misplaced slot fails it.
func TestMoERefs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const E, used, m = 16, 4, 9
	logits := randF32(r, m*E)
	ids, wts := RefMoERoute(E, used, true, logits)
	for tk := 0; tk < m; tk++ {
		sum := 0.0
		for j := 0; j < used; j++ {
			sum += float64(wts[tk*used+j])
			if j > 0 {
				require.GreaterOrEqual(t, logits[tk*E+int(ids[tk*used+j-1])], logits[tk*E+int(ids[tk*used+j])])
			}
		}
		require.InDelta(t, 1, sum, 1e-6)
	}
	_, all := RefMoERoute(E, used, false, logits)
	require.Less(t, all[0], wts[0], "unnormalised weights are a share of all the experts'")
	groups := make([]int32, E+1+len(ids))
	cnt := make([]int32, E)
	for _, e := range ids {
		cnt[e]++
	}
	at := int32(0)
	for e := range cnt {
		groups[e], at = at, at+cnt[e]
	}
	groups[E] = at
	fill := append([]int32(nil), groups[:E]...)
	for s := len(ids) - 1; s >= 0; s-- { // any order within a run
		e := ids[s]
		groups[E+1+int(fill[e])] = int32(s)
		fill[e]++
	}
	require.NoError(t, CheckMoEGroups(E, ids, groups))
	bad := append([]int32(nil), groups...)
	bad[E+1], bad[E+2] = bad[E+2], bad[E+1]
	if ids[bad[E+1]] != ids[bad[E+2]] {
		require.Error(t, CheckMoEGroups(E, ids, bad))
	}
	bad = append([]int32(nil), groups...)
	bad[E] = 0
	require.Error(t, CheckMoEGroups(E, ids, bad))

	s := MoEShape{Type: dtype.Q8_0, Up: dtype.F16, SwiGLU: true, N: 5, K: 64, Experts: E, Used: used}
	W, err := dtype.Quantize(dtype.Q8_0, randF32(r, E*5*64))
	require.NoError(t, err)
	U, err := dtype.Quantize(dtype.F16, randF32(r, E*5*64))
	require.NoError(t, err)
	x := randF32(r, m*64)
	y, err := RefMoEGEMV(s, W, U, x, ids)
	require.NoError(t, err)
	// slot 0's first row by hand
	wf, _ := DequantRows(dtype.Q8_0, W, E*5, 64)
	uf, _ := DequantRows(dtype.F16, U, E*5, 64)
	var g, u float64
	for i := 0; i < 64; i++ {
		g += float64(wf[int(ids[0])*5*64+i]) * float64(x[i])
		u += float64(uf[int(ids[0])*5*64+i]) * float64(x[i])
	}
	require.InDelta(t, g/(1+math.Exp(-g))*u, y[0], 1e-5)
	sum := RefMoESum(5, used, y, wts, nil)
	require.Len(t, sum, m*5)
}
