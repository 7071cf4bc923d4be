package codegen_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestCompileGateHeadRope compiles the QKV products that do RoPE's work
// (with the q/k norms, and without) in the block that finishes a head
// last (XQEnds.HeadRope) to compute_90 PTX, at the shapes of llama3-8b
// (adjacent pairs), qwen3-8b and qwen3-30b-a3b (NeoX, head dim 128) and
// gemma3-12b (head dim 256): Q and K in one Q4_K product, V in a Q6_K
// one, with the untuned one-row arm and its K split over two warps.
func TestCompileGateHeadRope(t *testing.T) {
	nv := nvrtcOrSkip(t)
	var ks []*codegen.Kernel
	for _, name := range []string{"llama3-8b", "qwen3-8b", "qwen3-30b-a3b", "gemma3-12b"} {
		s, err := codegen.ShapeByName(name)
		require.NoError(t, err)
		rs := s.Rope(dtype.F16)
		qk := (s.Heads + s.HeadsKV) * s.HeadDim
		for _, arm := range []codegen.GEMVArm{codegen.DefaultXQGlobalOneArm, codegen.DefaultXQGlobalOneArm.Split(2)} {
			for _, norm := range []bool{true, false} {
				e := codegen.XQEnds{NormIn: true, NormEps: s.Eps, HeadRope: true, HeadNorm: norm, HeadNormEps: s.Eps, RopeShape: rs}
				k, err := codegen.GEMVXQ(dtype.Q4_K, qk, s.Hidden, false, arm, e, rs.QKVStride())
				require.NoError(t, err, name)
				ks = append(ks, k)
				e.RopeCol0 = qk
				k, err = codegen.GEMVXQ(dtype.Q6_K, s.HeadsKV*s.HeadDim, s.Hidden, false, arm, e, rs.QKVStride())
				require.NoError(t, err, name)
				ks = append(ks, k)
			}
		}
	}
	compileAll(t, nv, "compute_90", ks)
}

// TestHeadRopeFits: the head RoPE epilogue takes whole heads of an 8-bit
// cache-free fused row, blocks within one head, and no other epilogue.
func TestHeadRopeFits(t *testing.T) {
	rs := codegen.RopeShape{Heads: 4, HeadsKV: 2, HeadDim: 64, RopeDim: 64, Half: true, Cache: dtype.F16}
	arm := codegen.DefaultXQGlobalOneArm
	e := codegen.XQEnds{HeadRope: true, HeadNorm: true, HeadNormEps: 1e-6, RopeShape: rs}
	_, err := codegen.GEMVXQ(dtype.Q4_K, 6*64, 256, false, arm, e, rs.QKVStride())
	require.NoError(t, err)
	bad := map[string]func() (dtype.Type, int, bool, codegen.GEMVArm, codegen.XQEnds){
		"part of a head": func() (dtype.Type, int, bool, codegen.GEMVArm, codegen.XQEnds) {
			return dtype.Q4_K, 6*64 - 32, false, arm, e
		},
		"a residual": func() (dtype.Type, int, bool, codegen.GEMVArm, codegen.XQEnds) {
			return dtype.Q4_K, 6 * 64, true, arm, e
		},
		"an 8-bit cache": func() (dtype.Type, int, bool, codegen.GEMVArm, codegen.XQEnds) {
			e := e
			e.RopeShape.Cache = codegen.CacheQ8
			return dtype.Q4_K, 6 * 64, false, arm, e
		},
		"a column inside a head": func() (dtype.Type, int, bool, codegen.GEMVArm, codegen.XQEnds) {
			e := e
			e.RopeCol0 = 32
			return dtype.Q4_K, 4 * 64, false, arm, e
		},
		"blocks of more than a head": func() (dtype.Type, int, bool, codegen.GEMVArm, codegen.XQEnds) {
			a := arm
			a.RowsPerBlock, a.Threads = 32, 1024
			return dtype.Q4_K, 6 * 64, false, a, e
		},
		"with Rope too": func() (dtype.Type, int, bool, codegen.GEMVArm, codegen.XQEnds) {
			e := e
			e.Rope = true
			return dtype.Q4_K, 6 * 64, false, arm, e
		},
	}
	for what, f := range bad {
		ty, n, res, a, e := f()
		_, err := codegen.GEMVXQ(ty, n, 256, res, a, e, rs.QKVStride())
		require.ErrorIs(t, err, codegen.ErrUnsupported, what)
	}
}
