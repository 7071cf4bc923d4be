package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// The small-row f16 tensor-core arms (XQ 4 with BatchRows 8 or fewer). The
// default XQ 4 arm (DefaultXQHalfArm: 16 warps, 32 weight rows a block,
// 16 activation rows, rings of two stages of two groups) is built for 16
// rows: on an H100 it read llama2-7b q4_k_m's weights at about 0.85 TB/s
// at 5 rows and decoded one row (the batch-invariant configuration) at
// 0.6× the int8 one-row product. At 1 to 8 rows its time is set by how many
// weight bytes are in flight and by the issue of each group's decoding,
// not by the tokens: its ring holds one stage (two groups, 1 KiB a warp)
// in flight, and two thirds of each group's cp.async copies and ring bytes
// are its 16 token slots, mostly copies of the step's last row.
//
// A small arm's kernel is gemvMMAH's with these differences, all chosen
// by the arm's fields so that the autotuner can sweep them:
//
//   - BatchRows 8: one n8 tile of tokens (NT 1), so half the token slots
//     of a stage (512 bytes instead of 1 KiB a group) and half the B
//     fragment loads and mma of 16;
//   - a token past the step's rows is not copied into the ring (the
//     16-row kernel copies the step's last row there): its C columns are
//     never stored, and an mma's column depends on its B column only, so
//     whatever the slot holds cannot reach a stored sum. At one row a
//     lane in eight copies a token chunk;
//   - deeper rings (Stages 4 of two groups, or 8 of one: 6 or 7 groups in
//     flight a warp) and up to four tiles of 16 weight rows a warp
//     (RowsPerWarp 4: 64 rows, each lane copying two), so each warp has
//     more weight bytes outstanding while it decodes;
//   - 128 or 256 threads (KS 4 or 8 warps splitting K), blocks small
//     enough that three to eight are resident on a multiprocessor.
//
// A split of K across blocks (more blocks a row set when rows are few)
// is not among them: combining the blocks' f32 partial sums in a fixed
// order needs a scratch buffer and either a second launch or a last-block
// reduction behind a counter, which the products' parameters do not carry;
// within a block the split sums are added in a fixed order (warp 0, then
// warps 1, 2, …), so a row's sums depend on the arm's KS and never on the
// step's width, and one arm used at every width keeps the batch-invariant
// configuration invariant.
//
// Lowering runs a small arm only where the tunedb names one for the
// product's GEMVSmallClass (smallArm): untuned, every program keeps its
// kernels.

// SmallArms are the small-row arms kernel-check and the scripts name, with
// shared memory over Q4_K / Q6_K (mmahShared) and registers (mmahRegs):
//
//   - t512_r1_u2_s1_l1_h8_w2_p2: the default's geometry with 8 rows, 80 /
//     92 KiB (two blocks a multiprocessor), 96 registers;
//   - t256_r1_u2_s1_l1_h8_p4: a tile a warp, eight warps splitting K, a
//     ring of four stages of two groups (6 groups, 1.5 KiB, in flight a
//     warp), 52 / 61 KiB (three or four blocks), 68 registers, twice the
//     blocks of the default (256 for a product of 4096 rows);
//   - t256_r1_u2_s1_l1_h8_w2_p4: two tiles a warp, the same ring (3 KiB in
//     flight a warp), 72 / 90 KiB, 96 registers;
//   - t256_r1_u1_s1_l1_h8_w4_p8: four tiles a warp, eight stages of one
//     group (7 KiB in flight a warp), 112 / 148 KiB (one block), 152
//     registers; half the default's blocks;
//   - t128_r1_u2_s1_l1_h8_p4: four warps splitting K (four super-blocks a
//     warp at K 4096), 26 / 31 KiB, 68 registers, up to eight blocks a
//     multiprocessor.
func SmallArms() []GEMVArm {
	arm := func(threads, unroll, mt, stages int) GEMVArm {
		return GEMVArm{Threads: threads, RowsPerBlock: 1, Unroll: unroll, SharedX: 1, Layout: 1, XQ: 4, BatchRows: 8, RowsPerWarp: mt, Stages: stages}
	}
	return []GEMVArm{arm(512, 2, 2, 2), arm(256, 2, 0, 4), arm(256, 2, 2, 4), arm(256, 1, 4, 8), arm(128, 2, 0, 4)}
}

// smallBatch reports whether a is a small-row arm: XQ 4 with 8 rows a
// block or fewer, whose kernel copies no token past the step's rows.
func (a GEMVArm) smallBatch() bool { return a.XQ == 4 && a.BatchRows <= 8 }

// mmahRegs estimates the registers a lane of an XQ 4 arm needs: about 40
// for its addresses, indices and loop, 24 a tile of 16 weight rows (the
// two rows' raw words, heads, scales and four f16x2 pairs each) and its
// MT·NT·4 accumulators. The default (MT 2, NT 2) comes to 104, within the
// 128 a thread of 512 may have.
func (a GEMVArm) mmahRegs() int {
	mt, nt := a.rowsPerWarp(), (a.batchRows()+7)/8
	return 40 + 24*mt + 4*mt*nt
}

// mmahRegLimit is the registers a thread of an arm's blocks may have: the
// register file (64 Ki) over the block's threads, at most 255.
func (a GEMVArm) mmahRegLimit() int { return min(255, 65536/max(32, a.Threads)) }

// GEMVSmallClass is the shape class under which the tunedb keeps the f16
// tensor-core arm of steps of up to 16 rows (Launch.Large) of the product
// of class: the 3 to 16-row kernel (and, in the batch-invariant
// configuration, the kernel of every width).
func GEMVSmallClass(class string) string { return class + "_small" }

// GEMVSmallSpaceFor is the gemv space of the small-row arms of products
// with weights of type t (HalfTypes): XQ 4, 8 or 16 rows a block, 128 to
// 512 threads, one to four tiles a warp, rings of 2, 4 or 8 stages of one
// or two groups (at most 8 slots). Its default is DefaultXQHalfArm, the
// arm those steps run untuned, the baseline a small arm must beat.
func GEMVSmallSpaceFor(t dtype.Type) Space {
	return classGEMVSpace(t, map[string][]int{"threads": {128, 256, 512}, "rows_per_block": {1}, "unroll": {1, 2}, "layout": {1}, "shared_x": {1},
		"xq": {4}, "batch_rows": {8, 16}, "rows_per_warp": {0, 2, 4}, "stages": {2, 4, 8}}, DefaultXQHalfArm,
		func(a GEMVArm) bool { return a.XQ == 4 && a.BatchRows <= 16 }, errNotSmall)
}

// errNotSmall refuses an arm of the small space that is not an f16 one of
// at most 16 rows a block.
var errNotSmall = fmt.Errorf("%w: gemv small space: want an XQ 4 arm of at most 16 rows a block", ErrUnsupported)

// smallArm returns the arm of the launches of steps of up to 16 rows
// (Launch.Large) of the product of class whose large arm is large: the
// tunedb's pick for GEMVSmallClass(class) where large is an f16 arm and
// the pick is one of at most 16 rows a block, else large. In the
// batch-invariant configuration the pick runs at every width (one kernel,
// its sums in an order that depends on the arm alone); elsewhere it runs
// from halfFrom rows, and a pick of fewer than 16 rows a block hands the
// steps wider than its BatchRows to the wide arm where there is one
// (wideArm with the pick as the large arm).
func (l *lowerer) smallArm(class string, large GEMVArm) GEMVArm {
	if large.XQ != 4 {
		return large
	}
	p, ok := l.picked("gemv", GEMVSmallClass(class))
	if !ok {
		return large
	}
	if a := GEMVArmOf(p); a.XQ == 4 && a.BatchRows <= 16 {
		return a
	}
	return large
}
