package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// BenchmarkMatmul measures y = x·Wᵀ at qwen2.5-0.5b shapes (N output rows ×
// K inputs: attention 896×896, FFN up 4864×896, FFN down 896×4864) for the
// types of its Q8_0 and Q4_K files (a Q4_K file stores rows of 896, not a
// whole number of 256-blocks, as Q5_0), at one decode token and a 128-token
// prompt chunk, on all cores. The bytes reported are the weight's size.
func BenchmarkMatmul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []dtype.Type{dtype.Q8_0, dtype.Q4_K, dtype.Q5_0} {
		for _, sh := range []struct{ N, K int }{{896, 896}, {4864, 896}, {896, 4864}} {
			if sh.K%typ.BlockElems() != 0 || typ == dtype.Q5_0 && sh.K%256 == 0 {
				continue // Q4_K where 256 | K, its fallback Q5_0 elsewhere
			}
			v := make([]float32, sh.N*sh.K)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			data, err := dtype.Quantize(typ, v)
			require.NoError(b, err)
			rb, _ := typ.RowBytes(sh.K)
			for _, T := range []int{1, 128} {
				b.Run(fmt.Sprintf("%v/%dx%d/T=%d", typ, sh.N, sh.K, T), func(b *testing.B) {
					h := newHarness(runtimeThreads())
					w := &weight{name: "w", t: typ, data: data, rows: sh.N, cols: sh.K, rowBytes: rb}
					x := h.f32(ir.Shape{ir.T, ir.Dim(sh.K)}, randVec(r, T*sh.K, 1))
					n := h.node(ir.OpMatmul, ir.Shape{ir.T, ir.Dim(sh.N)}, dtype.F32, nil, x, h.weight(w))
					h.e.step.T = T
					b.SetBytes(int64(len(data)))
					for b.Loop() {
						if err := kernels[ir.OpMatmul](h.e, n); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(T), "ns/token")
				})
			}
		}
	}
}

// BenchmarkGemm measures the tiled float32 path alone (F32 weights, whose
// decoding is a copy) on one thread, reporting multiply-adds per second.
func BenchmarkGemm(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct{ N, K int }{{256, 896}, {64, 4864}} {
		const T = 128
		b.Run(fmt.Sprintf("%dx%d/T=%d", sh.N, sh.K, T), func(b *testing.B) {
			h := newHarness(1)
			data, err := dtype.Quantize(dtype.F32, randVec(r, sh.N*sh.K, 1))
			require.NoError(b, err)
			w := &weight{name: "w", t: dtype.F32, data: data, rows: sh.N, cols: sh.K, rowBytes: 4 * sh.K}
			x := h.f32(ir.Shape{ir.T, ir.Dim(sh.K)}, randVec(r, T*sh.K, 1))
			n := h.node(ir.OpMatmul, ir.Shape{ir.T, ir.Dim(sh.N)}, dtype.F32, nil, x, h.weight(w))
			h.e.step.T = T
			for b.Loop() {
				if err := kernels[ir.OpMatmul](h.e, n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(T*sh.N*sh.K)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}
