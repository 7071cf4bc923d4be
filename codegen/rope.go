package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// RopeShape is the constant shape of the RoPE + KV-cache-write kernel.
type RopeShape struct {
	Heads, HeadsKV, HeadDim int
	RopeDim                 int        // rotated dimensions per head (≤ HeadDim, even)
	Half                    bool       // rotate (x[i], x[i+RopeDim/2]) (NeoX); else adjacent pairs
	Cache                   dtype.Type // KV cache element type: F32, F16 or BF16
}

// QKVStride is the floats per token of the fused QKV activation row:
// [q (Heads·HeadDim) | k (HeadsKV·HeadDim) | v (HeadsKV·HeadDim)].
func (s RopeShape) QKVStride() int { return (s.Heads + 2*s.HeadsKV) * s.HeadDim }

func (s RopeShape) validate() error {
	switch {
	case s.Heads <= 0 || s.HeadsKV <= 0 || s.Heads%s.HeadsKV != 0:
		return fmt.Errorf("%w: heads %d/%d", ErrUnsupported, s.Heads, s.HeadsKV)
	case s.HeadDim <= 0 || s.HeadDim%2 != 0 || s.RopeDim <= 0 || s.RopeDim%2 != 0 || s.RopeDim > s.HeadDim:
		return fmt.Errorf("%w: head dim %d, rope dim %d", ErrUnsupported, s.HeadDim, s.RopeDim)
	}
	return checkCache(s.Cache)
}

func checkCache(t dtype.Type) error {
	if t != dtype.F32 && t != dtype.F16 && t != dtype.BF16 {
		return fmt.Errorf("%w: KV cache type %v", ErrUnsupported, t)
	}
	return nil
}

// cacheStore returns the C expression storing float expression v into the
// cache array element dst (typed per cacheCType).
func cacheStore(t dtype.Type, dst, v string) string {
	switch t {
	case dtype.F16:
		return fmt.Sprintf("%s = f32_to_f16(%s);", dst, v)
	case dtype.BF16:
		return fmt.Sprintf("%s = f32_to_bf16(%s);", dst, v)
	}
	return fmt.Sprintf("%s = %s;", dst, v)
}

// cacheLoad returns the C expression reading cache element src as float.
func cacheLoad(t dtype.Type, src string) string {
	switch t {
	case dtype.F16:
		return "f16_to_f32(" + src + ")"
	case dtype.BF16:
		return "bf16_to_f32(" + src + ")"
	}
	return src
}

// cacheCType is the C element type of a cache of type t.
func cacheCType(t dtype.Type) string {
	if t == dtype.F32 {
		return "float"
	}
	return "u16"
}

func cacheHelpers(t dtype.Type) []string {
	switch t {
	case dtype.F16:
		return []string{"f16"}
	case dtype.BF16:
		return []string{"bf16"}
	}
	return []string{"types"}
}

// RopeKV returns the kernel that rotates q and k of each token's fused QKV
// row in place of q, and writes the rotated k and the plain v into the KV
// cache row slot[t] ([row][HeadsKV][HeadDim]):
//
//	rope_kv(float* qkv, const int* pos, const int* slot, const float* inv_freq,
//	        cache_t* kcache, cache_t* vcache, int ntok)
//
// inv_freq holds RopeDim/2 inverse frequencies, any scaling (linear, llama3)
// already applied. grid (ntok).
func RopeKV(s RopeShape, arm BlockArm) (*Kernel, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	style := "inter"
	if s.Half {
		style = "half"
	}
	name := fmt.Sprintf("rope_kv_%s_h%d_%d_d%d_r%d_%s_%s", style, s.Heads, s.HeadsKV, s.HeadDim, s.RopeDim, typeTag(s.Cache), arm)
	ct := cacheCType(s.Cache)
	params := []Param{{"float* __restrict__", "qkv"}, {"const int* __restrict__", "pos"}, {"const int* __restrict__", "slot"},
		{"const float* __restrict__", "inv_freq"}, {ct + "* __restrict__", "kcache"}, {ct + "* __restrict__", "vcache"}, {"int", "ntok"}}
	src := source(fmt.Sprintf("RoPE (%s) + KV cache write: heads %d/%d, head dim %d, rope dim %d, %v cache, %v",
		style, s.Heads, s.HeadsKV, s.HeadDim, s.RopeDim, s.Cache, arm), append(cacheHelpers(s.Cache), "pdl"), func(w *Writer) {
		w.Linef("#define HQ %d", s.Heads)
		w.Linef("#define HKV %d", s.HeadsKV)
		w.Linef("#define HD %d", s.HeadDim)
		w.Linef("#define RD %d", s.RopeDim)
		w.Linef("#define STRIDE %d", s.QKVStride())
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Line("const int t = blockIdx.x;")
			w.Line("float* row = qkv + (size_t)t * STRIDE;")
			w.Line("const float p = (float)pos[t];")
			w.Line("const size_t crow = (size_t)slot[t] * HKV * HD;")
			w.Comment("one pair of elements per iteration, over the q heads then the k heads")
			w.For("idx", "threadIdx.x", "(HQ + HKV) * (HD / 2)", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("const int head = idx / (HD / 2), i = idx % (HD / 2);")
				w.Line("int a, b;")
				if s.Half {
					w.IfElse("i < RD / 2", func() { w.Line("a = i; b = i + RD / 2;") },
						func() { w.Line("a = RD + 2 * (i - RD / 2); b = a + 1;") })
				} else {
					w.Line("a = 2 * i; b = a + 1;")
				}
				w.Line("float* h = row + head * HD;")
				w.Line("float xa = h[a], xb = h[b];")
				rotated := "i < RD / 2"
				w.If(rotated, func() {
					w.Line("float sn, cs;")
					w.Line("sincosf(p * inv_freq[i], &sn, &cs);")
					w.Line("const float ra = xa * cs - xb * sn;")
					w.Line("xb = xa * sn + xb * cs;")
					w.Line("xa = ra;")
				})
				w.IfElse("head < HQ", func() {
					w.Line("h[a] = xa; h[b] = xb;")
				}, func() {
					w.Linef("%s* kc = kcache + crow + (head - HQ) * HD;", ct)
					w.Line(cacheStore(s.Cache, "kc[a]", "xa"))
					w.Line(cacheStore(s.Cache, "kc[b]", "xb"))
				})
			})
			w.Line("const float* v = row + (HQ + HKV) * HD;")
			w.For("i", "threadIdx.x", "HKV * HD", fmt.Sprint(arm.Threads), 0, func() {
				w.Line(cacheStore(s.Cache, "vcache[crow + i]", "v[i]"))
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "rope_kv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}
