package codegen

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// The kernels of the ops Gemma brought (ir: scale, softcap, geglu) and of
// its post-norms (an rms_norm whose only user is a residual add). Each is
// a row-parallel kernel with BlockArm's tuning, launched over the step's
// rows.

// elementwise returns a kernel over rows of width floats, one thread an
// element: y[r][i] = expr(x[r][i]) written by body with x in "v":
//
//	name(const float* x, float* y, int rows)
//
// grid (⌈width/threads⌉, rows).
func elementwise(family, name, title string, width int, arm BlockArm, defines func(w *Writer), body func(w *Writer)) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if width <= 0 {
		return nil, fmt.Errorf("%w: %s width %d", ErrUnsupported, family, width)
	}
	params := []Param{{"const float* __restrict__", "x"}, {"float* __restrict__", "y"}, {"int", "rows"}}
	src := source(title, []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define W %d", width)
		defines(w)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Linef("const int i = blockIdx.x * %d + threadIdx.x;", arm.Threads)
			w.If("i < W", func() {
				w.Line("const size_t e = (size_t)blockIdx.y * W + i;")
				w.Line("const float v = x[e];")
				body(w)
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: family, Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(width, arm.Threads), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// Scale returns y = x · factor over rows of width floats (Gemma's
// embeddings times √dim):
//
//	scale(const float* x, float* y, int rows)
func Scale(width int, factor float32, arm BlockArm) (*Kernel, error) {
	if math.IsNaN(float64(factor)) || math.IsInf(float64(factor), 0) {
		return nil, fmt.Errorf("%w: scale factor %g", ErrUnsupported, factor)
	}
	name := fmt.Sprintf("scale_d%d_x%s_%s", width, identFloat(factor), arm)
	return elementwise("scale", name, fmt.Sprintf("scale: rows of %d times %g, %v", width, factor, arm), width, arm,
		func(w *Writer) { w.Linef("#define FACTOR %s", cfloat(factor)) },
		func(w *Writer) { w.Line("y[e] = v * FACTOR;") })
}

// Softcap returns y = cap · tanh(x / cap) over rows of width floats
// (Gemma 2's final logits):
//
//	softcap(const float* x, float* y, int rows)
func Softcap(width int, cap float32, arm BlockArm) (*Kernel, error) {
	if !(cap > 0) || math.IsInf(float64(cap), 0) {
		return nil, fmt.Errorf("%w: soft-cap %g", ErrUnsupported, cap)
	}
	name := fmt.Sprintf("softcap_d%d_c%s_%s", width, identFloat(cap), arm)
	return elementwise("softcap", name, fmt.Sprintf("softcap: rows of %d capped at %g, %v", width, cap, arm), width, arm,
		func(w *Writer) { w.Linef("#define CAP %s", cfloat(cap)) },
		func(w *Writer) { w.Line("y[e] = CAP * tanhf(v * (1.f / CAP));") })
}

// geluTanhMul is gelu_tanh(g)·u in CUDA C (GELU_K defined as √(2/π)),
// written once for the GeGLU kernel and for the gate/up products that
// compute it in their epilogue (XQEnds.GeLU), so that both give the same
// floats.
func geluTanhMul(g, u string) string {
	return fmt.Sprintf("0.5f * %[1]s * (1.f + tanhf(GELU_K * (%[1]s + 0.044715f * %[1]s * %[1]s * %[1]s))) * %[2]s", g, u)
}

// GeGLU returns the kernel out = gelu_tanh(gate) · up over rows laid out as
// [gate (ffn) | up (ffn)], the output of a fused gate/up product, with
// gelu_tanh(g) = g/2 · (1 + tanh(√(2/π) · (g + 0.044715·g³))):
//
//	geglu(const float* gu, float* out, int rows)
//
// grid (⌈ffn/threads⌉, rows).
func GeGLU(ffn int, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if ffn <= 0 {
		return nil, fmt.Errorf("%w: ffn %d", ErrUnsupported, ffn)
	}
	name := fmt.Sprintf("geglu_f%d_%s", ffn, arm)
	params := []Param{{"const float* __restrict__", "gu"}, {"float* __restrict__", "out"}, {"int", "rows"}}
	src := source(fmt.Sprintf("geglu: ffn %d, %v", ffn, arm), []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define FFN %d", ffn)
		w.Line("#define GELU_K 0.797884561f // √(2/π)")
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Line("const float* r = gu + (size_t)blockIdx.y * 2 * FFN;")
			w.Linef("const int i = blockIdx.x * %d + threadIdx.x;", arm.Threads)
			w.If("i < FFN", func() {
				w.Line("const float g = r[i];")
				w.Linef("out[(size_t)blockIdx.y * FFN + i] = %s;", geluTanhMul("g", "r[FFN + i]"))
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "geglu", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(ffn, arm.Threads), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// PostNormAdd returns the post-norm and its residual add over rows of dim
// floats: x += h / sqrt(mean(h²) + eps) · w, x the residual stream (in
// place), h the output of the product before the norm:
//
//	postnorm_add(float* x, const float* h, const float* w, int rows)
//
// grid (rows).
func PostNormAdd(dim int, eps float32, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if dim <= 0 || dim%4 != 0 {
		return nil, fmt.Errorf("%w: post-norm dim %d", ErrUnsupported, dim)
	}
	name := fmt.Sprintf("postnorm_add_d%d_%s", dim, arm)
	params := []Param{{"float* __restrict__", "x"}, {"const float* __restrict__", "h"}, {"const float* __restrict__", "w"}, {"int", "rows"}}
	src := source(fmt.Sprintf("postnorm_add: dim %d, eps %g, %v", dim, eps, arm), []string{"types", "warp", "pdl"}, func(w *Writer) {
		w.Linef("#define DIM %d", dim)
		w.Linef("#define EPS %s", cfloat(eps))
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			emitPostNormAdd(w, arm.Threads)
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "postnorm_add", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// emitPostNormAdd writes PostNormAdd's work on row blockIdx.x by threads
// threads: the sum of squares of h's row (a block reduction), then
// x += h · r · w.
func emitPostNormAdd(w *Writer, threads int) { emitPostNormAddRow(w, threads, false, "blockIdx.x", "") }

// emitPostNormAddRow is emitPostNormAdd on row row by the block's first
// threads threads (guard: the block has more, which skip the loops but
// join the barrier; their warps' partial sums are never read, so the sums
// are those of a block of threads threads), h's row read with ld ("" or
// "__ldcg": another block wrote it).
func emitPostNormAddRow(w *Writer, threads int, guard bool, row, ld string) {
	hv := "hr[i]"
	if ld != "" {
		hv = ld + "(hr + i)"
	}
	loop := func(body func()) {
		if guard {
			w.If(fmt.Sprintf("threadIdx.x < %d", threads), func() { w.For("i", "threadIdx.x", "DIM / 4", fmt.Sprint(threads), 0, body) })
			return
		}
		w.For("i", "threadIdx.x", "DIM / 4", fmt.Sprint(threads), 0, body)
	}
	w.Line("__shared__ float red[32];")
	w.Linef("const float4* hr = (const float4*)(h + (size_t)%s * DIM);", row)
	w.Linef("float4* xr = (float4*)(x + (size_t)%s * DIM);", row)
	w.Line("const float4* wr = (const float4*)w;")
	w.Line("float ss = 0.f;")
	loop(func() {
		w.Linef("const float4 v = %s;", hv)
		w.Line("ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;")
	})
	blockReduce(w, "ss", "total", "sum", threads)
	w.Line("const float r = rsqrtf(total / (float)DIM + EPS);")
	loop(func() {
		w.Linef("const float4 v = %s, g = wr[i];", hv)
		w.Line("float4 o = xr[i];")
		w.Line("o.x += v.x * r * g.x; o.y += v.y * r * g.y; o.z += v.z * r * g.z; o.w += v.w * r * g.w;")
		w.Line("xr[i] = o;")
	})
}

// PostNormAddQuant is PostNormAdd followed, in the same block, by the next
// norm's quantisation of the new residual row (XQuant with ProNorm: x·nw
// in int8 with its groups' sums of squares), for the XQ 2 products after
// that norm; the x it leaves and the bytes it writes are PostNormAdd's and
// XQuant's (the same code, the same threads for the sum of squares, and a
// quantisation whose bytes do not depend on the thread count):
//
//	postnorm_add_xq(float* x, const float* h, const float* w, const float* nw, u8* xq, int rows)
//
// One block a row, grid (rows). It saves a Gemma layer's two XQuant
// launches.
func PostNormAddQuant(dim int, eps float32, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	loads := (dim/8 + arm.Threads - 1) / arm.Threads
	if dim <= 0 || dim%32 != 0 || loads > xquantMaxLoads {
		return nil, fmt.Errorf("%w: post-norm and quantisation of rows of %d by %d threads", ErrUnsupported, dim, arm.Threads)
	}
	name := fmt.Sprintf("postnorm_add_xq_d%d_%s", dim, arm)
	params := []Param{{"float* __restrict__", "x"}, {"const float* __restrict__", "h"}, {"const float* __restrict__", "w"},
		{"const float* __restrict__", "nw"}, {"u8* __restrict__", "xq"}, {"int", "rows"}}
	pro := Prologue{Kind: ProNorm}
	src := source(fmt.Sprintf("postnorm_add + xquant (norm): dim %d, eps %g, %v", dim, eps, arm), proDeps(pro, "types", "warp", "pdl"), func(w *Writer) {
		emitXQPack4(w)
		w.Linef("#define DIM %d", dim)
		w.Linef("#define K %d", dim)
		w.Linef("#define EPS %s", cfloat(eps))
		w.Linef("#define XR %d // bytes of a quantised row", XQRowBytes(dim))
		w.Linef("#define SL %d // chunks of 8 a thread", loads)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			emitPostNormAdd(w, arm.Threads)
			w.Comment("the block's writes of the row are visible to all its threads past the barrier")
			w.Line("__syncthreads();")
			w.Line("const int row = blockIdx.x;")
			w.Line("const float4* xp = (const float4*)(x + (size_t)row * K);")
			w.Line("u8* qr = xq + (size_t)row * XR;")
			w.Line("float4* meta = (float4*)(qr + K);")
			emitXQuantRow(w, pro, arm.Threads)
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "postnorm_add", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// RefScale returns x · factor.
func RefScale(factor float32, x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = v * factor
	}
	return y
}

// RefSoftcap returns cap · tanh(x / cap), computed in float64.
func RefSoftcap(cap float32, x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(float64(cap) * math.Tanh(float64(v)/float64(cap)))
	}
	return y
}

// RefGeGLU returns gelu_tanh(gate)·up for rows laid out [gate | up] of
// 2·ffn, computed in float64.
func RefGeGLU(ffn int, gu []float32) []float32 {
	rows := len(gu) / (2 * ffn)
	out := make([]float32, rows*ffn)
	for r := range rows {
		for i := range ffn {
			g, u := float64(gu[r*2*ffn+i]), float64(gu[r*2*ffn+ffn+i])
			out[r*ffn+i] = float32(0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) * u)
		}
	}
	return out
}

// RefPostNormAdd returns x + h / sqrt(mean(h²) + eps) · w per row of dim,
// the mean of squares in float64.
func RefPostNormAdd(dim int, eps float32, x, h, w []float32) []float32 {
	out := make([]float32, len(x))
	for r := 0; r < len(x)/dim; r++ {
		ss := 0.0
		for _, v := range h[r*dim : (r+1)*dim] {
			ss += float64(v) * float64(v)
		}
		s := 1 / math.Sqrt(ss/float64(dim)+float64(eps))
		for i := range dim {
			out[r*dim+i] = float32(float64(x[r*dim+i]) + float64(h[r*dim+i])*s*float64(w[i]))
		}
	}
	return out
}

// GemmaSoftcap is the attention soft-cap of the Gemma kernels at a shape
// (GemmaKernels, kernel-check): Gemma 2's 50. Gemma 3's layers have none.
const GemmaSoftcap = 50

// GemmaKernels are the kernels Gemma's layers add at shape s, with default
// arms: the embeddings' scale, the logits' cap (Gemma 2's 30), the
// GELU-tanh gated feed-forward, the post-norm with its residual add, and
// attention over a sliding window of s.Window positions, with and without
// Gemma 2's soft cap (decode as split pairs, fixed and live, prefill on
// CUDA cores, and on tensor cores where the head allows), with an f16 and
// an 8-bit cache.
func GemmaKernels(s Shape) ([]*Kernel, error) {
	var ks []*Kernel
	add := func(k *Kernel, err error) error {
		if err == nil {
			ks = append(ks, k)
		}
		return err
	}
	for _, f := range []func() (*Kernel, error){
		func() (*Kernel, error) {
			return Scale(s.Hidden, float32(math.Sqrt(float64(s.Hidden))), DefaultBlockArm)
		},
		func() (*Kernel, error) { return Softcap(s.Vocab, 30, DefaultBlockArm) },
		func() (*Kernel, error) { return GeGLU(s.FFN, DefaultBlockArm) },
		func() (*Kernel, error) { return PostNormAdd(s.Hidden, s.Eps, DefaultBlockArm) },
		func() (*Kernel, error) { return PostNormAddQuant(s.Hidden, s.Eps, DefaultBlockArm) },
	} {
		if err := add(f()); err != nil {
			return nil, err
		}
	}
	live := DefaultDecodeLiveArm.OnCard(0) // the runtime's default, Live 3
	live.Preload = true
	live2 := live
	live2.Live = 2
	live2 = live2.OnCard(0)
	for _, cache := range []dtype.Type{dtype.F16, CacheQ8} {
		if CheckCacheRow(cache, s.HeadsKV, s.HeadDim) != nil {
			continue
		}
		for _, cp := range []float32{0, GemmaSoftcap} {
			as := s.Attn(cache)
			as.Window, as.Softcap = s.Window, cp
			for _, arm := range []DecodeArm{DefaultDecodeArm, live, live2} {
				p, c, err := DecodeAttention(as, arm)
				if err != nil {
					return nil, err
				}
				ks = append(ks, p, c)
			}
			if err := add(PrefillAttention(as, DefaultPrefillArm)); err != nil {
				return nil, err
			}
			if FlashSupported(as) {
				if err := add(FlashPrefillAttention(as, FlashArmFor(as, DefaultFlashArm))); err != nil {
					return nil, err
				}
			}
		}
	}
	return ks, nil
}
