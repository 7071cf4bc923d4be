package check

import (
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// OrderedCheckRows are the rows of kernel-check's ordered cases: one
// row (the one-row arms' time, the one-tile arms' question), a
// speculative verify step's (5) and a small batch's (8), where the XQ 2
// batch kernel beat every ordered arm on an H100 (session 27), the first
// step that takes the ordered arm, a ragged one and the widest.
var OrderedCheckRows = []int{1, 5, 8, 16, 37, 64}

// oneTileArms are int8 tensor-core arms of one tile of 8 activation rows
// (NT 1), timed beside the ordered ones from one row: whether one XQ 3
// geometry of fixed K split could serve every width (its sums depend on
// the split, not on the tokens a block takes) at the one-row kernel's
// speed, and 2 to 8 rows at nearly one row's cost.
var oneTileArms = []codegen.GEMVArm{
	{Threads: 256, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 8},
	{Threads: 512, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 8},
	{Threads: 256, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 8, RowsPerWarp: 2},
	{Threads: 512, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 8, Stages: 4},
	{Threads: 512, RowsPerBlock: 1, Unroll: 2, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 8, RowsPerWarp: 2, Stages: 2},
	{Threads: 256, RowsPerBlock: 1, Unroll: 2, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 8, Stages: 4},
}

// smallBatchArms are XQ 2 batch arms of fewer activation rows a block
// (BatchRows 8 and 4) and more weight rows a warp than the space's default
// (16 and 2): a verify step's 5 rows and a small batch's run the XQ 2
// batch kernel in the int8 class, and its default arm holds 16 rows'
// sums while 5 are used; more weight rows a warp read each activation
// unit for more of them. Their sums are in the XQ 2 order of one split,
// so any of them could serve the class below 16 rows.
var smallBatchArms = []codegen.GEMVArm{
	{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 8, RowsPerWarp: 2},
	{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 8, RowsPerWarp: 4},
	{Threads: 256, RowsPerBlock: 8, Unroll: 2, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 8, RowsPerWarp: 4},
	{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 4, RowsPerWarp: 4},
	{Threads: 512, RowsPerBlock: 16, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 8, RowsPerWarp: 4},
}

// prefetchArms are the space's default batch arm and smallBatchArms with
// codegen.GEMVArm.Prefetch: the same sums, each activation row's loads
// issued before the row before it takes its dots.
func prefetchArms() []codegen.GEMVArm {
	var out []codegen.GEMVArm
	for _, a := range append([]codegen.GEMVArm{codegen.DefaultXQGlobalBatchArm}, smallBatchArms...) {
		a.Prefetch = 1
		out = append(out, a)
	}
	return out
}

// orderedCheckCases are kernel-check's cases of the int8 invariant
// class's products at s (codegen.LowerOptions.InvariantInt8): the QKV
// product and the FFN-down product with its residual add at
// OrderedCheckRows, each with the XQ 2 batch arm the class runs below 16
// rows for unsplit products (the space's default, the time to beat), the
// ordered tensor-core arm lowering runs from 16 rows, its pipelined form,
// its form in the order of XQ 2 kernels split over two warps (arms of 8
// and 32 tokens a block lost at every width on an H100, docs/PERFORMANCE.md
// session 27), the XQ 2 one-row arm unsplit and split over two warps,
// oneTileArms, smallBatchArms and prefetchArms. Nil for a type the ordered
// arm does not cover.
func orderedCheckCases(s codegen.Shape, t dtype.Type, seed uint64) []*Case {
	if !codegen.OrderedType(t) {
		return nil
	}
	qkv := (s.Heads + 2*s.HeadsKV) * s.HeadDim
	var cs []*Case
	for _, m := range OrderedCheckRows {
		cs = append(cs, productArms(Product(s.Name, "gemv", "qkv", t, qkv, s.Hidden, m, false, seed), "gemv-ordered", m, codegen.GEMVBatchClass, codegen.GEMVBatchSpaceFor(t)),
			productArms(Product(s.Name, "gemv", "down", t, s.Hidden, s.FFN, m, true, seed), "gemv-ordered", m, codegen.GEMVBatchClass, codegen.GEMVBatchSpaceFor(t)))
	}
	arms := []codegen.GEMVArm{codegen.DefaultXQOrderedArm, codegen.DefaultXQOrderedPipeArm, codegen.DefaultXQOrderedSplitArm,
		codegen.DefaultXQGlobalOneArm, codegen.DefaultXQGlobalOneArm.Split(2)}
	arms = append(append(append(arms, oneTileArms...), smallBatchArms...), prefetchArms()...)
	return withArms(arms, cs...)
}
