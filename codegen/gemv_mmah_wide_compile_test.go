package codegen_test

import (
	"testing"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// TestCompileWideHalf compiles to compute_90 PTX the wide f16 products
// (codegen.WideArms, 32 and 64 rows a block) at the products of
// llama2-7b (hidden 4096, FFN 11008, 32 KV heads, vocab 32000) and
// llama3-8b, Q4_K and Q6_K, plain and with the norm's rows: each has its
// entry and, as the 16-row default has, no local memory (the
// accumulators and fragments stay in registers as far as NVRTC's PTX
// shows; ptxas may still spill, which kernel-check's timings would show).
func TestCompileWideHalf(t *testing.T) {
	nv := nvrtcOrSkip(t)
	shapes := map[string][]halfProduct{
		"llama2-7b": {{3 * 4096, 4096, false}, {2 * 11008, 4096, false}, {4096, 11008, true}, {32000, 4096, false}},
		"llama3-8b": {{6144, 4096, false}, {2 * 14336, 4096, false}, {4096, 14336, true}, {128256, 4096, false}},
	}
	def, err := codegen.GEMVXQ(dtype.Q4_K, 2*11008, 4096, false, codegen.DefaultXQHalfArm, codegen.XQEnds{}, 0)
	require.NoError(t, err)
	require.NotContains(t, compilePTX(t, nv, def), ".local", "the 16-row arm, the reference of no local memory")
	compileHalfProducts(t, nv, shapes, codegen.WideArms(), func(i, _ int, a codegen.GEMVArm) bool {
		return i > 1 && a != codegen.DefaultXQHalfWideArm // the other arms at the QKV and gate/up products only
	})
}
