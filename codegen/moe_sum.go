package codegen

import (
	"fmt"
	"strings"
)

// moeGEMVSum returns the down product of a one-token step that also adds
// the experts' rows, weighted, into the residual stream (MoEShape.Sum):
//
//	moe_gemv(const u8* W, const float* x, const int* ids, const float* wts, float* y, int m)
//
// x holds the token's Used slot rows of K, ids and wts its choice
// (MoERoute's), y the residual row of N. A warp a weight row r: for each
// slot j in order the product of expert ids[j]'s row r with x_j, summed
// over the warp as the one-row arm sums it, then y[r] += Σ_j wts[j]·d_j
// with one fused multiply-add a slot from 0, as MoESum adds: the same
// floats as the one-row MoEGEMV and MoESum in two launches. grid
// (⌈N/RowsPerBlock⌉). One-row arms only (m is 1).
func moeGEMVSum(s MoEShape, arm MoEArm) (*Kernel, error) {
	if arm.One != 1 {
		return nil, fmt.Errorf("%w: a summing moe product runs one-row arms, not %v", ErrUnsupported, arm)
	}
	rowBytes, _ := s.Type.RowBytes(s.K)
	name := strings.ReplaceAll(fmt.Sprintf("moe_gemv_%s_%s", MoEClass(s), arm), "+", "_")
	params := []Param{{"const u8* __restrict__", "W"}, {"const float* __restrict__", "x"}, {"const int* __restrict__", "ids"},
		{"const float* __restrict__", "wts"}, {"float* __restrict__", "y"}, {"int", "m"}}
	threads := 32 * arm.RowsPerBlock
	title := fmt.Sprintf("moe_gemv: %v weights, %d of %d experts of N %d, K %d, a row a slot, summed into the residual, %v", s.Type, s.Used, s.Experts, s.N, s.K, arm)
	src := source(title, []string{dqHelper(s.Type), "warp", "pdl"}, func(w *Writer) {
		w.Linef("#define N %d // rows an expert", s.N)
		w.Linef("#define K %d", s.K)
		w.Linef("#define USED %d // experts a token", s.Used)
		w.Linef("#define ROW_BYTES %d", rowBytes)
		w.Linef("#define RPB %d // rows a block, a warp a row", arm.RowsPerBlock)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
			w.Line("const int lane = threadIdx.x & 31;")
			w.Line("const int r = blockIdx.x * RPB + (threadIdx.x >> 5);")
			w.Line("pdl_wait();")
			w.If("r < N", func() { // the same for the whole warp
				w.Line("float d[USED];")
				w.For("j", "0", "USED", "1", -1, func() {
					w.Line("const u8* wr = W + ((size_t)ids[j] * N + r) * ROW_BYTES;")
					w.Line("float acc = 0.f;")
					w.For("u", "lane", "K / 32", "32", 0, func() {
						w.Line("float v[32];")
						w.Linef("%s(wr, u, v);", dqFunc(s.Type))
						w.Line("const float4* xu = (const float4*)(x + (size_t)j * K + 32 * u);")
						emitMoEUnitDot(w, "acc")
					})
					w.Line("d[j] = warp_sum(acc);")
				})
				emitSlotSum(w)
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "moe_gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(s.N, arm.RowsPerBlock), 1, 1), Block: dim3(threads, 1, 1)}
	}}, nil
}
