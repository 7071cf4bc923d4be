package codegen

import (
	"fmt"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// The ordered XQ 3 product (GEMVArm.Ordered 1): the int8 tensor-core
// product whose every row sum is, bit for bit, the float an unsplit XQ 2
// kernel (one row or a batch) computes for that row.
//
// An unsplit XQ 2 warp computes a row as 32 lane sums, lane L adding the
// terms of groups L, L+32, L+64, … in that order from 0, and then adds the
// lanes by the butterfly of warp_sum (lanes L and L+16, then +8, … +1).
// Each group's term is a float of exact integer sums (dp4a or mma, the
// same integers) and the group's factors, computed by the same pinned
// operations here and there (xq_term_*: __fmul_rn, __fmaf_rn, no
// contraction left to the compiler). So the tensor-core product keeps, for
// each of its rows and tokens, the 32 lane sums apart: the KS warps that
// split K take groups ks, ks+KS, … (as the unordered kernel does), and a
// warp's group u goes to the sum of residue u mod 32, one of R = 32/KS it
// keeps (slot (u - ks)/KS mod R). After the loop each warp adds its slots
// as the butterfly's levels 16 … KS add them, and warp 0 adds the KS
// warps' values as its levels KS/2 … 1 do. The types are those whose XQ 2
// unit is one group of 32 elements: Q4_K, Q6_K and Q4_0 (Q8_0's unit is
// 16 elements, so its lanes add other sums).

// DefaultXQOrderedArm is the ordered arm the int8 class of the
// batch-invariant configuration runs from GEMVLargeRows rows
// (LowerOptions.InvariantInt8): DefaultXQMMAArm's geometry (two tiles of
// 16 rows a warp, eight warps splitting K, so four lane sums a warp).
var DefaultXQOrderedArm = GEMVArm{Threads: 256, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 16, RowsPerWarp: 2, Ordered: 1}

// DefaultXQOrderedPipeArm is the pipelined ordered arm: 16 warps
// splitting K (two lane sums a lane), rings of four one-group slots.
var DefaultXQOrderedPipeArm = GEMVArm{Threads: 512, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 16, RowsPerWarp: 2, Stages: 4, Ordered: 1}

// DefaultXQOrderedSplitArm is the ordered arm of the XQ 2 kernels split
// over two warps with unroll 1 (Ordered 21): sixteen warps splitting K,
// so that a lane keeps the two lane sums of each of the split's two warps.
// The int8 class names it, with the unroll of the products' arms
// (OrderedFor).
var DefaultXQOrderedSplitArm = GEMVArm{Threads: 512, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 16, RowsPerWarp: 2, Ordered: 21}

// validOrder reports whether o is an Ordered value: 1, or 10·2 + u for
// u in 1, 2, 4, 8.
func validOrder(o int) bool {
	u := o % 10
	return o == 1 || (o/10 == 2 && (u == 1 || u == 2 || u == 4 || u == 8))
}

// orderSplit is the warps splitting K of the XQ 2 kernels whose order an
// ordered arm keeps (1 for Ordered 1).
func (a GEMVArm) orderSplit() int { return max(1, a.Ordered/10) }

// orderUnroll is the unroll of the XQ 2 kernels whose order an ordered
// arm keeps: a split warp takes stretches of that many times 32 groups.
func (a GEMVArm) orderUnroll() int {
	if a.Ordered < 10 {
		return 1
	}
	return a.Ordered % 10
}

// OrderedFor returns the ordered arm whose sums are the XQ 2 arm x's, bit
// for bit: DefaultXQOrderedPipeArm for an unsplit x (on an H100 it beat
// DefaultXQOrderedArm at every width from 16 rows, 1.2–1.3×; Q4_0 and
// rows not of whole super-blocks take the unpipelined kernel),
// DefaultXQOrderedSplitArm with x's unroll for x split over two warps;
// false for other splits.
func OrderedFor(x GEMVArm) (GEMVArm, bool) {
	switch x.kSplit() {
	case 1:
		return DefaultXQOrderedPipeArm, true
	case 2:
		a := DefaultXQOrderedSplitArm
		a.Ordered = 20 + x.Unroll
		return a, a.Validate() == nil
	}
	return GEMVArm{}, false
}

// OrderedType reports whether the ordered arm covers weights of type t.
func OrderedType(t dtype.Type) bool { return mma8OrderTypes[t] }

// orderedArm returns the large arm of a product of type t whose batch
// arm is batch in the int8 class of the batch-invariant configuration:
// the ordered arm of batch's split and unroll (OrderedFor) where batch is
// an XQ 2 arm over a type it covers.
func (l *lowerer) orderedArm(t dtype.Type, batch GEMVArm) (GEMVArm, bool) {
	if !l.int8Class() || batch.XQ != 2 || !mma8OrderTypes[t] || l.o.MaxTokens < GEMVLargeRows {
		return GEMVArm{}, false
	}
	return OrderedFor(batch)
}

// mma8OrderTypes are the weight types the ordered arm covers.
var mma8OrderTypes = map[dtype.Type]bool{dtype.Q4_K: true, dtype.Q6_K: true, dtype.Q4_0: true}

// emitXQTerms writes the pinned term functions of type t that the XQ 2
// kernels (xq_use) and the ordered XQ 3 kernel share: a group's term from
// its exact integer sums d (offset already taken off), the weight factors
// a, b and the activation factors of the group.
func emitXQTerms(w *Writer, t dtype.Type) {
	switch t {
	case dtype.Q4_K:
		w.Comment("A Q4_K group's term: a·dx·d + b·Σx, rounded the same in every kernel.")
		w.Emit(Func{Name: "xq_term", Return: "float", Params: []Param{{"float", "a"}, {"float", "b"}, {"float", "dx"}, {"float", "d"}, {"float", "sx"}},
			Body: func(w *Writer) { w.Line("return __fmaf_rn(__fmul_rn(a, dx), d, __fmul_rn(b, sx));") }})
	case dtype.Q4_0:
		w.Comment("A Q4_0 group's term: a·dx·d, rounded the same in every kernel.")
		w.Emit(Func{Name: "xq_term", Return: "float", Params: []Param{{"float", "a"}, {"float", "dx"}, {"float", "d"}},
			Body: func(w *Writer) { w.Line("return __fmul_rn(__fmul_rn(a, dx), d);") }})
	case dtype.Q6_K:
		w.Comment("A Q6_K group's term: dx·(a·d0 + b·d1), rounded the same in every kernel.")
		w.Emit(Func{Name: "xq_term", Return: "float", Params: []Param{{"float", "a"}, {"float", "b"}, {"float", "dx"}, {"float", "d0"}, {"float", "d1"}},
			Body: func(w *Writer) { w.Line("return __fmul_rn(dx, __fmaf_rn(a, d0, __fmul_rn(b, d1)));") }})
	}
}

// mma8OrderSlots is R, the lane sums a warp of an ordered arm keeps per
// row and token: 32 over the warps splitting K.
func (a GEMVArm) mma8OrderSlots() int { return 32 / a.kSplit() }

// emitMMA8OrderTile is emitMMA8Tile for the ordered arm: the group's
// terms through xq_term, added to slot s's sums acc (four floats).
func emitMMA8OrderTile(w *Writer, t dtype.Type, a, b, acc string) {
	r := strings.NewReplacer("{acc}", acc, "{loa}", "lo"+a, "{lob}", "lo"+b, "{hia}", "hi"+a, "{hib}", "hi"+b,
		"{faa}", "fa"+a, "{fab}", "fa"+b, "{fba}", "fb"+a, "{fbb}", "fb"+b)
	line := func(s string) { w.Line(r.Replace(s)) }
	w.Block(fmt.Sprintf("/* rows %s, %s */", a, b), func() {
		switch t {
		case dtype.Q6_K:
			line("int s[4] = {0, 0, 0, 0}, h[4] = {0, 0, 0, 0};")
			line("mma_k16(s, {loa}, {lob}, b0);")
			line("mma_k16(h, {hia}, {hib}, b1);")
			for i, c := range []struct{ f, x string }{{"a", "x0"}, {"a", "x1"}, {"b", "x0"}, {"b", "x1"}} {
				line(fmt.Sprintf("{acc}[%[1]d] = __fadd_rn({acc}[%[1]d], xq_term({fa%[2]s}, {fb%[2]s}, %[3]s.x, I2F(s[%[1]d]) - (I2F0 + 32.f * %[3]s.y), I2F(h[%[1]d]) - (I2F0 + 32.f * %[3]s.z)));",
					i, c.f, c.x))
			}
		default:
			line("int c[4] = {0, 0, 0, 0};")
			line("mma_k32(c, {loa}, {lob}, {hia}, {hib}, b0, b1);")
			for i, c := range []struct{ f, x string }{{"a", "x0"}, {"a", "x1"}, {"b", "x0"}, {"b", "x1"}} {
				d := fmt.Sprintf("I2F(c[%d]) - (I2F0 + 8.f * (%[2]s.y + %[2]s.z))", i, c.x)
				if t == dtype.Q4_0 {
					line(fmt.Sprintf("{acc}[%[1]d] = __fadd_rn({acc}[%[1]d], xq_term({fa%[2]s}, %[3]s.x, %[4]s));", i, c.f, c.x, d))
				} else {
					line(fmt.Sprintf("{acc}[%[1]d] = __fadd_rn({acc}[%[1]d], xq_term({fa%[2]s}, {fb%[2]s}, %[3]s.x, %[4]s, %[3]s.w));", i, c.f, c.x, d))
				}
			}
		}
	})
}

// emitMMA8OrderAcc declares an ordered arm's lane sums oacc[slots][MT][NT][4], zeroed.
func emitMMA8OrderAcc(w *Writer, slots int) {
	w.Linef("float oacc[%d][MT][NT][4]; // the lane sums of residues ks, ks + KS, …", slots)
	w.For("s", "0", fmt.Sprint(slots), "1", -1, func() {
		w.For("mt", "0", "MT", "1", -1, func() {
			w.For("nt", "0", "NT", "1", -1, func() {
				w.For("i", "0", "4", "1", -1, func() { w.Line("oacc[s][mt][nt][i] = 0.f;") })
			})
		})
	})
}

// emitMMA8OrderLevels writes, after an ordered arm's main loop, the
// butterfly's levels 16 … KS over each warp's R slots of set set (the
// slots set·R …): its first slot then holds the warp's value. For set 0
// that is acc (oacc[0], the unordered kernel's acc for emitMMA8Finish,
// whose split sums must then add as levels KS/2 … 1).
func emitMMA8OrderLevels(w *Writer, slots, set int) {
	w.Comment("set %d, the butterfly's levels 16 … KS: residue ks + s·KS pairs with ks + (s + o/KS)·KS", set)
	b := set * slots
	for h := slots / 2; h >= 1; h /= 2 {
		w.For("mt", "0", "MT", "1", -1, func() {
			w.For("nt", "0", "NT", "1", -1, func() {
				w.For("i", "0", "4", "1", -1, func() {
					for s := range h {
						w.Linef("oacc[%[1]d][mt][nt][i] = __fadd_rn(oacc[%[1]d][mt][nt][i], oacc[%[2]d][mt][nt][i]);", b+s, b+s+h)
					}
				})
			})
		})
	}
	if set == 0 {
		w.Line("float (&acc)[MT][NT][4] = oacc[0];")
	}
}

// The order of split XQ 2 kernels (Ordered 10·S + U). An XQ 2 kernel
// split over S warps with unroll U gives split warp x the stretches of
// U·32 groups x, x + S, x + 2S, … (counted in stretches), lane L taking
// the groups of residue L in them in order; each split warp adds its lanes
// by warp_sum's butterfly, and lane 0 of split warp 0 adds warps 1 … S-1's
// values to its own lane sum, in that order, before its warp's butterfly.
// The ordered kernel keeps S sets of lane sums, set x for the groups of
// split warp x's stretches (a round of 32 groups lies in one stretch), so
// its warp ks holds, per set, the R lane sums of residues ks + s·KS.

// emitMMA8SplitOrderLoop writes the main loop of an ordered arm keeping
// the order of XQ 2 kernels split over sets warps with unroll unroll:
// rounds of 32 groups, the rounds of split warp x's stretches into set x,
// and within a round the group of slot s (residue ks + s·KS) into slot
// x·R + s. A warp still takes its groups in order (body fetches the next).
func emitMMA8SplitOrderLoop(w *Writer, groups, slots, sets, unroll int, body func(slot int)) {
	w.Comment("%d sets of R lane sums: round r (32 groups) belongs to split warp (r / %d) %% %d", sets, unroll, sets)
	w.Block(fmt.Sprintf("for (int u0 = ks; u0 < %d; u0 += %d)", groups, 32*unroll*sets), func() {
		for set := range sets {
			w.Line("#pragma unroll 1")
			w.Block(fmt.Sprintf("for (int ur = 0; ur < %d; ur++)", unroll), func() {
				w.Linef("const int ub = u0 + (%d + ur) * 32; // a round of split warp %d's stretch", set*unroll, set)
				for sl := range slots {
					scope(w, func() {
						w.Linef("const int u = ub + %d * KS;", sl)
						w.If(fmt.Sprintf("u < %d", groups), func() { body(set*slots + sl) })
					})
				}
			})
		}
	})
}

// emitMMA8SplitOrderFinish writes what an ordered arm of split order
// adds before emitMMA8Finish: the values of sets 1 … S-1 (their levels
// done) summed across the KS warps as levels KS/2 … 1 into warp 0, added
// in that order to warp 0's lane sum of residue 0 in set 0 (the lane sum
// of lane 0 of split warp 0), then set 0's levels, whose warps
// emitMMA8Finish adds as the unsplit order's.
func emitMMA8SplitOrderFinish(w *Writer, slots, sets, ks int) {
	w.Line("__shared__ float red[KS - 1][RPB][MT * NT * 4][32]; // emitMMA8Finish's too")
	for set := 1; set < sets; set++ {
		b := set * slots
		w.Comment("set %d's warps, levels KS/2 … 1, into warp 0", set)
		w.If("ks > 0", func() {
			w.For("mt", "0", "MT", "1", -1, func() {
				w.For("nt", "0", "NT", "1", -1, func() {
					w.For("i", "0", "4", "1", -1, func() {
						w.Linef("red[ks - 1][tw][(mt * NT + nt) * 4 + i][lane] = oacc[%d][mt][nt][i];", b)
					})
				})
			})
		})
		w.Line("__syncthreads();")
		w.If("ks == 0", func() {
			w.For("mt", "0", "MT", "1", -1, func() {
				w.For("nt", "0", "NT", "1", -1, func() {
					w.For("i", "0", "4", "1", -1, func() {
						emitOrderWarpLevels(w, fmt.Sprintf("oacc[%d][mt][nt][i]", b), "red", ks)
					})
				})
			})
		})
		w.Line("__syncthreads(); // red is written again")
	}
	w.Comment("lane 0 of split warp 0 adds the other split warps' values to its lane sum, in order")
	w.If("ks == 0", func() {
		w.For("mt", "0", "MT", "1", -1, func() {
			w.For("nt", "0", "NT", "1", -1, func() {
				w.For("i", "0", "4", "1", -1, func() {
					for set := 1; set < sets; set++ {
						w.Linef("oacc[0][mt][nt][i] = __fadd_rn(oacc[0][mt][nt][i], oacc[%d][mt][nt][i]);", set*slots)
					}
				})
			})
		})
	})
	emitMMA8OrderLevels(w, slots, 0)
}

// emitOrderWarpLevels writes the butterfly's levels ks/2 … 1 across the
// ks warps of a row set for one value: warp 0's own v (an lvalue, which
// receives the sum) and warps 1 … ks-1's from red (indexed as
// emitMMA8Finish's), warp s pairing with warp s + o. Written out, not as
// loops, which NVRTC left to local memory.
func emitOrderWarpLevels(w *Writer, v, red string, ks int) {
	scope(w, func() {
		w.Linef("float v0 = %s;", v)
		for s := 1; s < ks; s++ {
			w.Linef("float v%d = %s[%d][tw][(mt * NT + nt) * 4 + i][lane];", s, red, s-1)
		}
		for o := ks / 2; o > 0; o /= 2 {
			for s := range o {
				w.Linef("v%[1]d = __fadd_rn(v%[1]d, v%[2]d);", s, s+o)
			}
		}
		w.Linef("%s = v0;", v)
	})
}

// mma8OrderPipeShared is the dynamic shared memory of a pipelined ordered
// arm's blocks for rows of type pt: each warp's ring of Stages slots of
// one group (its rows' weights, the block's tokens, its rows' heads),
// which the split sums reuse after the main loop.
func (a GEMVArm) mma8OrderPipeShared(pt mma8PipeType) int {
	wr := 16 * a.rowsPerWarp()
	slot := wr*(pt.rowBytes+pt.headBytes) + 8*((a.batchRows()+7)/8)*mma8TokenBytes
	return max(a.Threads/32*a.Stages*slot, a.mma8SplitBytes())
}

// mma8OrderPipeMaxShared is the most shared memory a pipelined ordered
// arm's blocks take over the types it covers (and the norm's 1/rms of
// each row).
func (a GEMVArm) mma8OrderPipeMaxShared() int {
	n := 0
	for _, pt := range mma8PipeTypes {
		n = max(n, a.mma8OrderPipeShared(pt))
	}
	return n + 4*a.batchRows()
}

// gemvMMA8OrderPipe is the ordered arm fed by cp.async (Stages > 0, Q4_K
// and Q6_K weights, K a multiple of 256): each warp's groups ks, ks+KS, …
// reach it through a ring of Stages slots of one group each, whose slot
// holds the group's weight units, its super-block's heads and the block's
// tokens. The groups and the lane sums are the unpipelined ordered arm's.
// grid (⌈n/(16·RowsPerWarp·RowsPerBlock)⌉, ⌈m/MB⌉), dynamic shared memory
// mma8OrderPipeShared.
func gemvMMA8OrderPipe(t dtype.Type, n, k int, residual bool, arm GEMVArm, e XQEnds, ystride int) (*Kernel, error) {
	fr := mma8Frags[t]
	pt := mma8PipeTypes[t]
	mb := arm.batchRows()
	mt := arm.rowsPerWarp()
	ks := arm.kSplit()
	nt := (mb + 7) / 8
	p := arm.Stages
	slots := arm.mma8OrderSlots()
	wr := 16 * mt
	pr := pipeRing{t: t, fr: fr, mt: mt, cr: ceilDiv(wr, 32), p: p, gs: 1}
	xa := ceilDiv(3*8*nt, 32)
	shared := arm.mma8OrderPipeShared(pt)
	groups := mma8Groups(k)
	epi := ""
	if residual {
		epi = "_res"
	}
	epi += e.suffix() + ysName(ystride)
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	src := source(fmt.Sprintf("gemv: %v weights repacked, int8 activations from xquant, int8 mma.sync in the XQ 2 order fed by cp.async, %d stages, N %d, K %d, residual %v, %v", t, p, n, k, residual, arm),
		repackDeps(t, "f16", "warp", "pdl"), func(w *Writer) {
			if t == dtype.Q6_K {
				emitQ6Words(w)
			}
			emitCPAsync(w)
			emitMMA8Ops(w)
			emitXQTerms(w, t)
			emitMMA8Defines(w, t, n, k, arm, "groups")
			w.Linef("#define P %d // slots of a warp's ring, a group each", p)
			w.Linef("#define WR %d // weight rows a warp", wr)
			w.Linef("#define RB %d // a row's bytes of a group", pt.rowBytes)
			w.Linef("#define HB %d // a row's bytes of a super-block head", pt.headBytes)
			w.Linef("#define TB %d // a token's bytes of a group", mma8TokenBytes)
			w.Line("#define XO (WR * RB) // the tokens' offset in a slot")
			w.Line("#define HO (XO + 8 * NT * TB) // the heads' offset in a slot")
			w.Line("#define SB (HO + WR * HB) // bytes of a slot")
			w.Raw(ysDefine(ystride))
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: xqGlobalParams, Body: func(w *Writer) {
				w.Line("extern __shared__ uint4 psm[];")
				emitMMA8Lanes(w)
				w.Line("const int r0 = (blockIdx.x * RPB + tw) * WR; // the warp's first row")
				w.Line("const u8* ws = (const u8*)psm + wi * P * SB; // the warp's ring")
				w.Line("const u32 wsa = (u32)__cvta_generic_to_shared(ws);")
				w.Linef("const int ng = ks < %[1]d ? (%[1]d - 1 - ks) / KS + 1 : 0; // the warp's groups: ks, ks + KS, …", groups)
				w.Line("const int m0 = blockIdx.y * MB;")
				w.Line("const int mrows = min(MB, m - m0);")
				pr.rowPointers(w)
				acts := emitActCopies(w, xa)
				emitMMA8Columns(w)
				emitMMA8OrderAcc(w, slots)
				// copy writes the copies of the warp's group j (an expression) into ring slot sl
				weights := func(j string, sl int) {
					scope(w, func() {
						w.Linef("const int u = ks + KS * (%s), sb = u >> 3;", j)
						sa := fmt.Sprintf("wsa + %d * SB", sl)
						pr.weights(w, "u", "sb", sa, sa+" + HO", true)
					})
				}
				actsOf := func(j string, sl int) {
					scope(w, func() {
						w.Linef("const int u = ks + KS * (%s);", j)
						acts("u", fmt.Sprintf("wsa + %d * SB", sl))
					})
				}
				w.Comment("the first P-1 slots: the weights before the wait for the previous kernel (they do not")
				w.Comment("depend on it), as one commit group, then each slot's activations as one")
				for j := range p - 1 {
					w.If(fmt.Sprintf("%d < ng", j), func() { weights(fmt.Sprint(j), j) })
				}
				w.Line("CP_COMMIT();")
				w.Line("pdl_wait();")
				if e.NormIn {
					w.Line("const u8* xr = xq + (size_t)m0 * XR;")
					emitXQRowNorms(w, e.NormEps, "xr", mb)
				}
				for j := range p - 1 {
					w.If(fmt.Sprintf("%d < ng", j), func() { actsOf(fmt.Sprint(j), j) })
					w.Line("CP_COMMIT();")
				}
				rows := mma8Rows(mt)
				local := map[string]string{}
				for i, r := range rows {
					local[r] = fmt.Sprintf("(%d + g)", 8*i)
				}
				unroll := max(p, slots)
				w.Comment("%d groups a round: group j from ring slot j %% P into lane sum j %% %d (residue ks + (j %% %d)·KS)", unroll, slots, slots)
				w.Block(fmt.Sprintf("for (int j0 = 0; j0 < ng; j0 += %d)", unroll), func() {
					for jj := range unroll {
						w.If(fmt.Sprintf("j0 + %d < ng", jj), func() {
							w.Linef("const int j = j0 + %d, u = ks + KS * j, sb = u >> 3;", jj)
							w.Line("CP_WAIT(P - 2); // this slot's copies have landed")
							w.Line("__syncwarp(); // … every lane's, and every lane is done with the slot refilled next")
							next := (jj + p - 1) % p
							w.If("j + P - 1 < ng", func() {
								weights("j + P - 1", next)
								actsOf("j + P - 1", next)
							})
							w.Line("CP_COMMIT();")
							w.Linef("const u8* st = ws + %d * SB;", jj%p)
							w.Line("const u8* hs = st + HO;")
							for _, r := range rows {
								lr := local[r]
								if t == dtype.Q6_K {
									w.Linef("const int dsh%s = (int)(((size_t)min(r0 + %s, N - 1) * NB + sb) & 1) * 16; // d's half of its word", r, lr)
								}
								pr.slotWords(w, r, lr, "(16 * (u & 1))")
								fr.decode(w, r, "u & 7")
							}
							w.For("nt", "0", "NT", "1", -1, func() {
								emitSlotTokens(w)
								for i := range mt {
									emitMMA8OrderTile(w, t, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("oacc[%d][%d][nt]", jj%slots, i))
								}
							})
						})
					}
				})
				w.Line("CP_WAIT(0);")
				emitMMA8OrderLevels(w, slots, 0)
				emitMMA8Finish(w, e, residual, mb, ks, redRing, true)
			}})
		})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: xqGlobalParams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, wr*arm.RowsPerBlock), ceilDiv(d.Tokens, mb), 1), Block: dim3(arm.Threads, 1, 1), Shared: uint32(shared),
			StaticShared: uint32(4 * mb)}
	}}, nil
}
