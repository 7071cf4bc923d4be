package check

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// lazy returns a function computing f once.
func lazy[T any](f func() (T, error)) func() (T, error) {
	var once sync.Once
	var v T
	var err error
	return func() (T, error) {
		once.Do(func() { v, err = f() })
		return v, err
	}
}

func one(k *codegen.Kernel, err error) ([]*codegen.Kernel, error) {
	if err != nil {
		return nil, err
	}
	return []*codegen.Kernel{k}, nil
}

// RMSNorm is RMSNorm over tokens rows of dim, with the fused residual add
// when add (the product prologues lowering emits have none).
func RMSNorm(shape string, dim int, eps float32, add bool, tokens int, seed uint64) *Case {
	c := &Case{Family: "rmsnorm", Label: "rmsnorm", Shape: shape, DType: "f32", Class: codegen.RMSNormClass(dim, add), Tol: 1e-5, seed: seed}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.RMSNormAdd(dim, eps, add, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		x, d, w := randn(r, tokens*dim), randn(r, tokens*dim), randn(r, dim)
		ref := lazy(func() ([2][]float32, error) {
			xo, yo := codegen.RefRMSNormAdd(dim, eps, add, x, d, w)
			return [2][]float32{xo, yo}, nil
		})
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				xb, y := fbuf(x), fbuf(make([]float32, len(x)))
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: tokens},
					Args: [][]Arg{{b(xb), b(fbuf(d)), b(fbuf(w)), b(y), s(tokens)}}, Outs: []*Buf{xb, y}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, _ := ref()
				return math.Max(codegen.RelErr(bytesF32(outs[0]), want[0]), codegen.RelErr(bytesF32(outs[1]), want[1])), nil
			},
		}, nil
	}
	return c
}

// RopeKV is RoPE + KV-cache write for tokens tokens.
func RopeKV(shape string, rs codegen.RopeShape, tokens int, seed uint64) *Case {
	return ropeCase(shape, "rope_kv", rs, nil, tokens, seed)
}

// ropeCase is RopeKV's case, or with eps RopeKVNorm's: the q and k heads
// normalised first (random weights wq, wk; the reference is
// codegen.RefHeadRMSNorm's, then codegen.RefRopeKV's, with the row's k
// part as it was: the kernel leaves it so).
func ropeCase(shape, label string, rs codegen.RopeShape, eps *float32, tokens int, seed uint64) *Case {
	c := &Case{Family: "rope_kv", Label: label, Shape: shape, DType: strings.ToLower(rs.Cache.String()) + " cache", Tol: 1e-3, seed: seed,
		Class: codegen.RopeKVClass(rs)}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		if eps != nil {
			return one(codegen.RopeKVNorm(rs, *eps, codegen.BlockArmOf(arm)))
		}
		return one(codegen.RopeKV(rs, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		qkv := randn(r, tokens*rs.QKVStride())
		ro, err := newRopeOperands(r, rs, tokens)
		if err != nil {
			return nil, err
		}
		var wq, wk []float32
		if eps != nil {
			wq, wk = randn(r, rs.HeadDim), randn(r, rs.HeadDim)
		}
		ref := lazy(func() ([3][]float32, error) {
			in := qkv
			if eps != nil {
				hs := codegen.HeadNormShape{Heads: rs.Heads, Heads2: rs.HeadsKV, HeadDim: rs.HeadDim, Stride: rs.QKVStride(), Eps: *eps}
				in = codegen.RefHeadRMSNorm(hs, qkv, wq, wk)
			}
			qo, ko, vo := codegen.RefRopeKV(rs, in, ro.pos, ro.slot, ro.inv, ro.kc, ro.vc)
			q0, k0, st := rs.Heads*rs.HeadDim, (rs.Heads+rs.HeadsKV)*rs.HeadDim, rs.QKVStride()
			for t := range tokens { // the row's k part as it was
				copy(qo[t*st+q0:t*st+k0], qkv[t*st+q0:])
			}
			return [3][]float32{qo, ko, vo}, nil
		})
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				q := fbuf(qkv)
				args, k, v := ro.args()
				args = append([]Arg{b(q)}, args...)
				if eps != nil {
					args = append(args, b(fbuf(wq)), b(fbuf(wk)))
				}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: tokens}, Args: [][]Arg{append(args, s(tokens))}, Outs: []*Buf{q, k, v}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, _ := ref()
				gk, gv, err := ro.read(rs.Cache, outs[1], outs[2])
				if err != nil {
					return 0, err
				}
				return math.Max(codegen.RelErr(bytesF32(outs[0]), want[0]), math.Max(codegen.RelErr(gk, want[1]), codegen.RelErr(gv, want[2]))), nil
			},
		}, nil
	}
	return c
}

// ropeOperands are RopeKV's operands for tokens rows: random positions,
// cache rows 1, 4, 7, …, llama-3-like inverse frequencies, and random
// caches of (3·tokens + 2) rows in the cache type (bytes and values).
type ropeOperands struct {
	pos, slot []int32
	inv       []float32
	kcb, vcb  []byte
	kc, vc    []float32
	kvw       int // elements of a cache row
}

func newRopeOperands(r *rand.Rand, rs codegen.RopeShape, tokens int) (*ropeOperands, error) {
	o := &ropeOperands{pos: make([]int32, tokens), slot: make([]int32, tokens), inv: make([]float32, rs.RopeDim/2), kvw: rs.HeadsKV * rs.HeadDim}
	for i := range o.pos {
		o.pos[i], o.slot[i] = int32(r.IntN(8000)), int32(i*3+1)
	}
	for i := range o.inv {
		o.inv[i] = float32(math.Pow(500000, -2*float64(i)/float64(rs.RopeDim)))
	}
	n := (3*tokens + 2) * rs.HeadsKV * rs.HeadDim
	var err error
	if o.kcb, o.kc, err = cacheValues(rs.Cache, o.kvw, randn(r, n)); err != nil {
		return nil, err
	}
	if o.vcb, o.vc, err = cacheValues(rs.Cache, o.kvw, randn(r, n)); err != nil {
		return nil, err
	}
	return o, nil
}

// args are the kernel arguments pos, slot, inv_freq, kcache, vcache, with
// fresh copies of the caches (also returned, to read back).
func (o *ropeOperands) args() (args []Arg, kc, vc *Buf) {
	kc, vc = &Buf{Data: slices.Clone(o.kcb)}, &Buf{Data: slices.Clone(o.vcb)}
	return []Arg{b(ibuf(o.pos)), b(ibuf(o.slot)), b(fbuf(o.inv)), b(kc), b(vc)}, kc, vc
}

// read returns the values of the caches a launch wrote.
func (o *ropeOperands) read(cache dtype.Type, kb, vb []byte) (gk, gv []float32, err error) {
	if gk, err = codegen.DecodeCache(cache, o.kvw, kb); err != nil {
		return nil, nil, err
	}
	if gv, err = codegen.DecodeCache(cache, o.kvw, vb); err != nil {
		return nil, nil, err
	}
	return gk, gv, nil
}

// SwiGLU is silu(gate)·up over tokens rows.
func SwiGLU(shape string, ffn, tokens int, seed uint64) *Case {
	c := &Case{Family: "swiglu", Label: "swiglu", Shape: shape, DType: "f32", Class: codegen.SwiGLUClass(ffn), Tol: 1e-5, seed: seed}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.SwiGLU(ffn, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		gu := randn(r, tokens*2*ffn)
		ref := lazy(func() ([]float32, error) { return codegen.RefSwiGLU(ffn, gu), nil })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				out := fbuf(make([]float32, tokens*ffn))
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: tokens}, Args: [][]Arg{{b(fbuf(gu)), b(out), s(tokens)}}, Outs: []*Buf{out}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, _ := ref()
				return codegen.RelErr(bytesF32(outs[0]), want), nil
			},
		}, nil
	}
	return c
}

// Argmax is the greedy sampler over tokens rows of vocab logits; its error
// is the number of wrong rows (tolerance 0).
func Argmax(shape string, vocab, tokens int, seed uint64) *Case {
	c := &Case{Family: "argmax", Label: "argmax", Shape: shape, DType: "f32", Class: codegen.ArgmaxClass(vocab), Tol: 0, seed: seed}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.Argmax(vocab, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		lg := randn(r, tokens*vocab)
		if tokens >= 2 {
			// a NaN in the last row: the kernel reports -1 there, as the reference does
			lg[(tokens-1)*vocab+vocab/3] = float32(math.NaN())
		}
		want := codegen.RefArgmax(vocab, lg)
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				out := &Buf{Data: make([]byte, 4*tokens)}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: tokens}, Args: [][]Arg{{b(fbuf(lg)), b(out), s(tokens)}}, Outs: []*Buf{out}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				wrong := 0.0
				for i, w := range want {
					if int32(binary.LittleEndian.Uint32(outs[0][4*i:])) != w {
						wrong++
					}
				}
				return wrong, nil
			},
		}, nil
	}
	return c
}

// Embedding looks up ids in a 512-row table of type t.
func Embedding(shape string, t dtype.Type, dim int, seed uint64) *Case {
	dt := strings.ToLower(t.String())
	c := &Case{Family: "embedding", Label: "embedding", Shape: shape, DType: dt, Class: codegen.EmbeddingClass(t, dim), Tol: 1e-6, seed: seed}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.Embedding(t, dim, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		table, err := randWeights(t, 512, dim, r.Uint64())
		if err != nil {
			return nil, err
		}
		ids := []int32{0, 511, 7, 300}
		ref := lazy(func() ([]float32, error) { return codegen.RefEmbedding(t, dim, table, ids) })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				out := fbuf(make([]float32, len(ids)*dim))
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: len(ids)},
					Args: [][]Arg{{b(ibuf(ids)), b(&Buf{Data: table}), b(out), s(len(ids))}}, Outs: []*Buf{out}}, nil
			},
			compare: relErrTo(ref),
		}, nil
	}
	return c
}

// Product is a matrix product of m activation rows with n weight rows of k
// elements of type t: family "gemv" (decode) or "mma" (prefill, tensor
// cores). use names the product ("qkv", "down", …) for display.
func Product(shape, family, use string, t dtype.Type, n, k, m int, residual bool, seed uint64) *Case {
	dt := strings.ToLower(t.String())
	class := codegen.ProductClass(t, n, k, residual)
	c := &Case{Family: family, Label: family + "/" + use, Shape: shape, DType: dt, Class: class, Use: use, Tol: 1e-4, seed: seed, K: k, N: n}
	if family == "gemv" {
		sp := codegen.GEMVSpaceFor(t)
		if codegen.Repackable(t) {
			// the int8 one-row arms, from what lowering runs untuned: the
			// baseline autotune must beat
			sp = codegen.GEMVOneSpaceFor(t)
		}
		c.space = &sp
	}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		if family == "mma" {
			return one(codegen.MatMulMMA(t, n, k, residual, codegen.MMAArmOf(arm).ForK(k))) // as lowering runs it
		}
		if a := codegen.GEMVArmOf(arm); a.XQ >= 2 {
			return xqKernels(t, n, k, residual, a, codegen.Prologue{}, 0)
		}
		return one(codegen.GEMV(t, n, k, residual, codegen.GEMVArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(t, n, k, r.Uint64())
		if err != nil {
			return nil, err
		}
		x := randn(r, m*k)
		var y0 []float32
		if residual {
			y0 = randn(r, m*n)
		}
		ref := lazy(func() ([]float32, error) { return refMatMul(t, n, k, W, x, m, y0, family == "mma") })
		weights := armWeights(t, n, k, W)
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				y := fbuf(make([]float32, m*n))
				if residual {
					y = fbuf(y0)
				}
				wb := W
				if family == "gemv" {
					if wb, err = weights(arm); err != nil {
						return nil, err
					}
				}
				if len(ks) == 2 {
					return xqLaunch(ks, m, k, fbuf(x), nil, wb, y), nil
				}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m},
					Args: [][]Arg{{b(&Buf{Data: wb}), b(fbuf(x)), b(y), s(m)}}, Outs: []*Buf{y}}, nil
			},
			compare: relErrTo(ref),
		}, nil
	}
	return c
}

// ProductBatch is the decode product over m activation rows as the batch
// arm of a repacked product runs it (Launch.One's other kernel): class
// codegen.GEMVBatchClass of the product's, searched over
// codegen.GEMVBatchSpaceFor (the arms that read XQuant rows, as the
// untuned one-row arm does).
func ProductBatch(shape, use string, t dtype.Type, n, k, m int, residual bool, seed uint64) *Case {
	return productArms(Product(shape, "gemv", use, t, n, k, m, residual, seed), "gemv", m, codegen.GEMVBatchClass, codegen.GEMVBatchSpaceFor(t))
}

// productArms makes c, a gemv product over m rows, the case of one class
// of its arms: class of its class, labelled "label/use×m", searched over
// space.
func productArms(c *Case, label string, m int, class func(string) string, space codegen.Space) *Case {
	c.Class = class(c.Class)
	c.Label = fmt.Sprintf("%s/%s×%d", label, c.Use, m)
	c.space = &space
	return c
}

// withArms returns the cases of cs that exist (a nil one is a product
// the weight type has no such kernel for), each also run with arms.
func withArms(arms []codegen.GEMVArm, cs ...*Case) []*Case {
	var out []*Case
	for _, c := range cs {
		if c == nil {
			continue
		}
		for _, a := range arms {
			c.ExtraArms = append(c.ExtraArms, a.Point())
		}
		out = append(out, c)
	}
	return out
}

// ProductNorm is the decode product with its RMSNorm fused (GEMVNorm):
// y = W·rmsnorm(x, nw) over m rows, checked against the CPU norm followed
// by the CPU product.
func ProductNorm(shape, use string, t dtype.Type, n, k, m int, eps float32, seed uint64) *Case {
	return productPrologue(shape, use, t, n, k, m, false, codegen.Prologue{Kind: codegen.ProNorm, Eps: eps}, 0, seed)
}

// ProductNormInto is ProductNorm writing its n columns into rows of
// ystride floats (GEMVInto: one part of a fused row of products of
// different weight types); the other columns must stay as they were.
func ProductNormInto(shape, use string, t dtype.Type, n, k, m int, eps float32, ystride int, seed uint64) *Case {
	return productPrologue(shape, use, t, n, k, m, false, codegen.Prologue{Kind: codegen.ProNorm, Eps: eps}, ystride, seed)
}

// ProductSwiGLU is the FFN's down product with its SwiGLU fused
// (GEMVSwiGLU), adding into y: y += W·(silu(gate)·up) over m rows of
// [gate | up], checked against the CPU SwiGLU followed by the CPU product.
func ProductSwiGLU(shape, use string, t dtype.Type, n, k, m int, seed uint64) *Case {
	return productPrologue(shape, use, t, n, k, m, true, codegen.Prologue{Kind: codegen.ProSwiGLU}, 0, seed)
}

// productPrologue is ProductNorm or ProductSwiGLU. Its default arm is the
// one lowering uses untuned (int8 activations for repacked types, else the
// shared-memory GEMV).
func productPrologue(shape, use string, t dtype.Type, n, k, m int, residual bool, pro codegen.Prologue, ystride int, seed uint64) *Case {
	dt := strings.ToLower(t.String())
	tag := map[codegen.PrologueKind]string{codegen.ProNorm: "norm", codegen.ProSwiGLU: "swiglu"}[pro.Kind]
	ys, ctag, label := max(ystride, n), tag, "gemv+"+tag+"/"+use
	if ys != n {
		ctag += fmt.Sprintf("_ys%d", ys)
		label += fmt.Sprintf(" (rows of %d)", ys)
	}
	c := &Case{Family: "gemv", Label: label, Shape: shape, DType: dt, Class: codegen.ProductClass(t, n, k, residual) + "_" + ctag,
		Use: use, Tol: 1e-4, seed: seed, K: k}
	sp := codegen.GEMVSpaceFor(t)
	if codegen.Repackable(t) {
		sp.Default = codegen.DefaultXQGlobalOneArm.Point()
		c.ExtraArms = []codegen.Point{codegen.DefaultXQGlobalBatchArm.Point(),
			codegen.FitXQ(codegen.DefaultXQOneArm, k).Point(), codegen.FitXQ(codegen.DefaultXQBatchArm, k).Point(), codegen.DefaultXQMMAArm.Point(), codegen.DefaultXQMMAPipeArm.Point()}
		if codegen.HalfProduct(t, k) {
			c.ExtraArms = append(c.ExtraArms, codegen.DefaultXQHalfArm.Point())
		}
	}
	c.space = &sp
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		if a := codegen.GEMVArmOf(arm); a.XQ >= 2 {
			return xqKernels(t, n, k, residual, a, pro, ystride)
		}
		return one(codegen.GEMVInto(t, n, k, residual, codegen.GEMVArmOf(arm), pro, ystride))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(t, n, k, r.Uint64())
		if err != nil {
			return nil, err
		}
		var x, nw, y0 []float32
		if pro.Kind == codegen.ProNorm {
			x, nw = randn(r, m*k), randn(r, k)
		} else {
			x = randn(r, 2*m*k)
		}
		if residual {
			y0 = randn(r, m*n)
		}
		// the output rows of ys floats: the product's columns first, the
		// rest a pattern that must survive
		yinit := randn(r, m*ys)
		if residual {
			for i := range m {
				copy(yinit[i*ys:i*ys+n], y0[i*n:(i+1)*n])
			}
		}
		ref := lazy(func() ([]float32, error) {
			var xin []float32
			if pro.Kind == codegen.ProNorm {
				_, xin = codegen.RefRMSNormAdd(k, pro.Eps, false, x, nil, nw)
			} else {
				xin = codegen.RefSwiGLU(k, x)
			}
			return refMatMul(t, n, k, W, xin, m, y0, false)
		})
		weights := armWeights(t, n, k, W)
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				y := fbuf(yinit)
				wb, err := weights(arm)
				if err != nil {
					return nil, err
				}
				if len(ks) == 2 {
					var nwb *Buf
					if pro.Kind == codegen.ProNorm {
						nwb = fbuf(nw)
					}
					return xqLaunch(ks, m, k, fbuf(x), nwb, wb, y), nil
				}
				args := []Arg{b(&Buf{Data: wb}), b(fbuf(x)), b(y), s(m)}
				if pro.Kind == codegen.ProNorm {
					args = []Arg{b(&Buf{Data: wb}), b(fbuf(x)), b(fbuf(nw)), b(y), s(m)}
				}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m}, Args: [][]Arg{args}, Outs: []*Buf{y}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, err := ref()
				if err != nil {
					return 0, err
				}
				got := bytesF32(outs[0])
				cols := make([]float32, 0, m*n)
				for i := range m {
					cols = append(cols, got[i*ys:i*ys+n]...)
					for j := i*ys + n; j < (i+1)*ys; j++ {
						if got[j] != yinit[j] {
							return math.Inf(1), nil // wrote outside its columns
						}
					}
				}
				return codegen.RelErr(cols, want), nil
			},
		}, nil
	}
	return c
}

// xqKernels are the launches of an XQ 2 product: XQuant (computing pro),
// then the product over its rows.
func xqKernels(t dtype.Type, n, k int, residual bool, arm codegen.GEMVArm, pro codegen.Prologue, ystride int) ([]*codegen.Kernel, error) {
	return xqChain(k, pro, xqProduct{t, n, k, residual, arm, codegen.XQEnds{NormIn: pro.Kind == codegen.ProNorm, NormEps: pro.Eps}, ystride})
}

// xqProduct is the arguments of one codegen.GEMVXQ.
type xqProduct struct {
	t        dtype.Type
	n, k     int
	residual bool
	arm      codegen.GEMVArm
	e        codegen.XQEnds
	ystride  int
}

// xqChain is XQuant of rows of k (computing pro), then products in order,
// each reading the rows the launch before it wrote.
func xqChain(k int, pro codegen.Prologue, products ...xqProduct) ([]*codegen.Kernel, error) {
	quant := codegen.XQuant
	if products[0].arm.XQ == 4 {
		// the f16 tensor-core product reads XHalf's rows, as lowering gives it at large steps
		quant = codegen.XHalf
		for _, p := range products[1:] {
			if p.arm.XQ != 4 {
				return nil, fmt.Errorf("%w: an XQ 4 product chained with %v", ErrCase, p.arm)
			}
		}
	}
	q, err := quant(k, pro)
	if err != nil {
		return nil, err
	}
	ks := []*codegen.Kernel{q}
	for _, p := range products {
		g, err := codegen.GEMVXQ(p.t, p.n, p.k, p.residual, p.arm, p.e, p.ystride)
		if err != nil {
			return nil, err
		}
		ks = append(ks, g)
	}
	return ks, nil
}
