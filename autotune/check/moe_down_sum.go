package check

import (
	"math"
	"math/rand/v2"

	"github.com/memra-ai/memra/codegen"
)

// MoEDownSumQuant is MoEDownSum whose int8 product also quantises the new
// residual row for the next norm's products in the block that finishes
// last (codegen.MoEShape.QuantNext, a one-sequence program's): the
// residual row must be the reference's within the int8 tolerance (else
// the error is +Inf), and the quantised row, dequantised, the reference's
// row times the next norm's weight within it too (its groups' int8 sums
// exact). Int8 one-row arms only: the default and 16 rows a block.
func MoEDownSumQuant(shape string, dn codegen.MoEShape, seed uint64) *Case {
	return moeDownSumCase(shape, dn, true, seed)
}

// moeDownSumCase is MoEDownSum, or with quant MoEDownSumQuant.
func moeDownSumCase(shape string, dn codegen.MoEShape, quant bool, seed uint64) *Case {
	p := dn
	p.Sum, p.QuantNext = true, quant
	label := "moe_gemv/down_sum"
	if quant {
		label += "+quant"
	}
	c := oneRowCase(shape, label, "down", p, true, seed)
	if quant {
		c.Tol = codegen.XQTol
		a := codegen.DefaultMoEOneArm
		a.XQ = 1
		sp := c.Space()
		sp.Default = a.Point()
		c.space = &sp
		a.RowsPerBlock = 16
		c.ExtraArms = []codegen.Point{a.Point()}
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(p.Type, p.Experts*p.N, p.K, r.Uint64())
		if err != nil {
			return nil, err
		}
		ids, _ := moeRouting(r, p.Experts, p.Used, 1)
		_, wts := codegen.RefMoERoute(p.Used+1, p.Used, true, randn(r, p.Used+1))
		x, y0 := randn(r, p.Used*p.K), randn(r, p.N)
		var nw []float32
		if quant {
			nw = randn(r, p.N)
		}
		packed := lazy(func() ([]byte, error) { return codegen.Repack(p.Type, p.Experts*p.N, p.K, W) })
		ref := lazy(func() ([]float32, error) {
			d, err := refMoEGEMV(dn, W, nil, x, ids)
			if err != nil {
				return nil, err
			}
			return codegen.RefMoESum(p.N, p.Used, d, wts, y0), nil
		})
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				y, wb := fbuf(y0), W
				if codegen.MoEArmOf(arm).XQ == 1 {
					if wb, err = packed(); err != nil {
						return nil, err
					}
				}
				args := []Arg{b(&Buf{Data: wb}), b(fbuf(x)), b(ibuf(ids)), b(fbuf(wts)), b(y), s(1)}
				outs := []*Buf{y}
				if quant { // the next norm's weight, its quantised row, a zero ticket
					xo := &Buf{Data: make([]byte, codegen.XQRowBytes(p.N))}
					args, outs = append(args, b(fbuf(nw)), b(xo), b(ibuf(make([]int32, 1)))), append(outs, xo)
				}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: 1}, Args: [][]Arg{args}, Outs: outs}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, err := ref()
				if err != nil {
					return 0, err
				}
				e := codegen.RelErr(bytesF32(outs[0]), want)
				if !quant {
					return e, nil
				}
				if e > codegen.XQTol {
					return math.Inf(1), nil
				}
				scaled := make([]float32, len(want))
				for i, v := range want {
					scaled[i] = v * nw[i]
				}
				return xqRowsErr(outs[1], p.N, scaled), nil
			},
		}, nil
	}
	return c
}
