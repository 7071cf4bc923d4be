package codegen

import (
	"testing"

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
func compileAll(t *testing.T, nv *cuda.NVRTC, arch string, ks []*Kernel) {
	t.Helper()
	for _, k := range ks {
		out, err := nv.Compile(k.Source, k.Name+".cu", []string{cuda.ArchOption(arch)})
		require.NoError(t, err, "%s", k.Name)
		require.Contains(t, string(out.PTX), ".entry "+k.Name, k.Name)
	}
}

// TestCompileGate compiles every family × weight type × default arm for the
// tiny shape, the GEMV at one real shape, and a few non-default arms to
// compute_90 PTX.
func TestCompileGate(t *testing.T) {
	nv := nvrtcOrSkip(t)
	s, err := ShapeByName("tiny")
	require.NoError(t, err)
	ks, err := DefaultKernels(s, WeightTypes)
	require.NoError(t, err)
	for _, cache := range []dtype.Type{dtype.F32, dtype.BF16} {
		k, err := RopeKV(s.Rope(cache), BlockArm{Threads: 64})
		require.NoError(t, err)
		ks = append(ks, k)
		p, c, err := DecodeAttention(s.Attn(cache), DecodeArm{Threads: 64, Chunk: 64})
		require.NoError(t, err)
		pf, err := PrefillAttention(s.Attn(cache), PrefillArm{Warps: 2})
		require.NoError(t, err)
		ks = append(ks, p, c, pf)
	}
	for _, t2 := range []dtype.Type{dtype.Q4_K, dtype.Q6_K, dtype.BF16} {
		g, err := GEMV(t2, 1000, 512, true, GEMVArm{Threads: 128, RowsPerBlock: 1, Unroll: 2, SharedX: 0})
		require.NoError(t, err)
		m, err := MatMulMMA(t2, 1000, 512, true, MMAArm{BM: 32, BN: 32, WarpsM: 1, WarpsN: 2})
		require.NoError(t, err)
		ks = append(ks, g, m)
	}
	r, err := RMSNormAdd(s.Hidden, s.Eps, false, BlockArm{Threads: 1024})
	require.NoError(t, err)
	ks = append(ks, r)
	compileAll(t, nv, "compute_90", ks)
}
