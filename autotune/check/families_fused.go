package check

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// The products whose epilogues do the next op's work: the norm after a
// residual product, the SwiGLU after a gate/up product, RoPE and the KV
// write after the QKV product.

// ProductNormAfter is a residual product of m rows whose epilogue also
// quantises the new residual rows for the norm after it
// (codegen.XQEnds.QuantOut), then that norm's product reading them
// (XQEnds.NormIn), as lowering chains an attention output or FFN down
// product and the next layer's QKV or gate/up: x1 = x0 + W1·a and
// y = W2·rmsnorm(x1, nw), checked against the CPU add, norm and products
// (the worse of x1's and y's errors). The arm is the residual product's;
// the norm's product takes the untuned one-row (m = 1) or batch arm.
func ProductNormAfter(shape, use string, t1 dtype.Type, n1, k1 int, t2 dtype.Type, n2, m int, eps float32, seed uint64) *Case {
	class := codegen.ProductClass(t1, n1, k1, true) + "_qo_" + codegen.ProductClass(t2, n2, n1, false)
	c := &Case{Family: "gemv", Label: "gemv+quant-out/" + use, Shape: shape, DType: strings.ToLower(t1.String()), Class: class,
		Use: use, Tol: 1e-4, seed: seed, K: k1}
	next := codegen.DefaultXQGlobalOneArm
	def := codegen.DefaultXQGlobalOneArm
	if m > 1 {
		next, def = codegen.DefaultXQGlobalBatchArm, codegen.DefaultXQGlobalBatchArm
		def.RowsPerWarp = 4 // whole groups of 32 rows a block, as lowering takes it
	}
	sp := codegen.GEMVSpaceFor(t1)
	sp.Default = def.Point()
	c.space = &sp
	if m == 1 {
		c.ExtraArms = []codegen.Point{def.Split(2).Point()} // K split over two warps, as lowering splits products of few blocks (GEMVSplitBlocks)
	}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return xqChain(k1, codegen.Prologue{},
			xqProduct{t: t1, n: n1, k: k1, residual: true, arm: codegen.GEMVArmOf(arm), e: codegen.XQEnds{QuantOut: true}},
			xqProduct{t: t2, n: n2, k: n1, arm: next, e: codegen.XQEnds{NormIn: true, NormEps: eps}})
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W1, W2, w1, w2, err := chainWeights(r, t1, n1, k1, t2, n2)
		if err != nil {
			return nil, err
		}
		a, x0, nw := randn(r, m*k1), randn(r, m*n1), randn(r, n1)
		ref := lazy(func() (chainRefs, error) {
			x1, err := refMatMul(t1, n1, k1, W1, a, m, x0, false)
			if err != nil {
				return chainRefs{}, err
			}
			_, xin := codegen.RefRMSNormAdd(n1, eps, false, x1, nil, nw)
			y, err := refMatMul(t2, n2, n1, W2, xin, m, nil, false)
			return chainRefs{x1, y}, err
		})
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, wb1, wb2, err := chainParts(c, w1, w2, arm, next.Point())
				if err != nil {
					return nil, err
				}
				xa := &Buf{Data: make([]byte, m*codegen.XQRowBytes(k1))}
				xo := &Buf{Data: make([]byte, m*codegen.XQRowBytes(n1))}
				x1, y := fbuf(x0), fbuf(make([]float32, m*n2))
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m}, Args: [][]Arg{
					{b(fbuf(a)), b(xa), s(m)},
					{b(&Buf{Data: wb1}), b(xa), b(x1), s(m), b(fbuf(nw)), b(xo)},
					{b(&Buf{Data: wb2}), b(xo), b(y), s(m)},
				}, Outs: []*Buf{y, x1}}, nil
			},
			compare: chainCompare(ref),
		}, nil
	}
	return c
}

// chainRefs are a chained pair's references: the residual rows x1 the
// first product's epilogue leaves and the second product's output y.
type chainRefs struct{ x1, y []float32 }

// chainCompare compares a chained pair's outputs (y, then x1) with ref's:
// the worse error.
func chainCompare(ref func() (chainRefs, error)) func(outs [][]byte) (float64, error) {
	return func(outs [][]byte) (float64, error) {
		want, err := ref()
		if err != nil {
			return 0, err
		}
		return max(codegen.RelErr(bytesF32(outs[0]), want.y), codegen.RelErr(bytesF32(outs[1]), want.x1)), nil
	}
}

// chainWeights returns a chained pair's random weights (the first
// product's n1×k1 of t1, the second's n2×n1 of t2) and their layouts for
// an arm (armWeights).
func chainWeights(r *rand.Rand, t1 dtype.Type, n1, k1 int, t2 dtype.Type, n2 int) (W1, W2 []byte, w1, w2 func(codegen.Point) ([]byte, error), err error) {
	if W1, err = randWeights(t1, n1, k1, r.Uint64()); err != nil {
		return nil, nil, nil, nil, err
	}
	if W2, err = randWeights(t2, n2, n1, r.Uint64()); err != nil {
		return nil, nil, nil, nil, err
	}
	return W1, W2, armWeights(t1, n1, k1, W1), armWeights(t2, n2, n1, W2), nil
}

// chainParts returns case c's kernels for arm and the weights of a chained
// pair's products: the first's laid out for arm, the second's for next.
func chainParts(c *Case, w1, w2 func(codegen.Point) ([]byte, error), arm, next codegen.Point) (ks []*codegen.Kernel, wb1, wb2 []byte, err error) {
	if ks, err = c.Kernels(arm); err != nil {
		return nil, nil, nil, err
	}
	if wb1, err = w1(arm); err != nil {
		return nil, nil, nil, err
	}
	if wb2, err = w2(next); err != nil {
		return nil, nil, nil, err
	}
	return ks, wb1, wb2, nil
}

// xqLaunch is the launch of an XQ 2 or 3 product's kernels (xqKernels) over
// m rows of k: XQuant from x (with the norm weight nw, if not nil) into
// a shared buffer of quantised rows, then the product from it into y.
func xqLaunch(ks []*codegen.Kernel, m, k int, x, nw *Buf, wb []byte, y *Buf) *Launch {
	xq := &Buf{Data: make([]byte, m*max(codegen.XQRowBytes(k), codegen.XHRowBytes(k)))} // XQuant's rows or XHalf's
	qa := []Arg{b(x), b(xq), s(m)}
	if nw != nil {
		qa = []Arg{b(x), b(nw), b(xq), s(m)}
	}
	return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m},
		Args: [][]Arg{qa, {b(&Buf{Data: wb}), b(xq), b(y), s(m)}}, Outs: []*Buf{y}}
}

// ProductSwiGLUOut is a gate/up product of m rows after a norm that
// computes the SwiGLU and quantises it for the down product in its
// epilogue (codegen.XQEnds.SwiGLUOut, the [gate | up] rows taken in pairs of 32 through codegen.GateUpRow), then the
// down product reading them, as lowering chains them:
// y = y0 + Wd·swiglu(Wgu·rmsnorm(x, nw)), checked against the CPU norm,
// products and SwiGLU. With gelu the gated unit is Gemma's GeGLU
// (codegen.XQEnds.GeLU), checked against codegen.RefGeGLU. The arm is the gate/up product's (default: the
// untuned one-row arm with pairs of 32 rows a block); the down product
// takes the untuned one-row (m = 1) or batch arm.
func ProductSwiGLUOut(shape string, t dtype.Type, ffn, k int, td dtype.Type, m int, eps float32, gelu bool, seed uint64) *Case {
	n := 2 * ffn
	unit, tag, ref := "swiglu", "_so_", codegen.RefSwiGLU
	if gelu {
		unit, tag, ref = "geglu", "_go_", codegen.RefGeGLU
	}
	class := codegen.ProductClass(t, n, k, false) + tag + codegen.ProductClass(td, k, ffn, true)
	c := &Case{Family: "gemv", Label: "gemv+" + unit + "-out/gate_up→down", Shape: shape, DType: strings.ToLower(t.String()), Class: class,
		Use: "gate_up", Tol: 1e-4, seed: seed, K: k}
	e := codegen.XQEnds{NormIn: true, NormEps: eps, SwiGLUOut: true, GeLU: gelu}
	next, def := codegen.DefaultXQGlobalOneArm, codegen.DefaultXQGlobalOneArm
	if m > 1 {
		next, def = codegen.DefaultXQGlobalBatchArm, codegen.DefaultXQGlobalBatchArm
	}
	def, _ = codegen.FitQuantOut(def, n, e)
	def.BatchRows = min(def.BatchRows, 8) // twice the warps: half the activation rows
	sp := codegen.GEMVSpaceFor(t)
	sp.Default = def.Point()
	c.space = &sp
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return xqChain(k, codegen.Prologue{Kind: codegen.ProNorm, Eps: eps},
			xqProduct{t: t, n: n, k: k, arm: codegen.GEMVArmOf(arm), e: e},
			xqProduct{t: td, n: k, k: ffn, residual: true, arm: next})
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(t, n, k, r.Uint64())
		if err != nil {
			return nil, err
		}
		Wd, err := randWeights(td, k, ffn, r.Uint64())
		if err != nil {
			return nil, err
		}
		x, nw, y0 := randn(r, m*k), randn(r, k), randn(r, m*k)
		ref := lazy(func() ([]float32, error) {
			_, xin := codegen.RefRMSNormAdd(k, eps, false, x, nil, nw)
			gu, err := refMatMul(t, n, k, W, xin, m, nil, false)
			if err != nil {
				return nil, err
			}
			return refMatMul(td, k, ffn, Wd, ref(ffn, gu), m, y0, false)
		})
		packed := lazy(func() ([]byte, error) { return codegen.Repack(t, n, k, W) })
		wd := armWeights(td, k, ffn, Wd)
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				wb, err := packed()
				if err != nil {
					return nil, err
				}
				wdb, err := wd(next.Point())
				if err != nil {
					return nil, err
				}
				xa := &Buf{Data: make([]byte, m*codegen.XQRowBytes(k))}
				xo := &Buf{Data: make([]byte, m*codegen.XQRowBytes(ffn))}
				y := fbuf(y0)
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m}, Args: [][]Arg{
					{b(fbuf(x)), b(fbuf(nw)), b(xa), s(m)},
					{b(&Buf{Data: wb}), b(xa), b(xo), s(m)},
					{b(&Buf{Data: wdb}), b(xo), b(y), s(m)},
				}, Outs: []*Buf{y}}, nil
			},
			compare: relErrTo(ref),
		}, nil
	}
	return c
}

// relErrTo compares a case's first output with the reference ref computes.
func relErrTo(ref func() ([]float32, error)) func(outs [][]byte) (float64, error) {
	return func(outs [][]byte) (float64, error) {
		want, err := ref()
		if err != nil {
			return 0, err
		}
		return codegen.RelErr(bytesF32(outs[0]), want), nil
	}
}

// armWeights returns the weight bytes a GEMV arm reads: W in the file's
// layout, or repacked (once, on first use) for layout-1 arms; the CPU
// reference always reads the file's layout.
func armWeights(t dtype.Type, n, k int, W []byte) func(arm codegen.Point) ([]byte, error) {
	packed := lazy(func() ([]byte, error) { return codegen.Repack(t, n, k, W) })
	return func(arm codegen.Point) ([]byte, error) {
		if codegen.GEMVArmOf(arm).Layout == 1 {
			return packed()
		}
		return W, nil
	}
}

// ProductRope is a QKV product of m rows after a norm whose epilogue does
// RopeKV's work (codegen.XQEnds.Rope) for its n columns from col0 of the
// fused [q | k | v] rows of rs, as lowering gives a decode step's QKV
// products with LowerOptions.RopeInProduct. The product writes its
// columns at the start of rows of rs.QKVStride() floats (the rest must
// stay as it was): q columns rotated, k and v as computed; the k columns
// rotated and the v columns go into the cache rows slot[token], the other
// cache values must stay. Checked against the CPU norm, product and
// RefRopeKV (the worse of the row's and the caches' errors). The arm is the
// product's (default: the untuned one-row arm, the batch arm for m > 1).
func ProductRope(shape, use string, t dtype.Type, rs codegen.RopeShape, n, col0, k, m int, eps float32, seed uint64) *Case {
	return productRope(shape, use, t, rs, n, col0, k, m, eps, seed, ropeEnd{})
}

// ProductHeadRope is ProductRope with the work done for whole heads by
// the block that finishes a head last (codegen.XQEnds.HeadRope, NeoX pairs
// too), and with norm the layer's q/k head norms before the rotation
// (HeadNorm: RopeKVNorm's work, checked against RefHeadRMSNorm then
// RefRopeKV). It also checks that the launch leaves its tickets zero. The
// arm is the untuned one-row arm (one-sequence programs), at m activation
// rows a ticket each.
func ProductHeadRope(shape, use string, t dtype.Type, rs codegen.RopeShape, n, col0, k, m int, eps float32, norm bool, seed uint64) *Case {
	return productRope(shape, use, t, rs, n, col0, k, m, eps, seed, ropeEnd{head: true, norm: norm})
}

// ropeEnd is the RoPE epilogue a productRope case checks: XQEnds.Rope, or
// HeadRope (with norm, HeadNorm).
type ropeEnd struct{ head, norm bool }

func productRope(shape, use string, t dtype.Type, rs codegen.RopeShape, n, col0, k, m int, eps float32, seed uint64, re ropeEnd) *Case {
	stride := rs.QKVStride()
	tag, label := "rope", "gemv+rope/"
	e := codegen.XQEnds{NormIn: true, NormEps: eps, Rope: !re.head, RopeShape: rs, RopeCol0: col0}
	if re.head {
		tag, label = "hrope", "gemv+head-rope/"
		e.HeadRope, e.HeadNorm, e.HeadNormEps = true, re.norm, eps
		if re.norm {
			tag, label = "hropen", "gemv+head-norm-rope/"
		}
	}
	class := fmt.Sprintf("%s_%s_c%d", codegen.ProductClass(t, n, k, false), tag, col0)
	c := &Case{Family: "gemv", Label: label + use, Shape: shape, DType: strings.ToLower(t.String()), Class: class,
		Use: use, Tol: 1e-4, seed: seed, K: k}
	def := codegen.DefaultXQGlobalOneArm
	if m > 1 && !re.head {
		def = codegen.DefaultXQGlobalBatchArm
	}
	sp := codegen.GEMVSpaceFor(t)
	sp.Default = def.Point()
	c.space = &sp
	if def == codegen.DefaultXQGlobalOneArm {
		c.ExtraArms = []codegen.Point{def.Split(2).Point()} // K split over two warps, as lowering splits products of few blocks (GEMVSplitBlocks)
	}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		pro := codegen.Prologue{Kind: codegen.ProNorm, Eps: eps}
		return xqChain(k, pro, xqProduct{t, n, k, false, codegen.GEMVArmOf(arm), e, stride})
	}
	units := rs.Heads + 2*rs.HeadsKV
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(t, n, k, r.Uint64())
		if err != nil {
			return nil, err
		}
		x, nw, yinit := randn(r, m*k), randn(r, k), randn(r, m*stride)
		ro, err := newRopeOperands(r, rs, m)
		if err != nil {
			return nil, err
		}
		kvw, kc, vc := rs.HeadsKV*rs.HeadDim, ro.kc, ro.vc
		wq, wk := randn(r, rs.HeadDim), randn(r, rs.HeadDim)
		// want: the check's rows (the product's columns first), then the caches
		ref := lazy(func() ([3][]float32, error) {
			_, xin := codegen.RefRMSNormAdd(k, eps, false, x, nil, nw)
			prod, err := refMatMul(t, n, k, W, xin, m, nil, false)
			if err != nil {
				return [3][]float32{}, err
			}
			qkv := make([]float32, m*stride)
			for i := range m {
				copy(qkv[i*stride+col0:i*stride+col0+n], prod[i*n:(i+1)*n])
			}
			raw := qkv
			if re.norm {
				hs := codegen.HeadNormShape{Heads: rs.Heads, HeadDim: rs.HeadDim, Stride: stride, Heads2: rs.HeadsKV, Eps: eps}
				qkv = codegen.RefHeadRMSNorm(hs, qkv, wq, wk)
			}
			qo, ko, vo := codegen.RefRopeKV(rs, qkv, ro.pos, ro.slot, ro.inv, kc, vc)
			for i := range m {
				// the row keeps k and v as the product computed them (RopeKVNorm
				// normalises k into the cache only)
				kq := i*stride + rs.Heads*rs.HeadDim
				copy(qo[kq:(i+1)*stride], raw[kq:(i+1)*stride])
			}
			rows := append([]float32(nil), yinit...)
			for i := range m {
				copy(rows[i*stride:i*stride+n], qo[i*stride+col0:i*stride+col0+n])
			}
			// cache values of columns outside the product stay as they were
			kq := rs.Heads * rs.HeadDim
			for _, sl := range ro.slot {
				for j := range kvw {
					if c := kq + j; c < col0 || c >= col0+n {
						ko[int(sl)*kvw+j] = kc[int(sl)*kvw+j]
					}
					if c := kq + kvw + j; c < col0 || c >= col0+n {
						vo[int(sl)*kvw+j] = vc[int(sl)*kvw+j]
					}
				}
			}
			return [3][]float32{rows, ko, vo}, nil
		})
		weights := armWeights(t, n, k, W)
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				wb, err := weights(arm)
				if err != nil {
					return nil, err
				}
				y := fbuf(yinit)
				args, kb, vb := ro.args()
				xq := &Buf{Data: make([]byte, m*max(codegen.XQRowBytes(k), codegen.XHRowBytes(k)))} // XQuant's rows or XHalf's
				outs := []*Buf{y, kb, vb}
				if re.norm {
					args = append(args, b(fbuf(wq)), b(fbuf(wk)))
				}
				if re.head {
					tk := ibuf(make([]int32, m*units))
					args, outs = append(args, b(tk)), append(outs, tk)
				}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m}, Args: [][]Arg{
					{b(fbuf(x)), b(fbuf(nw)), b(xq), s(m)},
					append([]Arg{b(&Buf{Data: wb}), b(xq), b(y), s(m)}, args...),
				}, Outs: outs}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, err := ref()
				if err != nil {
					return 0, err
				}
				if len(outs) > 3 && slices.ContainsFunc(outs[3], func(v byte) bool { return v != 0 }) {
					return math.Inf(1), nil // left a ticket counter nonzero
				}
				got := bytesF32(outs[0])
				for i := range m {
					for j := i*stride + n; j < (i+1)*stride; j++ {
						if got[j] != yinit[j] {
							return math.Inf(1), nil // wrote outside its columns
						}
					}
				}
				gk, gv, err := ro.read(rs.Cache, outs[1], outs[2])
				if err != nil {
					return 0, err
				}
				// the errors over what the product wrote (the rest is compared exactly)
				var gy, wy, gc, wc []float32
				for i := range m {
					gy, wy = append(gy, got[i*stride:i*stride+n]...), append(wy, want[0][i*stride:i*stride+n]...)
				}
				for i := range gk {
					if gk[i] != kc[i] || want[1][i] != kc[i] {
						gc, wc = append(gc, gk[i]), append(wc, want[1][i])
					}
					if gv[i] != vc[i] || want[2][i] != vc[i] {
						gc, wc = append(gc, gv[i]), append(wc, want[2][i])
					}
				}
				e := codegen.RelErr(gy, wy)
				if len(wc) > 0 {
					e = math.Max(e, codegen.RelErr(gc, wc))
				}
				return e, nil
			},
		}, nil
	}
	return c
}
