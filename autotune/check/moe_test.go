package check

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

func TestMoECases(t *testing.T) {
	s, err := codegen.ShapeByName("tiny-moe")
	require.NoError(t, err)
	cs := MoECases(s, []dtype.Type{dtype.Q4_K, dtype.Q8_0}, 1)
	var labels []string
	for _, c := range cs {
		labels = append(labels, c.Label+" "+c.DType)
	}
	require.Equal(t, []string{"moe_route×1 f32", "moe_route×12 f32", "moe_route×300 f32", "moe_sum×12 f32",
		"moe_router×1 f32", "moe_router+norm×1 f32", "moe_router+norm+xq×1 f32", "moe_router×12 f32", "moe_router+norm×12 f32", "moe_router+norm+xq×12 f32",
		"moe_gemv/gate_up q4_k", "moe_gemv/gate_up×12 q4_k", "moe_gemv/gate_up×64 q4_k", "moe_gemv/down q4_k", "moe_gemv/down×12 q4_k",
		"moe_gemv/gate_up+route q4_k", "moe_gemv/down_sum q4_k", "moe_gemv/down_sum+quant q4_k",
		"moe_gemv/gate_up q8_0", "moe_gemv/gate_up×12 q8_0", "moe_gemv/gate_up×64 q8_0", "moe_gemv/down q8_0", "moe_gemv/down×12 q8_0",
		"moe_gemv/gate_up+route q8_0", "moe_gemv/down_sum q8_0", "moe_gemv/down_sum+quant q8_0"}, labels)
	require.Empty(t, MoECases(tiny(t), []dtype.Type{dtype.Q4_K}, 1), "a dense shape has none")
	kc := KernelCheckCases(s, []dtype.Type{dtype.Q4_K}, 1)
	require.Equal(t, "moe_gemv/down_sum+quant", kc[len(kc)-1].Label, "kernel-check runs them after the dense cases")

	for _, c := range cs {
		arms := append([]codegen.Point{c.Space().Default}, c.ExtraArms...)
		for _, arm := range arms {
			l, err := c.Launch(arm)
			require.NoError(t, err, c.Label)
			if strings.HasPrefix(c.Label, "moe_router+norm+xq") {
				require.Len(t, l.Kernels, 2, "the router with the norm, then XQuant of its rows")
			} else if arm["xq"] == 1 && strings.HasPrefix(c.Label, "moe_gemv/down_sum") {
				require.Len(t, l.Kernels, 1, "the summing int8 product quantises its rows itself")
				require.Equal(t, "moe_xq", l.Kernels[0].Family)
				require.Equal(t, strings.HasSuffix(c.Label, "+quant"), strings.HasSuffix(l.Kernels[0].Name, "_qn"), "and the next norm's with +quant")
			} else if arm["xq"] == 1 {
				require.Len(t, l.Kernels, 2, "XQuant, then the product")
				require.Equal(t, "xquant", l.Kernels[0].Family)
				require.Equal(t, "moe_xq", l.Kernels[1].Family)
				require.Equal(t, codegen.XQTol, c.TolOf(arm), "the int8 class's tolerance")
			} else {
				require.Len(t, l.Kernels, 1)
			}
			for i, k := range l.Kernels {
				require.Len(t, l.Args[i], len(k.Params), c.Label)
				g := k.Launch(l.Dims)
				require.Positive(t, g.Grid[0]*g.Grid[1], c.Label)
			}
		}
		if strings.HasPrefix(c.Label, "moe_router×") {
			require.Equal(t, "gemv", c.Family, "the router is a float GEMV")
			require.Len(t, c.ExtraArms, len(routerCheckArms))
		}
		if strings.HasPrefix(c.Label, "moe_router+norm") {
			// the router's class: the arm autotune picks is the one lowering looks up
			require.Equal(t, codegen.ProductClass(dtype.F32, s.Experts, s.Hidden, false), c.Class)
			require.Equal(t, codegen.DefaultRouterArm.Point(), c.Space().Default)
			l, err := c.Launch(c.Space().Default)
			require.NoError(t, err)
			if strings.Contains(c.Label, "+xq") {
				require.Len(t, l.Outs, 4, "the logits, the normalised rows, theirs quantised and XQuant's")
				require.Equal(t, "xquant", l.Kernels[1].Family)
			} else {
				require.Len(t, c.ExtraArms, len(routerCheckArms)-1, "the default is among routerCheckArms")
				require.Len(t, l.Outs, 2, "the logits and the normalised rows")
			}
		}
		if strings.HasPrefix(c.Label, "moe_gemv") && !strings.Contains(c.Label, "×") && !strings.Contains(c.Label, "_sum") && !strings.HasSuffix(c.Label, "+route") {
			require.Len(t, c.ExtraArms, 2, "one token: the one-row arm too, and its int8 twin")
			require.Equal(t, 1, c.ExtraArms[0]["one"])
			require.Equal(t, 1, c.ExtraArms[1]["one"])
			require.Equal(t, 1, c.ExtraArms[1]["xq"])
		}
	}
	// the summing down product runs one-row arms only, the default among them
	ds := cs[slices.IndexFunc(cs, func(c *Case) bool { return c.Label == "moe_gemv/down_sum" })]
	require.Equal(t, 1, ds.Space().Default["one"])
	_, err = ds.Launch(codegen.DefaultMoEArm.Point())
	require.ErrorIs(t, err, ErrCase)
	// so does the routing gate/up product, whose ids are MoERoute's exactly
	rt := cs[slices.IndexFunc(cs, func(c *Case) bool { return c.Label == "moe_gemv/gate_up+route" })]
	require.Equal(t, 1, rt.Space().Default["one"])
	_, err = rt.Launch(codegen.DefaultMoEArm.Point())
	require.ErrorIs(t, err, ErrCase)
	l, err := rt.Launch(rt.Space().Default)
	require.NoError(t, err)
	require.Equal(t, "logits", l.Kernels[0].Params[3].Name)
	// a one-row arm is no arm of a batch case
	batch := cs[slices.IndexFunc(cs, func(c *Case) bool { return c.Label == "moe_gemv/gate_up×12" })]
	_, err = batch.Launch(codegen.DefaultMoEOneArm.Point())
	require.ErrorIs(t, err, ErrCase)
}

// The comparisons pass the reference's own outputs and fail wrong ones:
// other ids or groups that do not group the slots are an infinite error,
// zero outputs an error of 1.
func TestMoECompare(t *testing.T) {
	s, err := codegen.ShapeByName("tiny-moe")
	require.NoError(t, err)
	route := MoERoute(s.Name, s.Experts, s.ExpertsUsed, true, 12, 3)
	l, err := route.Launch(route.Space().Default)
	require.NoError(t, err)
	logits := bytesF32(l.Args[0][0].Buf.Data)
	ids, wts := codegen.RefMoERoute(s.Experts, s.ExpertsUsed, true, logits)
	require.Equal(t, []int32{1, 2}, ids[:2], "the tie in the first token goes to the lower expert first")
	groups := make([]int32, s.Experts+1, s.Experts+1+len(ids))
	for _, e := range ids {
		groups[e+1]++
	}
	for e := 1; e <= s.Experts; e++ {
		groups[e] += groups[e-1]
	}
	for e := 0; e < s.Experts; e++ {
		for sl := len(ids) - 1; sl >= 0; sl-- { // reversed within a run: any order passes
			if int(ids[sl]) == e {
				groups = append(groups, int32(sl))
			}
		}
	}
	e, err := route.Compare([][]byte{i32Bytes(ids), f32Bytes(wts), i32Bytes(groups)})
	require.NoError(t, err)
	require.Zero(t, e)
	swapped := append([]int32(nil), ids...)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	e, _ = route.Compare([][]byte{i32Bytes(swapped), f32Bytes(wts), i32Bytes(groups)})
	require.True(t, math.IsInf(e, 1))
	bad := append([]int32(nil), groups...)
	bad[len(bad)-1] = bad[len(bad)-2]
	e, _ = route.Compare([][]byte{i32Bytes(ids), f32Bytes(wts), i32Bytes(bad)})
	require.True(t, math.IsInf(e, 1))

	gu, _ := codegen.MoEShapes(s, dtype.Q8_0)
	for _, m := range []int{1, 5} {
		c := MoEProduct(s.Name, "gate_up", gu, m, 4)
		l, err := c.Launch(c.Space().Default)
		require.NoError(t, err)
		W, Wu, x := l.Args[0][0].Buf.Data, l.Args[0][1].Buf.Data, bytesF32(l.Args[0][2].Buf.Data)
		ids := bytesI32(l.Args[0][3].Buf.Data)
		require.NoError(t, codegen.CheckMoEGroups(gu.Experts, ids, bytesI32(l.Args[0][4].Buf.Data)))
		want, err := codegen.RefMoEGEMV(gu, W, Wu, x, ids)
		require.NoError(t, err)
		e, err := c.Compare([][]byte{f32Bytes(want)})
		require.NoError(t, err)
		require.Less(t, e, 1e-7, "the parallel reference is the reference")
		e, _ = c.Compare([][]byte{make([]byte, 4*len(want))})
		require.InDelta(t, 1, e, 1e-9)
	}
	// the routing gate/up product: the reference's choice, weights and
	// product pass; other ids are an infinite error, zero weights an error of 1
	rt := MoERouted(s.Name, gu, true, 6)
	l, err = rt.Launch(rt.Space().Default)
	require.NoError(t, err)
	W, Wu, x := l.Args[0][0].Buf.Data, l.Args[0][1].Buf.Data, bytesF32(l.Args[0][2].Buf.Data)
	rids, rwts := codegen.RefMoERoute(gu.Experts, gu.Used, true, bytesF32(l.Args[0][3].Buf.Data))
	want, err := codegen.RefMoEGEMV(gu, W, Wu, x, rids)
	require.NoError(t, err)
	e, err = rt.Compare([][]byte{f32Bytes(want), i32Bytes(rids), f32Bytes(rwts)})
	require.NoError(t, err)
	require.Less(t, e, 1e-7)
	swapped = append([]int32(nil), rids...)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	e, _ = rt.Compare([][]byte{f32Bytes(want), i32Bytes(swapped), f32Bytes(rwts)})
	require.True(t, math.IsInf(e, 1), "the experts in another order")
	e, _ = rt.Compare([][]byte{f32Bytes(want), i32Bytes(rids), make([]byte, 4*len(rwts))})
	require.InDelta(t, 1, e, 1e-9)

	sum := MoESum(s.Name, s.Hidden, s.ExpertsUsed, 3, 5)
	l, err = sum.Launch(sum.Space().Default)
	require.NoError(t, err)
	d, w, y0 := bytesF32(l.Args[0][0].Buf.Data), bytesF32(l.Args[0][1].Buf.Data), bytesF32(l.Args[0][2].Buf.Data)
	e, err = sum.Compare([][]byte{f32Bytes(codegen.RefMoESum(s.Hidden, s.ExpertsUsed, d, w, y0))})
	require.NoError(t, err)
	require.Zero(t, e)
	e, _ = sum.Compare([][]byte{f32Bytes(y0)})
	require.Greater(t, e, 0.1, "the sum left out")
}

func TestMoETuneCases(t *testing.T) {
	s, err := codegen.ShapeByName("qwen3-30b-a3b")
	require.NoError(t, err)
	w := UniformWeights(dtype.Q4_K)
	w.Downs = []dtype.Type{dtype.Q4_K, dtype.Q6_K}
	var ids []string
	for _, c := range moeTuneCases(s, w, DefaultSizes, 1) {
		ids = append(ids, c.ID())
		if c.Family == "moe_gemv" && !strings.HasSuffix(c.ID(), "_sum") && !strings.HasSuffix(c.ID(), "_route_norm") {
			// the grouped products at the batch arms' batch: no one-row arm to fail
			for _, a := range c.Space().Arms() {
				require.Zero(t, a["one"], "%s %v", c.ID(), a)
			}
		}
		if strings.HasSuffix(c.ID(), "_sum") || strings.HasSuffix(c.ID(), "_route_norm") {
			// a one-sequence program's own products: the one-row int8 arms lowering runs
			sp := c.Space()
			require.Equal(t, 1, sp.Default["one"], c.ID())
			require.Equal(t, 1, sp.Default["xq"], c.ID())
			for _, a := range sp.Arms() {
				require.Equal(t, 1, a["one"], c.ID())
				require.Equal(t, 1, a["xq"], c.ID())
				_, err := c.Kernels(a)
				require.NoError(t, err, "%s %v", c.ID(), a)
			}
		}
	}
	require.Equal(t, []string{"moe_route/e128_u8_norm", "moe_sum/n2048_u8_res", "gemv/f32_n128_k2048", "moe_gemv/q4_k_n768_k2048_e128_u8_swiglu",
		"moe_gemv/q4_k_n768_k2048_e128_u8_swiglu_route_norm",
		"moe_gemv/q4_k_n2048_k768_e128_u8_slot", "moe_gemv/q4_k_n2048_k768_e128_u8_slot_sum",
		"moe_gemv/q6_k_n2048_k768_e128_u8_slot", "moe_gemv/q6_k_n2048_k768_e128_u8_slot_sum"}, ids)
}
