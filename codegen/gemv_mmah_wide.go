package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// The wide f16 tensor-core arms (XQ 4 with BatchRows 32 or 64). The
// default XQ 4 arm serves 16 activation rows a block, so a step of 64 rows
// runs four blocks on each set of weight rows, each reading and
// dequantising the same weights: on an H100 a 64-row step of llama2-7b
// q4_k_m read its weights at 195 to 334 GB/s. A wide arm's block serves 32
// or 64 rows with one weight read, its warps holding NT = 4 or 8 tiles of
// 8 tokens (MT·NT·4 accumulators a lane) and its rings a group of every
// token. The kernel is gemvMMAH's; only the tiles, the ring's token slots
// and the launch's blocks change, and the token chunks of tiles past the
// step's rows are not copied (a 64-row block at a 32-row step).
//
// Lowering runs a wide arm at steps wider than the large arm's BatchRows
// (Launch.Wide) only where the tunedb names one for the product's
// GEMVWideClass, or LowerOptions.Arms.GEMVWide does: untuned, a program's
// kernels are those of the 16-row arm, as before.

// DefaultXQHalfWideArm is the wide arm of 64 rows a block: 32 weight rows
// a block (two tiles a warp), eight warps splitting K, rings of four
// stages of one group. Its blocks take 152 KiB of shared memory over Q4_K
// (8 warps × (4 slots × (32·16 + 64·64) + 2·32·16 bytes of heads)) and 158
// KiB over Q6_K (rows of 28 bytes, heads of 4), one block a
// multiprocessor; a lane holds 2·8·4 = 64 accumulators. Not measured yet:
// no program runs it untuned.
var DefaultXQHalfWideArm = GEMVArm{Threads: 256, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 4, BatchRows: 64, RowsPerWarp: 2, Stages: 4}

// DefaultXQHalf32Arm is DefaultXQHalfWideArm with 32 rows a block: 88
// KiB (Q4_K) and 94 KiB (Q6_K) of shared memory, two blocks a
// multiprocessor, 32 accumulators a lane.
var DefaultXQHalf32Arm = GEMVArm{Threads: 256, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 4, BatchRows: 32, RowsPerWarp: 2, Stages: 4}

// wideBatch reports whether a is a wide arm: XQ 4 with 32 or 64 rows a
// block.
func (a GEMVArm) wideBatch() bool { return a.XQ == 4 && (a.BatchRows == 32 || a.BatchRows == 64) }

// wideMaxAcc is the most accumulators a lane of a wide arm holds
// (RowsPerWarp tiles × NT tiles × 4): with the fragments and the ring's
// addresses about 120 registers, within the 255 a thread may have.
const wideMaxAcc = 64

// wideMaxThreads is the most threads a block of a wide arm has: at 512,
// a thread may use 128 registers, fewer than wideMaxAcc accumulators and
// the rest need.
const wideMaxThreads = 256

// wideFits reports whether a wide arm's lanes have the registers for its
// accumulators (the shared memory is Validate's XQ 4 check).
func (a GEMVArm) wideFits() bool {
	return a.wideBatch() && a.Threads <= wideMaxThreads && a.rowsPerWarp()*((a.batchRows()+7)/8)*4 <= wideMaxAcc
}

// WideArms are the wide arms kernel-check and the scripts name: the 64-
// and 32-row defaults, and the 64-row arm with one tile of 16 weight rows
// a warp (twice the blocks, half the accumulators).
func WideArms() []GEMVArm {
	one := DefaultXQHalfWideArm
	one.RowsPerWarp = 0
	return []GEMVArm{DefaultXQHalfWideArm, DefaultXQHalf32Arm, one}
}

// GEMVWideClass is the shape class under which the tunedb keeps the wide
// arm (Launch.Wide: steps wider than the large arm's BatchRows) of the
// product of class.
func GEMVWideClass(class string) string { return class + "_wide" }

// GEMVWideSpaceFor is the gemv space of the wide arms of products with
// weights of type t (HalfTypes): XQ 4, 32 or 64 rows a block, one or two
// row sets and their split, one or two tiles a warp, rings of two or four
// stages. Its default is DefaultXQHalfArm (16 rows a block), the
// baseline a wide arm must beat (untuned those steps run
// DefaultXQHalfWideArm, Arms.GEMVWide):
// every XQ 4 arm is a valid point, and a pick of a 16-row arm leaves the
// steps to the large arm (lowering runs wide arms only).
func GEMVWideSpaceFor(t dtype.Type) Space {
	return classGEMVSpace(t, map[string][]int{"threads": {128, 256}, "rows_per_block": {1, 2}, "unroll": {1, 2}, "layout": {1}, "shared_x": {1},
		"xq": {4}, "batch_rows": {32, 64}, "rows_per_warp": {0, 2}, "stages": {2, 4}}, DefaultXQHalfArm,
		func(a GEMVArm) bool { return a.XQ == 4 }, errNotWide)
}

// errNotWide refuses an arm of the wide space that is not an f16 one.
var errNotWide = fmt.Errorf("%w: gemv wide space: want an XQ 4 arm", ErrUnsupported)

// wideArm returns the arm of the launches of steps wider than large's
// BatchRows of the product of class, large an XQ 4 arm: the tunedb's pick
// for GEMVWideClass(class), else Arms.GEMVWide (DefaultXQHalfWideArm
// untuned). None in
// the batch-invariant configuration (a wide block splits K otherwise than
// large's, so a row's sums would depend on its step's width), nor where
// the program never has that many rows.
func (l *lowerer) wideArm(class string, large GEMVArm) (GEMVArm, bool) {
	if large.XQ != 4 || l.o.BatchInvariant {
		return GEMVArm{}, false
	}
	a := l.arms.GEMVWide
	if p, ok := l.picked("gemv", GEMVWideClass(class)); ok {
		a = GEMVArmOf(p)
	}
	if !a.wideBatch() || a.BatchRows <= large.batchRows() || l.o.MaxTokens < wideFrom(large) {
		return GEMVArm{}, false
	}
	return a, true
}

// wideFrom is the step rows from which a product whose large arm is large
// runs its wide arm: more than one of large's blocks holds.
func wideFrom(large GEMVArm) int { return large.batchRows() + 1 }
