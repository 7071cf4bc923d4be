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

// TestCompileSmallHalf compiles to compute_90 PTX the small-row f16
// products (codegen.SmallArms, 8 rows a block) at the products of
// llama2-7b and llama3-8b, Q4_K and Q6_K, the QKV product with the norm's
// rows and the FFN-down product with its residual add: each has its entry,
// its mma and, as the 16-row default has, no local memory.
func TestCompileSmallHalf(t *testing.T) {
	nv := nvrtcOrSkip(t)
	shapes := map[string][]halfProduct{
		"llama2-7b": {{3 * 4096, 4096, false}, {2 * 11008, 4096, false}, {4096, 11008, true}, {4096, 4096, true}},
		"llama3-8b": {{6144, 4096, false}, {2 * 14336, 4096, false}, {4096, 14336, true}, {128256, 4096, false}},
	}
	compileHalfProducts(t, nv, shapes, codegen.SmallArms(), func(i, j int, _ codegen.GEMVArm) bool {
		return i > 1 && j%2 == 1 // every other arm at the down and last products
	})
}

// halfProduct is a product compileHalfProducts compiles.
type halfProduct struct {
	n, k     int
	residual bool
}

// compileHalfProducts compiles to compute_90 PTX each arm of arms at each
// product of shapes, Q4_K and Q6_K, the first product with the norm's rows,
// leaving out where skip(product index, arm index, arm) says: each has its
// entry, its mma and no local memory.
func compileHalfProducts(t *testing.T, nv *cuda.NVRTC, shapes map[string][]halfProduct, arms []codegen.GEMVArm, skip func(i, j int, a codegen.GEMVArm) bool) {
	for name, products := range shapes {
		for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
			for i, p := range products {
				for j, a := range arms {
					if skip(i, j, a) {
						continue
					}
					e := codegen.XQEnds{}
					if i == 0 {
						e = codegen.XQEnds{NormIn: true, NormEps: 1e-5}
					}
					t.Run(fmt.Sprintf("%s/%v/n%d_k%d/%v", name, ty, p.n, p.k, a), func(t *testing.T) {
						k, err := codegen.GEMVXQ(ty, p.n, p.k, p.residual, a, e, 0)
						require.NoError(t, err)
						src := compilePTX(t, nv, k)
						require.NotContains(t, src, ".local", "%s: local memory", k.Name)
						require.True(t, strings.Contains(src, "mma.sync.aligned.m16n8k16"), k.Name)
					})
				}
			}
		}
	}
}

// compilePTX compiles k to compute_90 PTX, which holds its entry.
func compilePTX(t *testing.T, nv *cuda.NVRTC, k *codegen.Kernel) string {
	out, err := nv.Compile(k.Source, k.Name+".cu", []string{cuda.ArchOption("compute_90")})
	require.NoError(t, err, "%s", k.Name)
	require.Contains(t, string(out.PTX), ".entry "+k.Name, k.Name)
	return string(out.PTX)
}
