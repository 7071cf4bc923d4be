package check

import (
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// LargeTuneTokens is the rows at which the large arms of the repacked
// products (Launch.Large) are tuned: the rows of one tensor-core block.
const LargeTuneTokens = 16

// ProductLarge is the decode product over m activation rows as the large
// arm of a repacked product runs it (Launch.Large): class
// codegen.GEMVLargeClass of the product's, searched over
// codegen.GEMVLargeSpaceFor (the f16 and int8 tensor-core arms), whose
// baseline is the arm lowering runs untuned.
func ProductLarge(shape, use string, t dtype.Type, n, k, m int, residual bool, seed uint64) *Case {
	return productArms(Product(shape, "gemv", use, t, n, k, m, residual, seed), "gemv-large", m, codegen.GEMVLargeClass, codegen.GEMVLargeSpaceFor(t))
}
