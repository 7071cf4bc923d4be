package check

import (
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// SmallTuneTokens is the rows at which the small-row arms of the f16
// products (codegen.GEMVSmallClass: the kernel of steps of up to 16 rows,
// and of every width in the batch-invariant configuration) are tuned: a
// speculative verify step of a draft of four tokens. An arm of 8 rows a
// block takes about the same time for 1 to 8 rows (its weight decoding
// and its one tile of tokens do not depend on them); kernel-check runs
// them at 1, 2, 5 and 8 (SmallCheckRows).
const SmallTuneTokens = 5

// SmallCheckRows are the step rows of kernel-check's small-row cases.
var SmallCheckRows = []int{1, 2, 5, 8}

// ProductSmall is the decode product over m activation rows as the f16
// kernel of steps of up to 16 rows runs it (Launch.Large): class
// codegen.GEMVSmallClass of the product's, searched over
// codegen.GEMVSmallSpaceFor, whose baseline is codegen.DefaultXQHalfArm
// (what those steps run untuned). Nil where t or k has no f16 product.
func ProductSmall(shape, use string, t dtype.Type, n, k, m int, residual bool, seed uint64) *Case {
	if !codegen.HalfProduct(t, k) {
		return nil
	}
	return productArms(Product(shape, "gemv", use, t, n, k, m, residual, seed), "gemv-small", m, codegen.GEMVSmallClass, codegen.GEMVSmallSpaceFor(t))
}

// smallCheckCases are kernel-check's cases of the small-row arms at s:
// the QKV product and the FFN-down product with its residual add at
// SmallCheckRows rows, each with the 16-row default and
// codegen.SmallArms (8 rows a block: 1, 2 and 5 rows leave it ragged).
func smallCheckCases(s codegen.Shape, t dtype.Type, seed uint64) []*Case {
	qkv := (s.Heads + 2*s.HeadsKV) * s.HeadDim
	var cs []*Case
	for _, m := range SmallCheckRows {
		cs = append(cs, ProductSmall(s.Name, "qkv", t, qkv, s.Hidden, m, false, seed), ProductSmall(s.Name, "down", t, s.Hidden, s.FFN, m, true, seed))
	}
	return withArms(codegen.SmallArms(), cs...)
}
