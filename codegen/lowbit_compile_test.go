package codegen_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestCompileLowBit compiles to compute_90 PTX the kernels of the low-bit
// weight types (Q2_K, Q3_K, IQ4_NL, IQ4_XS) at llama3-8b's real shape
// (embedding, decode GEMV, prefill products, the bf16 rows for cuBLASLt,
// gemm_small) and every kernel of the lowered low-bit test programs.
// TestCompileGate covers them at the tiny shape with the other types.
func TestCompileLowBit(t *testing.T) {
	nv := nvrtcOrSkip(t)
	lowBit := []dtype.Type{dtype.Q2_K, dtype.Q3_K, dtype.IQ4_NL, dtype.IQ4_XS}
	s, err := codegen.ShapeByName("llama3-8b")
	require.NoError(t, err)
	all, err := codegen.DefaultKernels(s, lowBit)
	require.NoError(t, err)
	seen := map[string]bool{}
	var ks []*codegen.Kernel
	keep := func(k *codegen.Kernel) {
		if !seen[k.Name] {
			seen[k.Name] = true
			ks = append(ks, k)
		}
	}
	for _, k := range all {
		for _, ty := range lowBit {
			if strings.Contains(k.Name, "_"+strings.ToLower(ty.String())+"_") {
				keep(k)
			}
		}
	}
	for _, ty := range lowBit {
		g, err := codegen.GemmSmall(ty, s.Hidden, s.FFN, true, codegen.DefaultGemmSmallArm)
		require.NoError(t, err, ty)
		keep(g)
	}
	require.GreaterOrEqual(t, len(ks), 4*5, "embedding, GEMV, two mma forms or one, dequant_bf16, gemm_small per type")
	for _, p := range codegen.LowBitProgramsForTest(t) {
		for _, k := range p.Kernels {
			keep(k)
		}
	}
	compileAll(t, nv, "compute_90", ks)
}
