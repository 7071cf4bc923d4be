package check

import (
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// WideTuneTokens is the rows at which the wide arms of the f16 products
// (Launch.Wide) are tuned: the widest decode graph of a 64-sequence
// server, where one weight read serves every row.
const WideTuneTokens = 64

// ProductWide is the decode product over m activation rows as the wide arm
// of an f16 tensor-core product runs it (Launch.Wide, steps wider than the
// large arm's 16 rows): class codegen.GEMVWideClass of the product's,
// searched over codegen.GEMVWideSpaceFor, whose baseline is the 16-row
// arm (a pick of it turns the wide kernel off; untuned those steps run
// codegen.DefaultXQHalfWideArm). Nil where t or k has no f16 product.
func ProductWide(shape, use string, t dtype.Type, n, k, m int, residual bool, seed uint64) *Case {
	if !codegen.HalfProduct(t, k) {
		return nil
	}
	return productArms(Product(shape, "gemv", use, t, n, k, m, residual, seed), "gemv-wide", m, codegen.GEMVWideClass, codegen.GEMVWideSpaceFor(t))
}

// wideCheckCases are kernel-check's cases of the wide arms at s: the QKV
// and gate/up products (the FFN-down product with its residual add) at 32
// and 64 rows, each with the 16-row default and codegen.WideArms, and a
// ragged step of 40 rows (a 64-row block with its last tiles empty).
func wideCheckCases(s codegen.Shape, t dtype.Type, seed uint64) []*Case {
	qkv := (s.Heads + 2*s.HeadsKV) * s.HeadDim
	var cs []*Case
	for _, m := range []int{32, 64} {
		cs = append(cs, ProductWide(s.Name, "qkv", t, qkv, s.Hidden, m, true, seed), ProductWide(s.Name, "down", t, s.Hidden, s.FFN, m, true, seed))
	}
	cs = append(cs, ProductWide(s.Name, "gate_up", t, 2*s.FFN, s.Hidden, 40, false, seed))
	return withArms(codegen.WideArms(), cs...)
}
