package codegen

import (
	"fmt"
	"strings"
)

// moeXQSumMaxShared bounds the quantised row of a token's slots that
// moeXQSum keeps in static shared memory.
const moeXQSumMaxShared = 40 << 10

// moeXQSum returns the int8 down product of a one-token step that also
// adds the experts' rows, weighted, into the residual stream (MoEShape.Sum
// with an XQ arm; moeGEMVSum's int8 twin):
//
//	moe_xq(const u8* W, const float* x, const int* ids, const float* wts, float* y, int m)
//
// W repacked as MoEXQ's, x the token's Used slot rows of K as floats (the
// gate/up product's), ids and wts its choice, y the residual row of N.
// Each block first quantises x into shared memory as XQuant(Used·K)
// writes it (emitXQPack on the same floats, 4 consecutive threads a
// group), so the step launches no XQuant before it; then a warp a weight
// row r: for each slot j in order the product of expert ids[j]'s row r
// with slot j's int8 row, each lane's units added as MoEXQ adds them and
// summed over the warp, then y[r] += Σ_j wts[j]·d_j with one fused
// multiply-add a slot from 0, as MoESum adds: the floats of XQuant, MoEXQ
// and MoESum in three launches. grid (⌈N/RowsPerBlock⌉). One-row arms.
func moeXQSum(s MoEShape, arm MoEArm) (*Kernel, error) {
	if arm.One != 1 || !s.Sum {
		return nil, fmt.Errorf("%w: a summing int8 moe product runs one-row arms of a summing shape, not %v", ErrUnsupported, arm)
	}
	xr := XQRowBytes(s.Used * s.K)
	if xr > moeXQSumMaxShared {
		return nil, fmt.Errorf("%w: a summing int8 moe product of %d slots of %d (%d bytes of shared memory)", ErrUnsupported, s.Used, s.K, xr)
	}
	rt := rpTypes[s.Type]
	units := ceilDiv(s.K/rt.unitElems, 32)
	nb := s.K / s.Type.BlockElems()
	name := strings.ReplaceAll(fmt.Sprintf("moe_xq_%s_%s", MoEClass(s), arm), "+", "_")
	params := []Param{{"const u8* __restrict__", "W"}, {"const float* __restrict__", "x"}, {"const int* __restrict__", "ids"},
		{"const float* __restrict__", "wts"}, {"float* __restrict__", "y"}, {"int", "m"}}
	threads := 32 * arm.RowsPerBlock
	deps := repackDeps(s.Type, "f16", "warp", "pdl")
	if s.QuantNext {
		if s.N%32 != 0 || ceilDiv(s.N/8, threads) > xquantMaxLoads {
			return nil, fmt.Errorf("%w: the next norm's quantisation of rows of %d by %d threads", ErrUnsupported, s.N, threads)
		}
		name += "_qn"
		params = append(params, Param{"const float* __restrict__", "nw"}, Param{"u8* __restrict__", "xo"}, Param{"int* __restrict__", "tickets"})
		deps = proDeps(Prologue{Kind: ProNorm}, append(deps, "types")...)
	}
	title := fmt.Sprintf("moe_xq: %v weights repacked, %d of %d experts of N %d, K %d, a row a slot quantised in the block, summed into the residual, %v",
		s.Type, s.Used, s.Experts, s.N, s.K, arm)
	src := source(title, deps, func(w *Writer) {
		emitXQPack4(w)
		emitXQWeightHelpers(w, s.Type)
		emitRepackDefines(w, rt, s.Experts*s.N, s.K, nb)
		w.Linef("#define NE %d // rows an expert", s.N)
		w.Linef("#define USED %d // experts a token", s.Used)
		w.Linef("#define U %d // units a lane holds", units)
		w.Linef("#define RPB %d // rows a block, a warp a row", arm.RowsPerBlock)
		w.Linef("#define THREADS %d", threads)
		w.Linef("#define XR %d // bytes of the quantised token row (XQuant of USED·K)", xr)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
			w.Line("const int lane = threadIdx.x & 31;")
			w.Line("const int r = blockIdx.x * RPB + (threadIdx.x >> 5); // the warp's row of each expert")
			w.Line("__shared__ __align__(16) u8 sq[XR];")
			w.Line("pdl_wait();")
			w.Comment("the token's slot rows quantised as XQuant(USED·K) writes them (every thread runs the shuffles)")
			w.Line("const float4* xp = (const float4*)x;")
			w.Line("float4* meta = (float4*)(sq + USED * K);")
			emitQuantChunks(w, "0", "USED * K / 8", "xp", "sq")
			w.Line("__syncthreads();")
			w.If("r < NE", func() { // the same for the whole warp
				w.Line("float d[USED];")
				w.Line("#pragma unroll")
				w.Block("for (int j = 0; j < USED; j++)", func() {
					w.Line("const int rr0 = ids[j] * NE + r;")
					for _, p := range rt.ptrs {
						w.Line(xqRename(p, 0))
					}
					for _, p := range rt.regs {
						w.Line(xqRename(p, 0))
					}
					w.For("i", "0", "U", "1", -1, func() {
						w.Line("const int uu = lane + i * 32;")
						w.If("uu < UPR", func() {
							for _, l := range rt.load {
								w.Line(xqRename(l, 0))
							}
						})
					})
					w.Line("const int4* xr = (const int4*)(sq + j * K);")
					w.Line("const float4* mt = (const float4*)(sq + USED * K + j * (K / 32) * 16);")
					w.Line("float acc = 0.f;")
					w.For("i", "0", "U", "1", -1, func() {
						w.Line("const int uu = lane + i * 32;")
						w.If("uu < UPR", func() {
							w.Linef("const xw w0 = %s;", xqRename(xqPrep[s.Type], 0))
							w.Line("acc = __fadd_rn(acc, xq_use(w0, xr, mt, uu));")
						})
					})
					w.Line("d[j] = warp_sum(acc);")
				})
				emitSlotSum(w)
			})
			if s.QuantNext {
				emitQuantNext(w, s.N, threads)
			}
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "moe_xq", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(s.N, arm.RowsPerBlock), 1, 1), Block: dim3(threads, 1, 1)}
	}}, nil
}

// emitQuantNext writes a summing product's tail (MoEShape.QuantNext): in
// the block that finishes last, the residual row y of n, which every block
// wrote part of (read past L1), quantised by threads threads into xo as
// XQuant with the norm weight nw writes it (its bytes do not depend on the
// thread count), for the next norm's products.
func emitQuantNext(w *Writer, n, threads int) {
	w.Comment("the new residual row quantised for the next norm's products, in the block that finishes last")
	emitLastBlock(w, "tickets", "(int)gridDim.x", "this block's rows of y", func() {
		w.Comment("from here K, XR and SL are the residual row's")
		emitRowDefines(w, n, threads)
		emitNormRowQuant(w, "y", "xo", threads, "__ldcg")
		w.Line("__syncthreads(); // every warp's bytes written before the block's launch trigger")
	})
}
