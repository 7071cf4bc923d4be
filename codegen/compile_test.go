package codegen_test

import (
	"testing"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/stretchr/testify/require"
)

// nvrtcOrSkip loads NVRTC or skips, naming what is missing.
func nvrtcOrSkip(t *testing.T) *cuda.NVRTC {
	t.Helper()
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		t.Skipf("NVRTC library not found (libnvrtc.so.13/.12/.11.2; Debian: apt-get install libnvrtc11.2 from non-free): %v", err)
	}
	return nv
}

// compileAll compiles every kernel to PTX for arch and fails with the log.
func compileAll(t *testing.T, nv *cuda.NVRTC, arch string, ks []*codegen.Kernel) {
	t.Helper()
	for _, k := range ks {
		out, err := nv.Compile(k.Source, k.Name+".cu", []string{cuda.ArchOption(arch)})
		require.NoError(t, err, "%s", k.Name)
		require.Contains(t, string(out.PTX), ".entry "+k.Name, k.Name)
	}
}

// TestCompileGate compiles every family × weight type × default arm for the
// tiny shape, the codegen.GEMV at one real shape, and a few non-default arms to
// compute_90 PTX.
func TestCompileGate(t *testing.T) {
	nv := nvrtcOrSkip(t)
	s, err := codegen.ShapeByName("tiny")
	require.NoError(t, err)
	ks, err := codegen.DefaultKernels(s, codegen.WeightTypes)
	require.NoError(t, err)
	for _, cache := range []dtype.Type{dtype.F32, dtype.BF16, codegen.CacheQ8} {
		k, err := codegen.RopeKV(s.Rope(cache), codegen.BlockArm{Threads: 64})
		require.NoError(t, err)
		ks = append(ks, k)
		// with the q/k norms (qwen3, Gemma 3), the 8-bit cache's shared staging beside the sums'
		kn, err := codegen.RopeKVNorm(s.Rope(cache), 1e-6, codegen.BlockArm{Threads: 128})
		require.NoError(t, err)
		ks = append(ks, kn)
		p, c, err := codegen.DecodeAttention(s.Attn(cache), codegen.DecodeArm{Threads: 64, Chunk: 64})
		require.NoError(t, err)
		pf, err := codegen.PrefillAttention(s.Attn(cache), codegen.PrefillArm{Warps: 2})
		require.NoError(t, err)
		ks = append(ks, p, c, pf)
		if codegen.FlashSupported(s.Attn(cache)) {
			fl, err := codegen.FlashPrefillAttention(s.Attn(cache), codegen.FlashArmFor(s.Attn(cache), codegen.DefaultFlashArm))
			require.NoError(t, err)
			ks = append(ks, fl)
		}
	}
	// the tensor-core prefill attention's arms over the f16 cache (the ring refused over the 8-bit one),
	// with a sliding window too
	for _, arm := range []codegen.FlashArm{{Warps: 2, Stages: 2}, {Warps: 4, Stages: 1}, {Warps: 8, Stages: 2}} {
		as := s.Attn(dtype.F16)
		fl, err := codegen.FlashPrefillAttention(as, arm)
		require.NoError(t, err)
		as.Window = 32
		fw, err := codegen.FlashPrefillAttention(as, arm)
		require.NoError(t, err)
		ks = append(ks, fl, fw)
		if arm.Stages == 2 {
			_, err = codegen.FlashPrefillAttention(s.Attn(codegen.CacheQ8), arm)
			require.ErrorIs(t, err, codegen.ErrUnsupported, "the 8-bit cache has no ring")
		}
	}
	for _, t2 := range []dtype.Type{dtype.Q4_K, dtype.Q6_K, dtype.BF16} {
		g, err := codegen.GEMV(t2, 1000, 512, true, codegen.GEMVArm{Threads: 128, RowsPerBlock: 1, Unroll: 2, SharedX: 0})
		require.NoError(t, err)
		m, err := codegen.MatMulMMA(t2, 1000, 512, true, codegen.MMAArm{BM: 32, BN: 32, WarpsM: 1, WarpsN: 2})
		require.NoError(t, err)
		ks = append(ks, g, m)
	}
	// layout-1 (repacked) GEMV arms, one per repacked type (1000 rows: ragged for 3 and 16 rows per block)
	for i, t2 := range codegen.RepackTypes {
		arm := []codegen.GEMVArm{{Threads: 96, RowsPerBlock: 3, Unroll: 1}, {Threads: 256, RowsPerBlock: 8, Unroll: 4},
			{Threads: 512, RowsPerBlock: 16, Unroll: 8}, {Threads: 128, RowsPerBlock: 2, Unroll: 2}}[i]
		arm.SharedX, arm.Layout = 1, 1
		g, err := codegen.GEMV(t2, 1000, 512, i%2 == 0, arm)
		require.NoError(t, err)
		ks = append(ks, g)
	}
	// half-precision GEMVs with activations in shared memory (coalesced chunks), ragged rows
	for i, t2 := range []dtype.Type{dtype.F16, dtype.BF16} {
		g, err := codegen.GEMV(t2, 1000, 544, i == 0, codegen.GEMVArm{Threads: 96, RowsPerBlock: 3, Unroll: 4, SharedX: 1})
		require.NoError(t, err)
		ks = append(ks, g)
	}
	// int8-activation GEMV arms, one per repacked type, with 1 to 16 activation rows a block and 1 to 4 weight rows a warp
	for i, t2 := range codegen.RepackTypes {
		arm := []codegen.GEMVArm{{Threads: 96, RowsPerBlock: 3, Unroll: 1, BatchRows: 1, RowsPerWarp: 2}, {Threads: 256, RowsPerBlock: 8, Unroll: 4, BatchRows: 2},
			{Threads: 512, RowsPerBlock: 16, Unroll: 2, BatchRows: 8, RowsPerWarp: 4}, {Threads: 128, RowsPerBlock: 4, Unroll: 2, BatchRows: 16, RowsPerWarp: 2}}[i]
		arm.SharedX, arm.Layout, arm.XQ = 1, 1, 1
		g, err := codegen.GEMV(t2, 1000, 512, i%2 == 0, arm)
		require.NoError(t, err)
		ks = append(ks, g)
	}
	// products with the RMSNorm or the SwiGLU fused into their staging: int8 activations (K of 544 for the
	// 32-element block types: a warp's chunks may straddle rows) and f16/bf16
	for i, t2 := range append(append([]dtype.Type(nil), codegen.RepackTypes...), dtype.F16, dtype.BF16) {
		arm := codegen.DefaultXQBatchArm
		if i%2 == 1 {
			arm = codegen.DefaultXQOneArm
		}
		if t2 == dtype.F16 || t2 == dtype.BF16 {
			arm = codegen.GEMVArm{Threads: 96, RowsPerBlock: 3, Unroll: 4, SharedX: 1}
		}
		k := 512
		if t2.BlockElems() == 32 || t2 == dtype.F16 || t2 == dtype.BF16 {
			k = 544
		}
		g, err := codegen.GEMVNorm(t2, 1000, k, false, arm, 1e-5)
		require.NoError(t, err, t2)
		s, err := codegen.GEMVSwiGLU(t2, 1000, k, i%2 == 0, arm)
		require.NoError(t, err, t2)
		into, err := codegen.GEMVInto(t2, 200, k, false, arm, codegen.Prologue{Kind: codegen.ProNorm, Eps: 1e-6}, 1000)
		require.NoError(t, err, t2)
		ks = append(ks, g, s, into)
	}
	// activations quantised once per product (XQ 2): the quantisers for short and long rows, and the
	// products reading them, ragged rows, 1 to 16 activation rows a block, a strided output
	for _, k := range []int{64, 544, 4096, 14336, 32768} {
		for _, pro := range []codegen.Prologue{{}, {Kind: codegen.ProNorm, Eps: 1e-5}, {Kind: codegen.ProSwiGLU}} {
			q, err := codegen.XQuant(k, pro)
			require.NoError(t, err, k)
			h, err := codegen.XHalf(k, pro)
			require.NoError(t, err, k)
			ks = append(ks, q, h)
		}
	}
	for i, t2 := range codegen.RepackTypes {
		arm := []codegen.GEMVArm{{Threads: 96, RowsPerBlock: 3, Unroll: 1, BatchRows: 1, RowsPerWarp: 2}, {Threads: 256, RowsPerBlock: 8, Unroll: 2, BatchRows: 2},
			{Threads: 512, RowsPerBlock: 16, Unroll: 1, BatchRows: 8, RowsPerWarp: 4}, {Threads: 128, RowsPerBlock: 4, Unroll: 1, BatchRows: 16, RowsPerWarp: 2}}[i]
		arm.SharedX, arm.Layout, arm.XQ = 1, 1, 2
		g, err := codegen.GEMV(t2, 1000, 512, i%2 == 0, arm)
		require.NoError(t, err)
		k := 512
		if t2.BlockElems() == 32 {
			k = 544
		}
		into, err := codegen.GEMVInto(t2, 200, k, false, arm, codegen.Prologue{}, 1000)
		require.NoError(t, err, t2)
		ks = append(ks, g, into)
		// the int8 tensor-core product (XQ 3) on the same operands: ragged rows, one or two token tiles,
		// one, two or four tiles of 16 weight rows a warp, one to four warps splitting each set's K
		mma := codegen.GEMVArm{Threads: 32 * (1 + i) * []int{1, 4, 2, 1}[i], RowsPerBlock: 1 + i, Unroll: 1 + i%2, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 8 * (1 + i%2),
			RowsPerWarp: []int{0, 2, 4, 2}[i]}
		g3, err := codegen.GEMV(t2, 1000, 512, i%2 == 1, mma)
		require.NoError(t, err, t2)
		into3, err := codegen.GEMVInto(t2, 200, k, false, codegen.DefaultXQMMAArm, codegen.Prologue{}, 1000)
		require.NoError(t, err, t2)
		ks = append(ks, g3, into3)
		// the pipelined XQ 3 product (cp.async rings of 2, 4 or 8 stages; Q4_K and Q6_K, the others
		// take the unpipelined kernel): ragged rows and K of an odd number of super-blocks, a norm's ends
		pm := mma
		pm.Stages = []int{2, 4, 8, 4}[i]
		gp, err := codegen.GEMV(t2, 1000, 768, i%2 == 0, pm)
		require.NoError(t, err, t2)
		gpn, err := codegen.GEMVXQ(t2, 200, 768, false, pm, codegen.XQEnds{NormIn: true, NormEps: 1e-5}, 1000)
		require.NoError(t, err, t2)
		ks = append(ks, gp, gpn)
		// the f16 tensor-core product (XQ 4, Q4_K and Q6_K) in the same shapes, and its XHalf rows
		if codegen.HalfProduct(t2, 768) {
			hm := pm
			hm.XQ = 4
			gh, err := codegen.GEMVXQ(t2, 1000, 768, i%2 == 0, hm, codegen.XQEnds{}, 0)
			require.NoError(t, err, t2)
			ghn, err := codegen.GEMVXQ(t2, 200, 768, false, codegen.DefaultXQHalfArm, codegen.XQEnds{NormIn: true, NormEps: 1e-5}, 1000)
			require.NoError(t, err, t2)
			ks = append(ks, gh, ghn)
		}
		// the ends of a norm's rows: the product scaling by 1/rms (XQ 2 and 3), and the residual
		// product quantising the next norm's rows (one and sixteen activation rows a block)
		qo := codegen.DefaultXQGlobalOneArm
		if i%2 == 1 {
			qo = codegen.DefaultXQGlobalBatchArm
			qo.RowsPerWarp = 4
		}
		gq, err := codegen.GEMVXQ(t2, 1024, k, true, qo, codegen.XQEnds{NormIn: i < 2, NormEps: 1e-6, QuantOut: true}, 0)
		require.NoError(t, err, t2)
		// the QKV product doing RopeKV's work in its epilogue: columns from 64 of a [q | k | v] row
		rs := codegen.RopeShape{Heads: 4, HeadsKV: 2, HeadDim: 64, RopeDim: 64 - 32*(i%2), Cache: []dtype.Type{dtype.F16, dtype.BF16, dtype.F32, dtype.F16}[i]}
		ro, err := codegen.GEMVXQ(t2, 384, k, false, qo, codegen.XQEnds{NormIn: i < 3, NormEps: 1e-6, Rope: true, RopeShape: rs, RopeCol0: 64}, rs.QKVStride())
		require.NoError(t, err, t2)
		ks = append(ks, ro)
		rn, err := codegen.GEMVXQ(t2, 1000, k, false, arm, codegen.XQEnds{NormIn: true, NormEps: 1e-5}, 0)
		require.NoError(t, err, t2)
		rn3, err := codegen.GEMVXQ(t2, 200, k, false, mma, codegen.XQEnds{NormIn: true, NormEps: 1e-5}, 1000)
		require.NoError(t, err, t2)
		// the gate/up product computing the SwiGLU for the down product (pairs of 32 rows a block)
		so, ok := codegen.FitQuantOut(qo, 2048, codegen.XQEnds{SwiGLUOut: true})
		require.True(t, ok, t2)
		so.BatchRows = min(so.BatchRows, 8)
		gs, err := codegen.GEMVXQ(t2, 2048, k, false, so, codegen.XQEnds{NormIn: true, NormEps: 1e-5, SwiGLUOut: true, GeLU: i%2 == 1}, 0)
		require.NoError(t, err, t2)
		ks = append(ks, gq, rn, rn3, gs)
		// K split over two or four warps a row set (XQ 2): the same ends
		sp := qo
		sp.Threads *= 2 << (i % 2)
		sq, err := codegen.GEMVXQ(t2, 1024, k, true, sp, codegen.XQEnds{NormIn: i < 2, NormEps: 1e-6, QuantOut: true}, 0)
		require.NoError(t, err, t2)
		sr, err := codegen.GEMVXQ(t2, 384, k, false, sp, codegen.XQEnds{NormIn: i < 3, NormEps: 1e-6, Rope: true, RopeShape: rs, RopeCol0: 64}, rs.QKVStride())
		require.NoError(t, err, t2)
		sa := arm
		sa.Threads *= 2
		sn, err := codegen.GEMVXQ(t2, 1000, k, i%2 == 0, sa, codegen.XQEnds{NormIn: i > 1, NormEps: 1e-5}, 0)
		require.NoError(t, err, t2)
		ss := so
		ss.Threads *= 2
		sg, err := codegen.GEMVXQ(t2, 2048, k, false, ss, codegen.XQEnds{NormIn: true, NormEps: 1e-5, SwiGLUOut: true, GeLU: i%2 == 0}, 0)
		require.NoError(t, err, t2)
		ks = append(ks, sq, sr, sn, sg)
		// the batch arms loading each activation row one row ahead (Prefetch), with the same ends
		pf := qo
		pf.BatchRows, pf.Prefetch = []int{16, 5, 8, 4}[i], 1
		pp, err := codegen.GEMVXQ(t2, 1000, k, i%2 == 0, pf, codegen.XQEnds{NormIn: i > 1, NormEps: 1e-5}, 0)
		require.NoError(t, err, t2)
		pq, err := codegen.GEMVXQ(t2, 1024, k, true, pf, codegen.XQEnds{NormIn: i < 2, NormEps: 1e-6, QuantOut: true}, 0)
		require.NoError(t, err, t2)
		pr, err := codegen.GEMVXQ(t2, 384, k, false, pf, codegen.XQEnds{NormIn: i < 3, NormEps: 1e-6, Rope: true, RopeShape: rs, RopeCol0: 64}, rs.QKVStride())
		require.NoError(t, err, t2)
		ps := so
		ps.BatchRows, ps.Prefetch = max(ps.BatchRows, 4), 1
		pg, err := codegen.GEMVXQ(t2, 2048, k, false, ps, codegen.XQEnds{NormIn: true, NormEps: 1e-5, SwiGLUOut: true, GeLU: i%2 == 0}, 0)
		require.NoError(t, err, t2)
		pf.Threads *= 2
		pk, err := codegen.GEMVXQ(t2, 1000, k, false, pf, codegen.XQEnds{}, 0)
		require.NoError(t, err, t2)
		ks = append(ks, pp, pq, pr, pg, pk)
	}
	// the pipelined prefill product (two shared buffers of K tiles of 64) for every weight type,
	// ragged N, with and without the residual, large and small tiles
	for i, t2 := range codegen.WeightTypes {
		arm := []codegen.MMAArm{{BM: 128, BN: 128, WarpsM: 2, WarpsN: 4, Pipe: 1}, {BM: 32, BN: 64, WarpsM: 1, WarpsN: 2, Pipe: 1}}[i%2]
		p, err := codegen.MatMulMMA(t2, 1000, 512, i%3 == 0, arm)
		require.NoError(t, err, t2)
		require.Contains(t, p.Name, "_p1", t2)
		ks = append(ks, p)
	}
	r, err := codegen.RMSNormAdd(s.Hidden, s.Eps, false, codegen.BlockArm{Threads: 1024})
	require.NoError(t, err)
	ks = append(ks, r)
	// the sampling kernel at real vocabularies, and a vocabulary smaller than one warp's round
	for _, c := range []struct{ vocab, threads int }{{128256, 1024}, {151936, 512}, {32000, 256}, {20, 64}} {
		k, err := codegen.Sample(c.vocab, codegen.BlockArm{Threads: c.threads})
		require.NoError(t, err)
		ks = append(ks, k)
	}
	compileAll(t, nv, "compute_90", ks)
}

// TestCompileProgramKernels compiles every kernel of the lowered test
// programs (stories260K, qwen3, qwen2 with mixed types; decode and
// prefill) to compute_90 PTX.
func TestCompileProgramKernels(t *testing.T) {
	nv := nvrtcOrSkip(t)
	seen := map[string]bool{}
	var ks []*codegen.Kernel
	for _, p := range codegen.ProgramsForTest(t) {
		for _, k := range p.Kernels {
			if !seen[k.Name] {
				seen[k.Name] = true
				ks = append(ks, k)
			}
		}
	}
	compileAll(t, nv, "compute_90", ks)
}
