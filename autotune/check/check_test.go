package check

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

func tiny(t *testing.T) codegen.Shape {
	s, err := codegen.ShapeByName("tiny")
	require.NoError(t, err)
	return s
}

func TestKernelCheckCases(t *testing.T) {
	cs := KernelCheckCases(tiny(t), []dtype.Type{dtype.Q4_K, dtype.F16}, 1)
	var labels []string
	for _, c := range cs {
		labels = append(labels, c.Label+" "+c.DType)
	}
	require.Equal(t, []string{"rmsnorm f32", "rope_kv f16 cache", "swiglu f32", "argmax f32", "attn_decode f16 cache", "attn_decode+xq f16 cache",
		"attn_prefill f16 cache",
		"attn_decode_live f16 cache", "attn_decode_live+xq f16 cache", "attn_decode_live+preload f16 cache", "attn_decode_live2 f16 cache", "attn_decode_live4 f16 cache", "head_rmsnorm/q f32", "head_rmsnorm/k f32", "head_rmsnorm/qk f32", "rope_kv+qk_norm f16 cache", "attn_flash f16 cache", "attn_flash f16 cache", "attn_flash_mixed f16 cache",
		"attn_decode_live+preload@32k f16 cache", "attn_prefill@32k f16 cache", "attn_flash@32k f16 cache",
		"rope_kv q8_0 cache", "attn_decode q8_0 cache", "attn_decode_live q8_0 cache",
		"attn_decode_live+preload q8_0 cache", "attn_prefill q8_0 cache", "attn_flash q8_0 cache", "attn_flash q8_0 cache", "attn_flash_mixed q8_0 cache",
		"embedding q4_k", "gemv/qkv q4_k", "mma/qkv q4_k", "gemm_small/qkv q4_k", "gemv/qkv×12 q4_k",
		"gemv-wide/qkv×32 q4_k", "gemv-wide/down×32 q4_k", "gemv-wide/qkv×64 q4_k", "gemv-wide/down×64 q4_k", "gemv-wide/gate_up×40 q4_k",
		"gemv-small/qkv×1 q4_k", "gemv-small/down×1 q4_k", "gemv-small/qkv×2 q4_k", "gemv-small/down×2 q4_k",
		"gemv-small/qkv×5 q4_k", "gemv-small/down×5 q4_k", "gemv-small/qkv×8 q4_k", "gemv-small/down×8 q4_k",
		"gemv-ordered/qkv×1 q4_k", "gemv-ordered/down×1 q4_k", "gemv-ordered/qkv×5 q4_k", "gemv-ordered/down×5 q4_k", "gemv-ordered/qkv×8 q4_k", "gemv-ordered/down×8 q4_k",
		"gemv-ordered/qkv×16 q4_k", "gemv-ordered/down×16 q4_k", "gemv-ordered/qkv×37 q4_k", "gemv-ordered/down×37 q4_k",
		"gemv-ordered/qkv×64 q4_k", "gemv-ordered/down×64 q4_k", "gemv+norm/qkv q4_k", "gemv+norm/qkv×12 q4_k",
		"gemv+norm/v (rows of 512) q4_k", "gemv+rope/q+k q4_k", "gemv+rope/v×12 q4_k",
		"gemv+head-norm-rope/q+k q4_k", "gemv+head-norm-rope/v×3 q4_k", "gemv+head-rope/qkv q4_k", "gemv+quant-out/attn_out→qkv q4_k", "gemv+quant-out/down→gate_up×12 q4_k",
		"gemv+swiglu-out/gate_up→down q4_k",
		"gemv/down q4_k", "gemv+swiglu/down q4_k", "gemv+swiglu/down×12 q4_k",
		"embedding f16", "gemv/qkv f16", "mma/qkv f16", "gemm_small/qkv f16", "gemv+norm/qkv f16", "gemv/down f16", "gemv+swiglu/down f16"}, labels)
	for _, c := range cs {
		if c.Family == "gemv" {
			want := 0
			switch {
			case strings.HasPrefix(c.Label, "gemv+swiglu-out"):
				requireChain(t, c, 2, tiny(t).FFN, "_rn_so_")
			case strings.HasPrefix(c.Label, "gemv+head-"):
				want = 1 // the one-row arm split over two warps
				// XQuant, then the product with RopeKV's operands, the norms' weights and the tickets:
				// the row, the two caches and the tickets; a ticket left nonzero is an infinite error
				_, outs := ropeCaseOuts(t, c, "_rn_hrope", 4)
				requireSpoiled(t, c, outs, func() { outs[3][0] = 1 })
			case strings.HasPrefix(c.Label, "gemv+rope"):
				if !strings.Contains(c.Label, "×") {
					want = 1 // the one-row arm split over two warps
				}
				// XQuant (the norm's rows), then the product with RopeKV's operands after its own:
				// the row and the two caches; a row written outside the product's columns is an
				// infinite error
				l, outs := ropeCaseOuts(t, c, "_rn_rope_", 3)
				require.Same(t, l.Args[0][2].Buf, l.Args[1][1].Buf, c.Label)
				requireSpoiled(t, c, outs, func() { outs[0][len(outs[0])-1] ^= 1 })
			case strings.HasPrefix(c.Label, "gemv+quant-out"):
				// the residual product's default arm; its epilogue writes the rows the next product reads
				requireChain(t, c, 5, tiny(t).Hidden, "_res_qo_", "_rn_")
				if !strings.Contains(c.Label, "×") {
					want = 1 // the one-row arm split over two warps
				}
			case strings.HasPrefix(c.Label, "gemv-wide/"):
				want = 3 // codegen.WideArms beside the 16-row default, at 32, 40 and 64 rows
				require.Equal(t, codegen.DefaultXQHalfArm.Point(), c.Space().Default, c.Label)
				require.True(t, strings.HasSuffix(c.Class, "_wide"), c.Class)
			case strings.HasPrefix(c.Label, "gemv-ordered/"):
				// the ordered arm, its pipelined form and its split order, the XQ 2 one-row arm
				// unsplit and split, the XQ 3 arms of one tile of 8 rows and XQ 2 batch arms of
				// 8 and 4 rows beside the XQ 2 batch default, then the batch default and those with
				// the prefetch, at 1 to 64 rows
				want = 22
				require.Equal(t, codegen.DefaultXQGlobalBatchArm.Point(), c.Space().Default, c.Label)
				for i, a := range c.ExtraArms {
					switch {
					case i < 3:
						require.Contains(t, []int{1, 21}, a["ordered"], c.Label)
					case i < 5:
						require.Equal(t, 1, a["batch_rows"], c.Label)
					case i < 11:
						require.Equal(t, 8, a["batch_rows"], c.Label)
						require.Equal(t, 3, codegen.GEMVArmOf(a).XQ, c.Label)
					case i < 16: // XQ 2 batch arms of 8 and 4 rows a block
						require.Contains(t, []int{4, 8}, a["batch_rows"], c.Label)
						require.Equal(t, 2, codegen.GEMVArmOf(a).XQ, c.Label)
						require.NoError(t, codegen.GEMVArmOf(a).Validate(), c.Label)
						require.Zero(t, a["prefetch"], c.Label)
					default: // the same and the default with the prefetch
						require.Equal(t, 1, a["prefetch"], c.Label)
						require.NoError(t, codegen.GEMVArmOf(a).Validate(), c.Label)
					}
				}
			case strings.HasPrefix(c.Label, "gemv-small/"):
				want = 5 // codegen.SmallArms beside the 16-row default, at 1, 2, 5 and 8 rows
				require.Equal(t, codegen.DefaultXQHalfArm.Point(), c.Space().Default, c.Label)
				require.True(t, strings.HasSuffix(c.Class, "_small"), c.Class)
				for _, a := range c.ExtraArms {
					require.Equal(t, 8, a["batch_rows"], c.Label)
					require.NoError(t, c.Space().Valid(a), c.Label)
				}
			case strings.HasPrefix(c.Label, "gemv+") && c.DType == "q4_k":
				want = 5 // the batch default besides the one-row default, the XQ 1 one-row and batch arms, the tensor-core batch arm
				// and its pipelined form
			case c.DType == "q4_k":
				want = 8 // the float GEMV on the file's and the repacked layout, the int8-activation one, the XQ 1 batch arm,
				// the XQ 1 one-row arm, the batch default, the tensor-core batch arm and its pipelined form
			}
			if want >= 5 && codegen.HalfProduct(dtype.Q4_K, c.K) && !strings.HasPrefix(c.Label, "gemv-small/") && !strings.HasPrefix(c.Label, "gemv-ordered/") {
				want++ // the f16 tensor-core arm
			}
			require.Len(t, c.ExtraArms, want, c.Label)
			_, err := c.Launch(c.Space().Default)
			require.NoError(t, err, c.Label)
			for _, a := range c.ExtraArms {
				l, err := c.Launch(a)
				require.NoError(t, err, c.Label)
				require.Len(t, l.Args, len(l.Kernels), c.Label)
				if a["xq"] >= 2 {
					// XQuant writes the rows the product reads: one shared buffer
					require.Equal(t, "xquant", l.Kernels[0].Family, c.Label)
					q, p := l.Args[0], l.Args[1]
					require.Same(t, q[len(q)-2].Buf, p[1].Buf, c.Label)
					rb := codegen.XQRowBytes(c.K)
					if a["xq"] == 4 {
						rb = codegen.XHRowBytes(c.K)
					}
					require.GreaterOrEqual(t, len(q[len(q)-2].Buf.Data), l.Dims.Tokens*rb, c.Label)
					require.Equal(t, a["xq"] == 4, strings.HasPrefix(l.Kernels[0].Name, "xhalf_"), c.Label)
					if a["xq"] == 4 {
						require.Equal(t, codegen.HalfTol, c.TolOf(a), c.Label)
					}
				}
			}
		}
		if c.Family == "mma" {
			// the unpipelined tiling, and the larger pipelined ones where
			// the shape's rows allow them
			want := 1
			if c.K%64 == 0 {
				want = 3
			}
			if want >= 5 && codegen.HalfProduct(dtype.Q4_K, c.K) {
				want++ // the f16 tensor-core arm
			}
			require.Len(t, c.ExtraArms, want, c.Label)
			for i, a := range c.ExtraArms {
				l, err := c.Launch(a)
				require.NoError(t, err, c.Label)
				require.Equal(t, i > 0, strings.Contains(l.Kernels[0].Name, "_p1"), c.Label)
				require.Equal(t, i > 0, l.Kernels[0].Launch(l.Dims).Shared > 0, c.Label)
			}
			def, err := c.Launch(c.Space().Default)
			require.NoError(t, err, c.Label)
			require.Equal(t, c.K%64 == 0, strings.Contains(def.Kernels[0].Name, "_p1"), "the default arm is pipelined where K allows: %s", c.Label)
		}
		switch c.Family {
		case "gemm_small":
			l, err := c.Launch(c.Space().Default)
			require.NoError(t, err)
			require.Equal(t, 8, l.Dims.Tokens)
		case "attn_decode_live":
			l, err := c.Launch(c.Space().Default)
			require.NoError(t, err)
			capacity := 4096
			if strings.HasSuffix(c.Label, "@32k") {
				capacity = 32768
			}
			require.Equal(t, capacity, l.Dims.KVLen, "splits cover the capacity, not the longest sequence")
			require.Equal(t, codegen.DefaultDecodeLiveArm.Splits(capacity), l.Args[0][8].Scalar)
			name := l.Kernels[0].Name
			require.Equal(t, strings.Contains(c.Label, "+preload"), strings.HasSuffix(name, "_p") || strings.Contains(name, "_p_"), name)
			switch c.Label {
			case "attn_decode_live2":
				require.Contains(t, l.Kernels[0].Name, "_l2", "the batch-invariant configuration's Live 2")
			case "attn_decode_live4":
				require.Contains(t, l.Kernels[0].Name, "_l4_m132", "Live 4 at the default card's multiprocessors")
			default:
				require.Contains(t, l.Kernels[0].Name, "_l3_m132", "the default is Live 3 at the default card's multiprocessors")
			}
			require.Contains(t, l.Kernels[0].Source, "pdl_wait")
			// the fused arms kernel-check adds: one kernel, its parameters all bound, a zero ticket a (sequence, kv head)
			if c.Label == "attn_decode_live" || c.Label == "attn_decode_live+xq" {
				require.Len(t, c.ExtraArms, 2, c.Label)
				for _, p := range c.ExtraArms {
					f, err := c.Launch(p)
					require.NoError(t, err, c.Label)
					require.Len(t, f.Kernels, 1, c.Label)
					require.Contains(t, f.Kernels[0].Name, "_f", c.Label)
					require.Equal(t, strings.HasSuffix(c.Label, "+xq"), strings.HasSuffix(f.Kernels[0].Name, "_f_xq"), c.Label)
					require.Len(t, f.Args[0], len(f.Kernels[0].Params), c.Label)
					tk := f.Args[0][9].Buf
					require.Len(t, tk.Data, 4*f.Dims.Seqs*tiny(t).HeadsKV, "a ticket a (sequence, kv head)")
					require.Equal(t, make([]byte, len(tk.Data)), tk.Data)
					require.Equal(t, l.Outs[0].Data, f.Outs[0].Data, "the output buffer is the combine's")
				}
			}
		}
	}
}

// TestCompareDetectsWrongOutput feeds each case's reference-shaped outputs:
// the untouched inputs (wrong for every family) must fail the tolerance.
func TestCompareDetectsWrongOutput(t *testing.T) {
	for _, c := range KernelCheckCases(tiny(t), []dtype.Type{dtype.Q8_0}, 1) {
		t.Run(c.Label, func(t *testing.T) {
			arm := c.Space().Default
			l, err := c.Launch(arm)
			require.NoError(t, err)
			require.NotEmpty(t, l.Kernels)
			require.Len(t, l.Args, len(l.Kernels))
			outs := make([][]byte, len(l.Outs))
			for i, o := range l.Outs {
				outs[i] = append([]byte(nil), o.Data...)
			}
			if c.Family == "argmax" {
				for i := range outs[0] {
					outs[0][i] = 0xff // index -1: never right
				}
			}
			e, err := c.Compare(outs)
			require.NoError(t, err)
			require.Greater(t, e, c.Tol, "untouched outputs must not pass")
		})
	}
}

func TestProductReferenceParallelMatchesSerial(t *testing.T) {
	W, err := randWeights(dtype.Q4_K, 300, 256, 5)
	require.NoError(t, err)
	x := randn(newRand(), 3*256)
	y0 := randn(newRand(), 3*300)
	want, err := codegen.RefMatMul(dtype.Q4_K, 300, 256, W, x, 3, y0, false)
	require.NoError(t, err)
	got, err := refMatMul(dtype.Q4_K, 300, 256, W, x, 3, y0, false)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestTuneCasesUnique(t *testing.T) {
	s, err := codegen.ShapeByName("llama3-8b")
	require.NoError(t, err)
	cs := TuneCases(s, UniformWeights(dtype.Q4_K), DefaultSizes, 1)
	seen := map[string]bool{}
	for _, c := range cs {
		require.False(t, seen[c.ID()], c.ID())
		seen[c.ID()] = true
	}
	for _, id := range []string{"gemv/q4_k_n6144_k4096", "gemv/q4_k_n4096_k14336_res", "gemv/q4_k_n28672_k4096", "gemv/q4_k_n128256_k4096",
		"gemv/q4_k_n6144_k4096_small", "gemv/q4_k_n4096_k14336_res_small", "gemv/q4_k_n6144_k4096_wide",
		"mma/q4_k_n6144_k4096", "attn_decode/h32_8_d128_f16", "gemm_small/q4_k_n6144_k4096", "gemm_small/q4_k_n4096_k14336_res",
		"attn_decode_live/h32_8_d128_f16", "rope_kv/inter_h32_8_d128_r128_f16", "rmsnorm/d4096"} {
		require.True(t, seen[id], id)
	}
	require.Len(t, Tasks(append(cs, cs...)), len(cs))
	require.Equal(t, 4, rotations(100, 400, 256))
	require.Equal(t, 1, rotations(1000, 400, 256))
	require.Equal(t, 256, rotations(1, 1<<20, 256))
}

// TestTuneCasesInvariantAttention: in a batch-invariant class's sizes the
// live decode attention's Live 3 point is timed as the Live 4 kernels
// lowering runs for it, and as Live 3 otherwise; the 32-key chunk is an arm.
func TestTuneCasesInvariantAttention(t *testing.T) {
	s, err := codegen.ShapeByName("qwen3-30b-a3b")
	require.NoError(t, err)
	name := func(invariant bool, arm codegen.DecodeArm) string {
		z := DefaultSizes
		z.Invariant = invariant
		for _, c := range TuneCases(s, UniformWeights(dtype.Q4_K), z, 1) {
			if c.Family == "attn_decode_live" {
				ks, err := c.Kernels(arm.Point())
				require.NoError(t, err)
				return ks[0].Name
			}
		}
		t.Fatal("no attn_decode_live case")
		return ""
	}
	l3 := codegen.DecodeArm{Threads: 256, Chunk: 32, Live: 3}
	require.Contains(t, name(true, l3), "_t256_c32_l4_m132")
	require.Contains(t, name(false, l3), "_t256_c32_l3_m132")
	l2 := codegen.DecodeArm{Threads: 128, Chunk: 64, Live: 2}
	require.Contains(t, name(true, l2), "_t128_c64_l2")
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// TestTuneCasesMixedTypes: a Q4_K_M-like model, whose V and FFN down are
// Q6_K in some layers, gets tasks for the per-part products lowering runs
// there as well as for the fused ones.
func TestTuneCasesMixedTypes(t *testing.T) {
	s, err := codegen.ShapeByName("llama3-8b")
	require.NoError(t, err)
	w := UniformWeights(dtype.Q4_K)
	w.QKV = [][3]dtype.Type{{dtype.Q4_K, dtype.Q4_K, dtype.Q6_K}, {dtype.Q4_K, dtype.Q4_K, dtype.Q4_K}}
	w.Downs = []dtype.Type{dtype.Q6_K, dtype.Q4_K}
	seen := map[string]bool{}
	for _, c := range TuneCases(s, w, DefaultSizes, 1) {
		require.False(t, seen[c.ID()], c.ID())
		seen[c.ID()] = true
	}
	for _, id := range []string{"gemv/q4_k_n6144_k4096", "gemv/q4_k_n4096_k4096", "gemv/q4_k_n1024_k4096", "gemv/q6_k_n1024_k4096",
		"gemv/q6_k_n4096_k14336_res", "gemv/q4_k_n4096_k14336_res", "mma/q6_k_n1024_k4096"} {
		require.True(t, seen[id], id)
	}
}

// requireChain checks the default launch of a case chaining XQuant and two
// products: argument out of the first product is the quantised rows (of
// width elements) the second reads, and kernel i+1's name contains names[i].
func requireChain(t *testing.T, c *Case, out, width int, names ...string) {
	t.Helper()
	l, err := c.Launch(c.Space().Default)
	require.NoError(t, err, c.Label)
	require.Len(t, l.Kernels, 3, c.Label)
	require.Same(t, l.Args[1][out].Buf, l.Args[2][1].Buf, c.Label)
	require.Len(t, l.Args[1][out].Buf.Data, l.Dims.Tokens*codegen.XQRowBytes(width), c.Label)
	for i, n := range names {
		require.Contains(t, l.Kernels[i+1].Name, n, c.Label)
	}
}

// TestLoweringDefaults: a one-row int8 product of fewer blocks than the
// card has multiprocessors is tuned against the split arm lowering runs
// untuned; a larger product, a card of fewer multiprocessors, the batch
// and float tasks keep the space's default; the tasks passed in are left
// as they were.
func TestLoweringDefaults(t *testing.T) {
	cases := []*Case{
		Product("s", "gemv", "attn_out", dtype.Q4_K, 4096, 4096, 1, true, 1),
		Product("s", "gemv", "qkv", dtype.Q4_K, 12288, 4096, 1, false, 1),
		ProductBatch("s", "attn_out", dtype.Q4_K, 4096, 4096, 8, true, 1),
		Product("s", "gemv", "down", dtype.F16, 4096, 11008, 1, true, 1),
	}
	tasks := Tasks(cases)
	require.Len(t, tasks, 4)
	split := codegen.DefaultXQGlobalOneArm.Split(2).Point()
	r := NewRunner(nil, cases)
	got := r.LoweringDefaults(tasks, 132)
	require.True(t, got[0].Space.Default.Equal(split), got[0].Space.ArmName(got[0].Space.Default))
	for i := 1; i < 4; i++ {
		require.True(t, got[i].Space.Default.Equal(tasks[i].Space.Default), tasks[i].ID())
	}
	require.True(t, tasks[0].Space.Default.Equal(codegen.DefaultXQGlobalOneArm.Point()), "the input is not changed")
	got = r.LoweringDefaults(tasks, 64) // 128 blocks fill 64 multiprocessors
	require.True(t, got[0].Space.Default.Equal(codegen.DefaultXQGlobalOneArm.Point()))
}

// ropeCaseOuts launches the default arm of a product case with a RoPE
// epilogue, requires XQuant then the product (its name holding tag, its
// arguments its parameters) and nout outputs, and returns the launch and
// copies of the outputs.
func ropeCaseOuts(t *testing.T, c *Case, tag string, nout int) (*Launch, [][]byte) {
	l, err := c.Launch(c.Space().Default)
	require.NoError(t, err, c.Label)
	require.Len(t, l.Kernels, 2, c.Label)
	require.Contains(t, l.Kernels[1].Name, tag, c.Label)
	require.Len(t, l.Args[1], len(l.Kernels[1].Params), c.Label)
	require.Len(t, l.Outs, nout, c.Label)
	outs := make([][]byte, nout)
	for i, o := range l.Outs {
		outs[i] = slices.Clone(o.Data)
	}
	return l, outs
}

// requireSpoiled requires that c's reference runs on outs: the untouched
// outputs are far from it (a finite error), and after spoil an infinite
// error.
func requireSpoiled(t *testing.T, c *Case, outs [][]byte, spoil func()) {
	e, err := c.Compare(outs)
	require.NoError(t, err, c.Label)
	require.Greater(t, e, 0.5, c.Label)
	require.False(t, math.IsInf(e, 0), c.Label)
	spoil()
	e, err = c.Compare(outs)
	require.NoError(t, err, c.Label)
	require.True(t, math.IsInf(e, 1), c.Label)
}
