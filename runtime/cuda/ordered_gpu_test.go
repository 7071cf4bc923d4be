package cuda_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/autotune/check"
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
)

// TestGPUOrderedSameAsXQ2: on the GPU, the ordered int8 tensor-core
// product (the int8 class's kernel from 16 rows; split 8 and 16 ways, and
// pipelined) writes, bit for bit, the
// floats the unsplit XQ 2 one-row and batch kernels write for the same
// quantised rows, and its split-order form (Ordered 21, 22) those of the
// XQ 2 kernels split over two warps with unroll 1 and 2: Q4_K, Q6_K and Q4_0 weights, with the norm's rows and
// with the residual add, at 16, 37 and 64 rows. A term rounded another way
// or lanes added in another order would fail it.
func TestGPUOrderedSameAsXQ2(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("no CUDA GPU: %v", err)
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	dev, err := cuda.Open(0)
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	cache, err := cuda.NewCache(t.TempDir(), nv)
	require.NoError(t, err)
	d := check.NewDevice(dev, cache)
	// the unsplit order: the default ordered arm against the XQ 2 arms and
	// the other ordered forms; the order of XQ 2 kernels split over two
	// warps (unroll 1 and 2): the split-order arm against such XQ 2 arms
	type group struct {
		ordered codegen.GEMVArm
		refs    map[string]codegen.GEMVArm
	}
	groups := []group{{codegen.DefaultXQOrderedArm, map[string]codegen.GEMVArm{"one": codegen.DefaultXQGlobalOneArm, "batch": codegen.DefaultXQGlobalBatchArm,
		"ordered16": codegen.DefaultXQOrderedArm.Split(16), "ordered-pipe": codegen.DefaultXQOrderedPipeArm}}}
	for _, u := range []int{1, 2} {
		one, batch := codegen.DefaultXQGlobalOneArm, codegen.DefaultXQGlobalBatchArm
		one.Unroll, batch.Unroll, batch.RowsPerBlock = u, u, batch.RowsPerBlock/2
		one, batch = one.Split(2), batch.Split(2)
		ord, ok := codegen.OrderedFor(one)
		require.True(t, ok)
		groups = append(groups, group{ord, map[string]codegen.GEMVArm{fmt.Sprintf("one-split2-u%d", u): one, fmt.Sprintf("batch-split2-u%d", u): batch}})
	}
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K, dtype.Q4_0} {
		for i, p := range []struct {
			n, k     int
			residual bool
		}{{4096, 4096, false}, {4096, 11008, true}, {1000, 4096, false}} {
			for _, m := range []int{16, 37, 64} {
				t.Run(fmt.Sprintf("%v/n%d_k%d/m%d", ty, p.n, p.k, m), func(t *testing.T) {
					c := check.Product("ordered", "gemv", "test", ty, p.n, p.k, m, p.residual, uint64(7+m))
					if i == 0 {
						c = check.ProductNorm("ordered", "test", ty, p.n, p.k, m, 1e-5, uint64(7+m))
					}
					for _, gr := range groups {
						got, err := d.Outputs(c, gr.ordered.Point())
						require.NoError(t, err)
						for name, a := range gr.refs {
							want, err := d.Outputs(c, a.Point())
							require.NoError(t, err)
							require.Equal(t, len(want), len(got))
							for o := range want {
								n, first := 0, -1
								for b := 0; b+4 <= len(want[o]); b += 4 {
									if string(want[o][b:b+4]) != string(got[o][b:b+4]) {
										if n++; first < 0 {
											first = b / 4
										}
									}
								}
								if n > 0 { // every arm's verdict, not only the first's
									t.Errorf("output %d: %d floats of %v differ from the %s arm %v's, the first at %d", o, n, gr.ordered, name, a, first)
								}
							}
						}
					}
				})
			}
		}
	}
}
