package check

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// MoERouterNorm is a router's product with the norm before the experts in
// its prologue (codegen.RouterNorm, what a decode program runs) over m
// tokens of a residual row of hidden: the logits against the CPU norm
// then product, and the normalised rows it writes for the experts against
// the CPU norm's. Its class is the router product's, so the arm autotune
// picks for it is the one lowering looks up (codegen.RouterArm); its
// space holds the float arms with the row in shared memory, the default
// codegen.DefaultRouterArm.
//
// With quant the kernel also writes the normalised rows quantised for the
// experts' int8 products, and the case runs XQuant on the rows it wrote
// after it: the two quantised rows must be the same bytes (else the error
// is +Inf).
func MoERouterNorm(shape string, experts, hidden int, eps float32, m int, quant bool, seed uint64) *Case {
	t := dtype.F32
	label := fmt.Sprintf("moe_router+norm×%d", m)
	if quant {
		label = fmt.Sprintf("moe_router+norm+xq×%d", m)
	}
	c := &Case{Family: "gemv", Label: label, Shape: shape, DType: "f32",
		Class: codegen.ProductClass(t, experts, hidden, false), Use: "router", Tol: 1e-4, seed: seed, K: hidden, N: experts}
	sp := codegen.GEMVSpaceFor(t).Narrowed(map[string][]int{"shared_x": {1}})
	sp.Default = codegen.DefaultRouterArm.Point()
	c.space = &sp
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		k, err := codegen.RouterNorm(t, experts, hidden, codegen.GEMVArmOf(arm), eps, quant)
		if err != nil || !quant {
			return one(k, err)
		}
		q, err := codegen.XQuant(hidden, codegen.Prologue{})
		if err != nil {
			return nil, err
		}
		return []*codegen.Kernel{k, q}, nil
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(t, experts, hidden, r.Uint64())
		if err != nil {
			return nil, err
		}
		x, nw := randn(r, m*hidden), randn(r, hidden)
		ref := lazy(func() ([2][]float32, error) {
			_, h := codegen.RefRMSNormAdd(hidden, eps, false, x, nil, nw)
			y, err := refMatMul(t, experts, hidden, W, h, m, nil, false)
			return [2][]float32{y, h}, err
		})
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				h, y := fbuf(make([]float32, m*hidden)), fbuf(make([]float32, m*experts))
				if !quant {
					return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m},
						Args: [][]Arg{{b(&Buf{Data: W}), b(fbuf(x)), b(fbuf(nw)), b(h), b(y), s(m)}}, Outs: []*Buf{y, h}}, nil
				}
				xq1 := &Buf{Data: make([]byte, m*codegen.XQRowBytes(hidden))}
				xq2 := &Buf{Data: make([]byte, m*codegen.XQRowBytes(hidden))}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m},
					Args: [][]Arg{{b(&Buf{Data: W}), b(fbuf(x)), b(fbuf(nw)), b(h), b(xq1), b(y), s(m)}, {b(h), b(xq2), s(m)}},
					Outs: []*Buf{y, h, xq1, xq2}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, err := ref()
				if err != nil {
					return 0, err
				}
				if quant && !bytes.Equal(outs[2], outs[3]) {
					return math.Inf(1), nil // not XQuant's rows of what it wrote
				}
				return math.Max(codegen.RelErr(bytesF32(outs[0]), want[0]), codegen.RelErr(bytesF32(outs[1]), want[1])), nil
			},
		}, nil
	}
	return c
}
