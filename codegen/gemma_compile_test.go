package codegen_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestCompileGemma compiles to compute_90 PTX the Gemma kernels at the
// gemma3-12b shape (every arm lowering may take for a window: fixed,
// live with preload, fused; f16 and 8-bit caches; with and without the
// soft cap; and with the combine in the partial kernel), tensor-core prefill over a window at a head of 128, warp
// attention over a window, and every kernel of the lowered Gemma test
// programs (decode of one and eight sequences, prefill, exact, 8-bit).
func TestCompileGemma(t *testing.T) {
	nv := nvrtcOrSkip(t)
	s, err := codegen.ShapeByName("gemma3-12b")
	require.NoError(t, err)
	ks, err := codegen.GemmaKernels(s)
	require.NoError(t, err)
	for _, cache := range []dtype.Type{dtype.F16, codegen.CacheQ8} {
		as := codegen.AttnShape{Heads: 32, HeadsKV: 16, HeadDim: 128, QStride: 8192, Cache: cache, Window: 4096, Softcap: 50}
		fl, err := codegen.FlashPrefillAttention(as, codegen.FlashArmFor(as, codegen.DefaultFlashArm))
		require.NoError(t, err)
		live3 := codegen.DecodeArm{Threads: 128, Chunk: 128, Live: 3, SMs: 132}
		p, c, err := codegen.DecodeAttentionXQ(as, live3)
		require.NoError(t, err)
		// and in one launch: Live 3, and Live 4's 32-key splits
		live3.Fuse = true
		f3, err := codegen.DecodeAttentionFused(as, live3, true)
		require.NoError(t, err)
		f4, err := codegen.DecodeAttentionFused(as, codegen.DecodeArm{Threads: 256, Chunk: 32, Live: 4, SMs: 132, Preload: true, Fuse: true}, false)
		require.NoError(t, err)
		ks = append(ks, fl, p, c, f3, f4)
	}
	// the post-norms in the output and down products (one sequence), one warp a row set and, in t512_r4, two (a split K)
	for _, c := range []struct {
		t    dtype.Type
		k    int
		name string
	}{{dtype.Q4_K, 4096, "t512_r8_u1_s1_l1_g1_w4"}, {dtype.Q6_K, 15360, "t512_r8_u1_s1_l1_g1_w4"}, {dtype.Q4_K, 15360, "t512_r4_u1_s1_l1_g1_w4"}} {
		arm, err := codegen.ParseGEMVArm(c.name)
		require.NoError(t, err)
		arm.XQ = 2
		k, err := codegen.GEMVXQ(c.t, s.Hidden, c.k, false, arm, codegen.XQEnds{PostNorm: true, PostNormEps: s.Eps, PostNormThreads: 256}, 0)
		require.NoError(t, err, c.name)
		ks = append(ks, k)
	}
	wa, err := codegen.WarpAttention(codegen.AttnShape{Heads: 4, HeadsKV: 2, HeadDim: 40, QStride: 320, Cache: dtype.F16, Window: 8, Softcap: 30}, codegen.DefaultPrefillArm)
	require.NoError(t, err)
	ks = append(ks, wa)
	seen := map[string]bool{}
	for _, k := range ks {
		seen[k.Name] = true
	}
	for _, p := range codegen.GemmaProgramsForTest(t) {
		for _, k := range p.Kernels {
			if !seen[k.Name] {
				seen[k.Name] = true
				ks = append(ks, k)
			}
		}
	}
	compileAll(t, nv, "compute_90", ks)
}
