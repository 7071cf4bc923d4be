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

// orderedArm returns the large arm of a product of type t whose batch
// arm is batch in the int8 class of the batch-invariant configuration:
// DefaultXQOrderedArm where batch is an unsplit XQ 2 arm (whose rows add
// their lanes as the ordered arm does) over a type it covers.
func (l *lowerer) orderedArm(t dtype.Type, batch GEMVArm) (GEMVArm, bool) {
	if !l.o.BatchInvariant || !l.o.InvariantInt8 || batch.XQ != 2 || batch.kSplit() != 1 || !mma8OrderTypes[t] || l.o.MaxTokens < GEMVLargeRows {
		return GEMVArm{}, false
	}
	return DefaultXQOrderedArm, true
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

// emitMMA8OrderLevels writes, after an ordered arm's main loop, the
// butterfly's levels 16 … KS over each warp's R slots: slot 0 then holds
// the warp's value (acc[0], the unordered kernel's acc for
// emitMMA8Finish, whose split sums must then add as levels KS/2 … 1).
func emitMMA8OrderLevels(w *Writer, slots int) {
	w.Comment("the butterfly's levels 16 … KS: residue ks + s·KS pairs with ks + (s + o/KS)·KS")
	for h := slots / 2; h >= 1; h /= 2 {
		w.For("mt", "0", "MT", "1", -1, func() {
			w.For("nt", "0", "NT", "1", -1, func() {
				w.For("i", "0", "4", "1", -1, func() {
					for s := range h {
						w.Linef("oacc[%[1]d][mt][nt][i] = __fadd_rn(oacc[%[1]d][mt][nt][i], oacc[%[2]d][mt][nt][i]);", s, s+h)
					}
				})
			})
		})
	}
	w.Line("float (&acc)[MT][NT][4] = oacc[0];")
}
