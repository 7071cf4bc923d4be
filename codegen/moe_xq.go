package codegen

import (
	"fmt"
	"regexp"
	"strings"
)

// The experts' products on int8 activations (family moe_xq): the float
// MoEGEMV dequantises every weight to float and multiplies in float, 96
// float instructions per 32 weights (twice for the gate/up pair), and on
// an H100 it reads the experts at about a fifth of the copy rate
// (docs/PERFORMANCE.md, session 30); the dense products left that regime
// with int8 activations and dp4a on repacked weights (gemv_xq.go). MoEXQ
// is that product for the chosen experts: the expert tensor repacked as
// one matrix of Experts·N rows (Repack), activation rows an XQuant launch
// quantised (a row a token, or a row a slot for the down product), and the
// same grids as MoEGEMV: a block per (row set, choice) for a one-token
// step (One), a block per (row set, expert) reading its slots from the
// groups otherwise. Each lane loads all of its units of the warp's row(s)
// once, after pdl_wait (the expert is known only then), and meets them with
// each slot's activations; every slot's sum is added in the same order in
// both grids, so the one-row and the grouped kernels give the same floats.
// The default where it fits (lowering's moeArms); a one-row gate/up
// product also chooses the token's experts (MoEShape.Route), as MoEGEMV's.

// moeXQMaxUnits bounds the units of 32 (16 for Q8_0) a lane holds: rows
// of up to 32·moeXQMaxUnits units.
const moeXQMaxUnits = 4

// MoEXQFits reports whether MoEXQ takes shape s: a repacked type, a
// SwiGLU pair of one type, a summing shape's slot rows in moeXQSum's
// shared memory, and rows a lane's registers hold (at
// most 32·moeXQMaxUnits units).
func MoEXQFits(s MoEShape) error {
	if err := s.check(); err != nil {
		return err
	}
	rt, ok := rpTypes[s.Type]
	if !ok || xqPrep[s.Type] == "" || (s.SwiGLU && s.Up != s.Type) || (s.Sum && XQRowBytes(s.Used*s.K) > moeXQSumMaxShared) {
		return fmt.Errorf("%w: moe_xq of %v (up %v, sum %v)", ErrUnsupported, s.Type, s.Up, s.Sum)
	}
	if s.K%32 != 0 || ceilDiv(s.K/rt.unitElems, 32) > moeXQMaxUnits {
		return fmt.Errorf("%w: moe_xq rows of %d (at most %d units a lane)", ErrUnsupported, s.K, moeXQMaxUnits)
	}
	return nil
}

// MoEXQ returns the chosen experts' product of shape s on int8 activations:
//
//	moe_xq(const u8* W, [const u8* Wu,] const u8* xq, const int* ids, const int* groups, float* y, int m)
//
// W (and Wu) in the layout of Repack(s.Type, Experts·N, K, ·), xq the m
// token rows XQuant(K, Prologue{}) wrote (with PerSlot XQuant(Used·K, ·)
// of the token's Used slot rows side by side, as the gate/up product
// writes them), y as MoEGEMV's. Q4_0, Q8_0, Q4_K and Q6_K weights; a
// SwiGLU pair of one type (MoEXQFits). The arm's XQ is not read (MoEGEMV
// sends XQ 1 arms here).
func MoEXQ(s MoEShape, arm MoEArm) (*Kernel, error) {
	if err := MoEXQFits(s); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if s.Sum {
		return moeXQSum(s, arm)
	}
	rt := rpTypes[s.Type]
	units := ceilDiv(s.K/rt.unitElems, 32)
	nb := s.K / s.Type.BlockElems()
	name := strings.ReplaceAll(fmt.Sprintf("moe_xq_%s_%s", MoEClass(s), arm), "+", "_")
	params := []Param{{"const u8* __restrict__", "W"}}
	rows := 1
	if s.SwiGLU {
		params = append(params, Param{"const u8* __restrict__", "Wu"})
		rows = 2
	}
	if s.Route && arm.One != 1 {
		return nil, fmt.Errorf("%w: a routing moe product runs one-row arms, not %v", ErrUnsupported, arm)
	}
	if s.Route {
		params = append(params, Param{"const u8* __restrict__", "xq"}, Param{"const float* __restrict__", "logits"},
			Param{"int* __restrict__", "ids"}, Param{"float* __restrict__", "wts"}, Param{"float* __restrict__", "y"}, Param{"int", "m"})
	} else {
		params = append(params, Param{"const u8* __restrict__", "xq"}, Param{"const int* __restrict__", "ids"},
			Param{"const int* __restrict__", "groups"}, Param{"float* __restrict__", "y"}, Param{"int", "m"})
	}
	threads := 32 * arm.RowsPerBlock
	title := fmt.Sprintf("moe_xq: %v weights repacked, int8 activations, %d of %d experts of N %d, K %d, swiglu %v, a row a slot %v, %v",
		s.Type, s.Used, s.Experts, s.N, s.K, s.SwiGLU, s.PerSlot, arm)
	src := source(title, repackDeps(s.Type, "f16", "warp", "pdl"), func(w *Writer) {
		emitXQWeightHelpers(w, s.Type)
		// the planes of the whole expert tensor; N is its row count there
		emitRepackDefines(w, rt, s.Experts*s.N, s.K, nb)
		w.Linef("#define NE %d // rows an expert", s.N)
		w.Linef("#define E %d // experts", s.Experts)
		w.Linef("#define USED %d // experts a token", s.Used)
		w.Linef("#define U %d // units a lane holds", units)
		w.Linef("#define RPB %d // rows a block, a warp a row", arm.RowsPerBlock)
		w.Linef("#define BR %d // slots a chunk", arm.BatchRows)
		if s.Route {
			w.Linef("#define NV %d // logits a lane", ceilDiv(s.Experts, 32))
		}
		if s.PerSlot {
			w.Comment("a token's row holds its USED slots' rows of K, quantised as one row (XQuant of")
			w.Comment("USED·K: the same groups of 32, the slot's metadata after all the int8 values)")
			w.Linef("#define XR %d // bytes of a quantised token row", XQRowBytes(s.Used*s.K))
			w.Line("#define XQ8(s) ((s) % USED * K) // the slot's int8 values in its token's row")
			w.Line("#define XMT(s) (USED * K + (s) % USED * (K / 32) * 16) // its groups' metadata")
		} else {
			w.Linef("#define XR %d // bytes of a quantised token row", XQRowBytes(s.K))
			w.Line("#define XQ8(s) 0")
			w.Line("#define XMT(s) K")
		}
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
			w.Line("const int lane = threadIdx.x & 31;")
			w.Line("const int r = blockIdx.x * RPB + (threadIdx.x >> 5); // the warp's row of its expert")
			w.Line("pdl_wait();")
			if s.Route {
				emitRouteChoice(w, s.Norm, "NE")
			} else if arm.One == 1 {
				w.Comment("slot blockIdx.y of a one-token step")
				w.Line("const int e = ids[blockIdx.y];")
				w.Line("const int beg = 0, end = r < NE ? 1 : 0;")
			} else {
				w.Line("const int e = blockIdx.y;")
				w.Line("const int beg = groups[e], end = r < NE ? groups[e + 1] : beg;")
			}
			w.If("beg == end", func() {
				w.Line("pdl_launch();")
				w.Line("return;")
			})
			for i := range rows {
				w.Linef("const int rr%d = e * NE + r;", i)
				for _, p := range rt.ptrs {
					w.Line(moeXQWeights(xqRename(p, i), i))
				}
				for _, p := range rt.regs {
					w.Line(xqRename(p, i))
				}
			}
			w.Comment("every unit of the warp's row(s), loaded once for all the slots")
			w.For("i", "0", "U", "1", -1, func() {
				w.Line("const int uu = lane + i * 32;")
				w.If("uu < UPR", func() {
					for i := range rows {
						for _, l := range rt.load {
							w.Line(xqRename(l, i))
						}
					}
				})
			})
			w.For("c", "beg", "end", "BR", 0, func() { moeXQChunk(w, s, arm, rows) })
			w.Line("pdl_launch();")
		}})
	})
	rowSets := ceilDiv(s.N, arm.RowsPerBlock)
	return &Kernel{Family: "moe_xq", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		if arm.One == 1 {
			return Geometry{Grid: dim3(rowSets, s.Used, 1), Block: dim3(threads, 1, 1)}
		}
		return Geometry{Grid: dim3(rowSets, s.Experts, 1), Block: dim3(threads, 1, 1)}
	}}, nil
}

// moeXQW matches the weight base W in rpTypes' pointers.
var moeXQW = regexp.MustCompile(`\bW\b`)

// moeXQWeights points row i's pointers at its matrix: W for the gate (or
// the only) rows, Wu for the up rows.
func moeXQWeights(code string, i int) string {
	if i == 0 {
		return code
	}
	return moeXQW.ReplaceAllString(code, "Wu")
}

// moeXQChunk writes the products of the warp's row(s) with slots c…c+BR−1
// of its group (fewer at its end), each unit unpacked once for all of
// them, added unit by unit in the lane's order, then summed over the warp.
func moeXQChunk(w *Writer, s MoEShape, arm MoEArm, rows int) {
	w.Line("const int nb = min(BR, end - c);")
	w.Line("int sl[BR];")
	w.For("j", "0", "BR", "1", -1, func() {
		if arm.One == 1 {
			w.Line("sl[j] = blockIdx.y;")
		} else {
			w.Line("sl[j] = j < nb ? groups[E + 1 + c + j] : 0;")
		}
	})
	w.Linef("float acc[%d][BR];", rows)
	for i := range rows {
		w.For("j", "0", "BR", "1", -1, func() { w.Linef("acc[%d][j] = 0.f;", i) })
	}
	w.For("i", "0", "U", "1", -1, func() {
		w.Line("const int uu = lane + i * 32;")
		w.If("uu < UPR", func() {
			for i := range rows {
				w.Linef("const xw w%d = %s;", i, xqRename(xqPrep[s.Type], i))
			}
			w.For("j", "0", "BR", "1", -1, func() {
				w.If("j < nb", func() {
					w.Line("const u8* xb = xq + (size_t)(sl[j] / USED) * XR;")
					w.Line("const int4* xr = (const int4*)(xb + XQ8(sl[j]));")
					w.Line("const float4* mt = (const float4*)(xb + XMT(sl[j]));")
					for i := range rows {
						w.Linef("acc[%d][j] = __fadd_rn(acc[%d][j], xq_use(w%d, xr, mt, uu));", i, i, i)
					}
				})
			})
		})
	})
	w.For("j", "0", "BR", "1", -1, func() {
		w.If("j < nb", func() {
			w.Line("float g = warp_sum(acc[0][j]);")
			if s.SwiGLU {
				w.Line("const float up = warp_sum(acc[1][j]);")
				w.Line("g = g / (1.f + expf(-g)) * up;")
			}
			w.If("lane == 0", func() { w.Line("y[(size_t)sl[j] * NE + r] = g;") })
		})
	})
}
