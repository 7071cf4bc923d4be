package codegen_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// orderedArm is the default XQ 3 arm, ordered, with ks warps splitting K.
func orderedArm(ks int) codegen.GEMVArm {
	a := codegen.DefaultXQMMAArm
	a.Ordered = 1
	return a.Split(ks)
}

// TestOrderedArmName: the ordered arm's name carries _o1 and parses back;
// an ordered arm is only an unpipelined XQ 3 arm whose split divides 32.
func TestOrderedArmName(t *testing.T) {
	a := orderedArm(8)
	require.Equal(t, codegen.DefaultXQOrderedArm, a)
	require.Equal(t, "t256_r1_u1_s1_l1_m16_w2_o1", a.String())
	b, err := codegen.ParseGEMVArm(a.String())
	require.NoError(t, err)
	require.Equal(t, a, b)
	bad := []codegen.GEMVArm{codegen.DefaultXQMMAPipeArm, codegen.DefaultXQGlobalBatchArm, codegen.DefaultXQMMAArm.Split(6), codegen.DefaultXQMMAArm.Split(4)}
	for _, x := range bad {
		x.Ordered = 1
		require.ErrorIs(t, x.Validate(), codegen.ErrUnsupported, x.String())
	}
	// the order of XQ 2 kernels split over two warps: 16 or 32 warps, unpipelined
	s := codegen.DefaultXQOrderedSplitArm
	require.Equal(t, "t512_r1_u1_s1_l1_m16_w2_o21", s.String())
	for _, u := range []int{1, 2, 4, 8} {
		x, ok := codegen.OrderedFor(codegen.DefaultXQGlobalOneArm.Split(2))
		require.True(t, ok)
		x.Ordered = 20 + u
		require.NoError(t, x.Validate(), x.String())
		y, err := codegen.ParseGEMVArm(x.String())
		require.NoError(t, err)
		require.Equal(t, x, y)
	}
	for _, o := range []int{2, 11, 23, 31, 41} {
		x := s
		x.Ordered = o
		require.ErrorIs(t, x.Validate(), codegen.ErrUnsupported, "Ordered %d", o)
	}
	for _, x := range []codegen.GEMVArm{orderedArm(8), s} {
		x.Ordered = 21
		if x.Threads == 256 {
			require.ErrorIs(t, x.Validate(), codegen.ErrUnsupported, "eight warps would keep 8 lane sums a lane")
		}
		x.Stages = 4
		require.ErrorIs(t, x.Validate(), codegen.ErrUnsupported, "no pipelined split order")
	}
	one := codegen.DefaultXQGlobalOneArm
	o1, ok := codegen.OrderedFor(one.Split(1))
	require.True(t, ok)
	require.Equal(t, codegen.DefaultXQOrderedPipeArm, o1, "the pipelined ordered arm, faster on an H100")
	one.Unroll = 4
	o2, ok := codegen.OrderedFor(one.Split(2))
	require.True(t, ok)
	require.Equal(t, 24, o2.Ordered)
	_, ok = codegen.OrderedFor(one.Split(4))
	require.False(t, ok, "no ordered arm for four split warps")
	_, err = codegen.GEMVXQ(dtype.Q8_0, 256, 256, false, a, codegen.XQEnds{}, 0)
	require.ErrorIs(t, err, codegen.ErrUnsupported, "Q8_0's XQ 2 lanes add 16-element units")
}

// TestOrderedTerms: the XQ 2 kernels and the ordered XQ 3 kernel compute
// every group's term through the same pinned function, and the ordered
// kernel adds its slots and warps by the butterfly's levels, not in a
// loop of +=.
func TestOrderedTerms(t *testing.T) {
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K, dtype.Q4_0} {
		x2, err := codegen.GEMVXQ(ty, 512, 512, false, codegen.DefaultXQGlobalBatchArm, codegen.XQEnds{}, 0)
		require.NoError(t, err)
		o, err := codegen.GEMVXQ(ty, 512, 512, false, orderedArm(8), codegen.XQEnds{}, 0)
		require.NoError(t, err)
		term := func(src string) string {
			i := strings.Index(src, "xq_term(")
			require.Positive(t, i, ty.String())
			return src[i : i+strings.Index(src[i:], "}")]
		}
		require.Equal(t, term(x2.Source), term(o.Source), "%v: one term function", ty)
		require.Contains(t, o.Source, "v3 = __fadd_rn(v3, v7);", "the warps' level 4 of eight")
		require.Contains(t, o.Source, "oacc[1][mt][nt][i] = __fadd_rn(oacc[1][mt][nt][i], oacc[3][mt][nt][i]);", "level 16 of four slots")
		require.NotContains(t, o.Source, "acc[mt][nt][i] += red")
		// the split order's kernel is ordered too: its sets, the leaf add, no loop of +=
		sa := orderedArm(16)
		sa.Ordered = 21
		so, err := codegen.GEMVXQ(ty, 512, 512, false, sa, codegen.XQEnds{}, 0)
		require.NoError(t, err)
		require.Equal(t, term(x2.Source), term(so.Source), "%v: one term function", ty)
		require.Contains(t, so.Source, "2 sets of R lane sums")
		require.Contains(t, so.Source, "oacc[0][mt][nt][i] = __fadd_rn(oacc[0][mt][nt][i], oacc[2][mt][nt][i]);", "set 1's value into residue 0's lane sum")
		require.NotContains(t, so.Source, "acc[mt][nt][i] += red")
	}
}

// TestCompileOrdered compiles to compute_90 PTX the ordered XQ 3 product
// of Q4_K, Q6_K and Q4_0 weights, with 8 and 16 warps splitting K (16 in
// the order of XQ 2 kernels split over two warps, unroll 1, 2 and 4),
// blocks of 16 and 8 tokens, with the norm's rows and with the residual
// add: each has its mma and no local memory.
func TestCompileOrdered(t *testing.T) {
	nv := nvrtcOrSkip(t)
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K, dtype.Q4_0} {
		for _, c := range []struct{ ks, order, mb int }{{8, 1, 16}, {16, 1, 16}, {16, 21, 16}, {16, 24, 16}, {8, 1, 8}, {16, 22, 8}} {
			for i, e := range []codegen.XQEnds{{}, {NormIn: true, NormEps: 1e-5}} {
				residual := i == 0 && c.ks == 8
				a := orderedArm(c.ks)
				a.Ordered, a.BatchRows = c.order, c.mb
				require.NoError(t, a.Validate(), a.String())
				t.Run(fmt.Sprintf("%v/%v/%d", ty, a, i), func(t *testing.T) {
					k, err := codegen.GEMVXQ(ty, 4096, 4096, residual, a, e, 0)
					require.NoError(t, err)
					src := compilePTX(t, nv, k)
					require.NotContains(t, src, ".local", "%s: local memory", k.Name)
					require.Contains(t, src, "mma.sync.aligned.m16n8k", k.Name)
				})
			}
		}
	}
}

// TestCompileOrderedPipe compiles to compute_90 PTX the pipelined ordered
// product of Q4_K and Q6_K weights (16 and 8 warps splitting K, rings of 2
// to 8 slots), with the norm's rows and with the residual add: each has
// its mma and cp.async and no local memory; Q4_0 takes the unpipelined
// ordered kernel.
func TestCompileOrderedPipe(t *testing.T) {
	nv := nvrtcOrSkip(t)
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
		for _, c := range []struct{ ks, stages int }{{16, 4}, {16, 2}, {8, 8}} {
			for i, e := range []codegen.XQEnds{{}, {NormIn: true, NormEps: 1e-5}} {
				a := orderedArm(c.ks)
				a.Stages = c.stages
				require.NoError(t, a.Validate())
				t.Run(fmt.Sprintf("%v/%v/%d", ty, a, i), func(t *testing.T) {
					k, err := codegen.GEMVXQ(ty, 4096, 11008, i == 0, a, e, 0)
					require.NoError(t, err)
					require.Contains(t, k.Source, "cp_cg16(")
					src := compilePTX(t, nv, k)
					require.NotContains(t, src, ".local", "%s: local memory", k.Name)
					require.Contains(t, src, "cp.async", k.Name)
				})
			}
		}
	}
	a := orderedArm(16)
	a.Stages = 4
	k, err := codegen.GEMVXQ(dtype.Q4_0, 4096, 4096, false, a, codegen.XQEnds{}, 0)
	require.NoError(t, err)
	require.NotContains(t, k.Source, "cp_cg16(")
	require.Contains(t, k.Name, "_o1")
}
