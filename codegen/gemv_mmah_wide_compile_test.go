package codegen_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
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
	type product struct {
		n, k     int
		residual bool
	}
	shapes := map[string][]product{
		"llama2-7b": {{3 * 4096, 4096, false}, {2 * 11008, 4096, false}, {4096, 11008, true}, {32000, 4096, false}},
		"llama3-8b": {{6144, 4096, false}, {2 * 14336, 4096, false}, {4096, 14336, true}, {128256, 4096, false}},
	}
	ptx := func(k *codegen.Kernel) string {
		out, err := nv.Compile(k.Source, k.Name+".cu", []string{cuda.ArchOption("compute_90")})
		require.NoError(t, err, "%s", k.Name)
		require.Contains(t, string(out.PTX), ".entry "+k.Name, k.Name)
		return string(out.PTX)
	}
	def, err := codegen.GEMVXQ(dtype.Q4_K, 2*11008, 4096, false, codegen.DefaultXQHalfArm, codegen.XQEnds{}, 0)
	require.NoError(t, err)
	require.NotContains(t, ptx(def), ".local", "the 16-row arm, the reference of no local memory")
	for name, products := range shapes {
		for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
			for i, p := range products {
				for _, a := range codegen.WideArms() {
					if i > 1 && a != codegen.DefaultXQHalfWideArm {
						continue // the other arms at the QKV and gate/up products only
					}
					e := codegen.XQEnds{}
					if i == 0 {
						e = codegen.XQEnds{NormIn: true, NormEps: 1e-5}
					}
					t.Run(fmt.Sprintf("%s/%v/n%d_k%d/%v", name, ty, p.n, p.k, a), func(t *testing.T) {
						k, err := codegen.GEMVXQ(ty, p.n, p.k, p.residual, a, e, 0)
						require.NoError(t, err)
						src := ptx(k)
						require.NotContains(t, src, ".local", "%s: local memory", k.Name)
						require.True(t, strings.Contains(src, "mma.sync.aligned.m16n8k16"), k.Name)
					})
				}
			}
		}
	}
}
