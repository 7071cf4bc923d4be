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
	type product struct {
		n, k     int
		residual bool
	}
	shapes := map[string][]product{
		"llama2-7b": {{3 * 4096, 4096, false}, {2 * 11008, 4096, false}, {4096, 11008, true}, {4096, 4096, true}},
		"llama3-8b": {{6144, 4096, false}, {2 * 14336, 4096, false}, {4096, 14336, true}, {128256, 4096, false}},
	}
	for name, products := range shapes {
		for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
			for i, p := range products {
				for j, a := range codegen.SmallArms() {
					if i > 1 && j%2 == 1 {
						continue // every other arm at the down and last products
					}
					e := codegen.XQEnds{}
					if i == 0 {
						e = codegen.XQEnds{NormIn: true, NormEps: 1e-5}
					}
					t.Run(fmt.Sprintf("%s/%v/n%d_k%d/%v", name, ty, p.n, p.k, a), func(t *testing.T) {
						k, err := codegen.GEMVXQ(ty, p.n, p.k, p.residual, a, e, 0)
						require.NoError(t, err)
						out, err := nv.Compile(k.Source, k.Name+".cu", []string{cuda.ArchOption("compute_90")})
						require.NoError(t, err, "%s", k.Name)
						src := string(out.PTX)
						require.Contains(t, src, ".entry "+k.Name, k.Name)
						require.NotContains(t, src, ".local", "%s: local memory", k.Name)
						require.True(t, strings.Contains(src, "mma.sync.aligned.m16n8k16"), k.Name)
					})
				}
			}
		}
	}
}
