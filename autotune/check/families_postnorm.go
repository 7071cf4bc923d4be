package check

import (
	"math/rand/v2"
	"strings"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// ProductPostNorm is a Gemma post-norm in the product before it
// (codegen.XQEnds.PostNorm, a one-sequence program's attention output and
// FFN down products): h = W1·a, and the block that finishes last adds
// rmsnorm(h)·pw into x and quantises the new x for the next norm's
// products, then that norm's product reading them (XQEnds.NormIn), as
// lowering chains them: x1 = x0 + rmsnorm(h, pw) and y = W2·rmsnorm(x1,
// nw), checked against the CPU products and norms (the worse of x1's and
// y's errors). The post-norm runs with the post-norm kernel's 256 threads
// (codegen.DefaultBlockArm); the arm is the product's (default: the
// untuned one-row arm), the next product's the untuned one-row arm.
func ProductPostNorm(shape, use string, t1 dtype.Type, n1, k1 int, t2 dtype.Type, n2 int, eps float32, seed uint64) *Case {
	e := codegen.XQEnds{PostNorm: true, PostNormEps: eps, PostNormThreads: codegen.DefaultBlockArm.Threads}
	class := codegen.ProductClass(t1, n1, k1, false) + "_pn_" + codegen.ProductClass(t2, n2, n1, false)
	c := &Case{Family: "gemv", Label: "gemv+post-norm/" + use, Shape: shape, DType: strings.ToLower(t1.String()), Class: class,
		Use: use, Tol: 1e-4, seed: seed, K: k1}
	next := codegen.DefaultXQGlobalOneArm
	sp := codegen.GEMVSpaceFor(t1)
	sp.Default = codegen.DefaultXQGlobalOneArm.Point()
	c.space = &sp
	c.ExtraArms = []codegen.Point{codegen.DefaultXQGlobalOneArm.Split(2).Point()} // K split over two warps
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return xqChain(k1, codegen.Prologue{},
			xqProduct{t: t1, n: n1, k: k1, arm: codegen.GEMVArmOf(arm), e: e},
			xqProduct{t: t2, n: n2, k: n1, arm: next, e: codegen.XQEnds{NormIn: true, NormEps: eps}})
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W1, W2, w1, w2, err := chainWeights(r, t1, n1, k1, t2, n2)
		if err != nil {
			return nil, err
		}
		a, x0, pw, nw := randn(r, k1), randn(r, n1), randn(r, n1), randn(r, n1)
		ref := lazy(func() (chainRefs, error) {
			h, err := refMatMul(t1, n1, k1, W1, a, 1, nil, false)
			if err != nil {
				return chainRefs{}, err
			}
			x1 := codegen.RefPostNormAdd(n1, eps, x0, h, pw)
			_, xin := codegen.RefRMSNormAdd(n1, eps, false, x1, nil, nw)
			y, err := refMatMul(t2, n2, n1, W2, xin, 1, nil, false)
			return chainRefs{x1, y}, err
		})
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, wb1, wb2, err := chainParts(c, w1, w2, arm, next.Point())
				if err != nil {
					return nil, err
				}
				xa := &Buf{Data: make([]byte, codegen.XQRowBytes(k1))}
				xo := &Buf{Data: make([]byte, codegen.XQRowBytes(n1))}
				h, x1, y := fbuf(make([]float32, n1)), fbuf(x0), fbuf(make([]float32, n2))
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: 1}, Args: [][]Arg{
					{b(fbuf(a)), b(xa), s(1)},
					{b(&Buf{Data: wb1}), b(xa), b(h), s(1), b(x1), b(fbuf(pw)), b(fbuf(nw)), b(xo), b(ibuf(make([]int32, 1)))},
					{b(&Buf{Data: wb2}), b(xo), b(y), s(1)},
				}, Outs: []*Buf{y, x1}}, nil
			},
			compare: chainCompare(ref),
		}, nil
	}
	return c
}
