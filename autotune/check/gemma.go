package check

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// gemmaCases are kernel-check's cases of the kernels Gemma's layers add at
// shape s (s.Window > 0): the embeddings' scale, the logits' cap, the
// GELU-tanh gated feed-forward, the post-norm with its residual add, and
// attention over the sliding window, alone and with Gemma 2's soft cap
// (codegen.GemmaSoftcap): split-KV decode plain, quantising, fused, over
// the live length with its first keys preloaded, prefill of a chunk past
// the window and of one inside it, on tensor cores where the head allows,
// and the 8-bit cache. Sequences of 3000 keys and more are longer than a
// Gemma window, 333 and 1 shorter.
func gemmaCases(s codegen.Shape, tokens int, seed uint64) []*Case {
	cs := []*Case{
		Scale(s.Name, s.Hidden, float32(math.Sqrt(float64(s.Hidden))), tokens, seed),
		Softcap(s.Name, s.Vocab, 30, tokens, seed),
		GeGLU(s.Name, s.FFN, tokens, seed),
		PostNormAdd(s.Name, s.Hidden, s.Eps, tokens, seed),
		PostNormAddQuant(s.Name, s.Hidden, s.Eps, tokens, seed),
	}
	// the post-norms in the products before them (a one-sequence program's)
	qkv := (s.Heads + 2*s.HeadsKV) * s.HeadDim
	if codegen.Repackable(dtype.Q4_K) && s.Hidden%256 == 0 && s.FFN%256 == 0 && (s.Heads*s.HeadDim)%256 == 0 {
		cs = append(cs, ProductPostNorm(s.Name, "attn_out→gate_up", dtype.Q4_K, s.Hidden, s.Heads*s.HeadDim, dtype.Q4_K, 2*s.FFN, s.Eps, seed),
			ProductPostNorm(s.Name, "down→qkv", dtype.Q6_K, s.Hidden, s.FFN, dtype.Q4_K, qkv, s.Eps, seed))
	}
	lens := []int32{int32(3 * s.Window), int32(s.Window + 76), 333, 1}
	for _, cp := range []float32{0, codegen.GemmaSoftcap} {
		as := s.Attn(dtype.F16)
		as.Window, as.Softcap = s.Window, cp
		attn := []*Case{
			Decode(s.Name, as, lens, seed),
			DecodeXQ(s.Name, as, lens, seed),
			withFusedArms(DecodeLive(s.Name, as, lens, 4*s.Window, seed)),
			withFusedArms(DecodeLiveXQ(s.Name, as, lens, 4*s.Window, seed)),
			DecodePreload(s.Name, as, append(lens, 20), 4*s.Window, seed),
			Prefill(s.Name, as, 48, s.Window+500, seed),
			inside(Prefill(s.Name, as, 48, 16, seed)),
			FlashPrefill(s.Name, as, 100, s.Window+150, seed),
			FlashMixed(s.Name, as, []Span{{1, s.Window + 500}, {100, s.Window + 150}, {1, 37}, {70, 0}}, seed),
		}
		if codegen.CheckCacheRow(codegen.CacheQ8, s.HeadsKV, s.HeadDim) == nil {
			q8 := as
			q8.Cache = codegen.CacheQ8
			attn = append(attn, Decode(s.Name, q8, lens, seed), DecodePreload(s.Name, q8, append(lens, 20), 4*s.Window, seed),
				Prefill(s.Name, q8, 48, s.Window+500, seed))
		}
		for _, c := range attn {
			if c != nil {
				cs = append(cs, windowed(c, as))
			}
		}
	}
	return cs
}

// windowed marks an attention case as the window's (and the cap's): its
// label and class name them.
func windowed(c *Case, as codegen.AttnShape) *Case {
	tag := fmt.Sprintf("+win%d", as.Window)
	if as.Softcap > 0 {
		tag += fmt.Sprintf("+cap%g", as.Softcap)
	}
	c.Label += tag
	c.Class += strings.NewReplacer("+", "_").Replace(tag)
	return c
}

// inside marks a prefill case whose chunk (at position 16) lies inside
// the window.
func inside(c *Case) *Case {
	c.Label, c.Class = c.Label+"@16", c.Class+"_p16"
	return c
}

// blockSpace is the BlockArm search space under family's name.
func blockSpace(family string) *codegen.Space {
	sp, err := codegen.SpaceByName("swiglu")
	if err != nil {
		panic("BUG: no block space: " + err.Error())
	}
	sp.Family = family
	return &sp
}

// rowCase is a case of a row-parallel kernel over tokens rows: build
// draws the inputs and returns the kernel's arguments, the buffers it
// writes (Outs) and their references, in order. Every arm's launch gets
// the same inputs afresh (the post-norm adds in place).
func rowCase(c *Case, tokens int, build func(r *rand.Rand) (args []Arg, outs []*Buf, want func() [][]float32)) *Case {
	c.setup = func(r *rand.Rand) (*inputs, error) {
		var args []Arg
		var outs []*Buf
		var want func() [][]float32
		seed := r.Uint64()
		fresh := func() { args, outs, want = build(rand.New(rand.NewPCG(seed, 1))) }
		fresh()
		ref := lazy(func() ([][]float32, error) { return want(), nil })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				fresh() // in-place kernels start from the same values for every arm
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: tokens}, Args: [][]Arg{args}, Outs: outs}, nil
			},
			compare: func(got [][]byte) (float64, error) {
				w, _ := ref()
				e := 0.0
				for i := range got {
					e = math.Max(e, codegen.RelErr(bytesF32(got[i]), w[i]))
				}
				return e, nil
			},
		}, nil
	}
	return c
}

// Scale is the kernel y = x·factor over tokens rows of dim.
func Scale(shape string, dim int, factor float32, tokens int, seed uint64) *Case {
	c := &Case{Family: "scale", Label: "scale", Shape: shape, DType: "f32", Class: fmt.Sprintf("d%d", dim), Tol: 0, seed: seed, space: blockSpace("scale")}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.Scale(dim, factor, codegen.BlockArmOf(arm)))
	}
	return rowCase(c, tokens, func(r *rand.Rand) ([]Arg, []*Buf, func() [][]float32) {
		x := randn(r, tokens*dim)
		y := fbuf(make([]float32, len(x)))
		return []Arg{b(fbuf(x)), b(y), s(tokens)}, []*Buf{y}, func() [][]float32 { return [][]float32{codegen.RefScale(factor, x)} }
	})
}

// Softcap is the kernel y = cap·tanh(x/cap) over tokens rows of width
// (the logits).
func Softcap(shape string, width int, cap float32, tokens int, seed uint64) *Case {
	c := &Case{Family: "softcap", Label: "softcap", Shape: shape, DType: "f32", Class: fmt.Sprintf("v%d", width), Tol: 1e-6, seed: seed, space: blockSpace("softcap")}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.Softcap(width, cap, codegen.BlockArmOf(arm)))
	}
	return rowCase(c, tokens, func(r *rand.Rand) ([]Arg, []*Buf, func() [][]float32) {
		x := randn(r, tokens*width)
		for i := range x {
			x[i] *= 20 // logits of tens: the cap bites
		}
		y := fbuf(make([]float32, len(x)))
		return []Arg{b(fbuf(x)), b(y), s(tokens)}, []*Buf{y}, func() [][]float32 { return [][]float32{codegen.RefSoftcap(cap, x)} }
	})
}

// GeGLU is the GELU-tanh gated feed-forward's activation over tokens rows
// of [gate | up].
func GeGLU(shape string, ffn, tokens int, seed uint64) *Case {
	c := &Case{Family: "geglu", Label: "geglu", Shape: shape, DType: "f32", Class: codegen.SwiGLUClass(ffn), Tol: 1e-5, seed: seed, space: blockSpace("geglu")}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.GeGLU(ffn, codegen.BlockArmOf(arm)))
	}
	return rowCase(c, tokens, func(r *rand.Rand) ([]Arg, []*Buf, func() [][]float32) {
		gu := randn(r, tokens*2*ffn)
		for i := range gu {
			gu[i] *= 3 // GELU's negative tail and its linear part
		}
		y := fbuf(make([]float32, tokens*ffn))
		return []Arg{b(fbuf(gu)), b(y), s(tokens)}, []*Buf{y}, func() [][]float32 { return [][]float32{codegen.RefGeGLU(ffn, gu)} }
	})
}

// PostNormAdd is Gemma's post-norm with its residual add, in place over
// tokens rows of dim.
func PostNormAdd(shape string, dim int, eps float32, tokens int, seed uint64) *Case {
	c := &Case{Family: "postnorm_add", Label: "postnorm_add", Shape: shape, DType: "f32", Class: codegen.RMSNormClass(dim, true), Tol: 1e-5, seed: seed,
		space: blockSpace("postnorm_add")}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.PostNormAdd(dim, eps, codegen.BlockArmOf(arm)))
	}
	return rowCase(c, tokens, func(r *rand.Rand) ([]Arg, []*Buf, func() [][]float32) {
		x, h, w := randn(r, tokens*dim), randn(r, tokens*dim), randn(r, dim)
		xb := fbuf(x)
		return []Arg{b(xb), b(fbuf(h)), b(fbuf(w)), s(tokens)}, []*Buf{xb}, func() [][]float32 {
			return [][]float32{codegen.RefPostNormAdd(dim, eps, x, h, w)}
		}
	})
}

// PostNormAddQuant is PostNormAdd with the next norm's quantisation of the
// new rows in the same launch (codegen.PostNormAddQuant): the new residual
// rows must be the reference's within 1e-5 (else the error is +Inf), and
// the quantised rows, dequantised, the reference's rows times the next
// norm's weight within the int8 tolerance.
func PostNormAddQuant(shape string, dim int, eps float32, tokens int, seed uint64) *Case {
	c := &Case{Family: "postnorm_add", Label: "postnorm_add+xq", Shape: shape, DType: "f32", Class: codegen.RMSNormClass(dim, true),
		Tol: codegen.XQTol, seed: seed, space: blockSpace("postnorm_add")}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.PostNormAddQuant(dim, eps, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		x, h, w, nw := randn(r, tokens*dim), randn(r, tokens*dim), randn(r, dim), randn(r, dim)
		ref := codegen.RefPostNormAdd(dim, eps, x, h, w)
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				xb, xq := fbuf(x), &Buf{Data: make([]byte, tokens*codegen.XQRowBytes(dim))}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: tokens},
					Args: [][]Arg{{b(xb), b(fbuf(h)), b(fbuf(w)), b(fbuf(nw)), b(xq), s(tokens)}}, Outs: []*Buf{xb, xq}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				if codegen.RelErr(bytesF32(outs[0]), ref) > 1e-5 {
					return math.Inf(1), nil
				}
				scaled := make([]float32, len(ref))
				for i, v := range ref {
					scaled[i] = v * nw[i%dim]
				}
				return xqRowsErr(outs[1], dim, scaled), nil
			},
		}, nil
	}
	return c
}
