package codegen

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// BlockArm is the arm of the simple row-parallel families (embedding,
// RMSNorm, SwiGLU, argmax): only the block size is tuned.
type BlockArm struct {
	Threads int // threads per block: a multiple of 32, 32..1024
}

// DefaultBlockArm is the arm used before tuning.
var DefaultBlockArm = BlockArm{Threads: 256}

// BlockKnobs is the search space of BlockArm.
var BlockKnobs = []Knob{{"threads", []int{64, 128, 256, 512, 1024}}}

// Validate reports whether a is well formed.
func (a BlockArm) Validate() error {
	if a.Threads < 32 || a.Threads > 1024 || a.Threads%32 != 0 {
		return fmt.Errorf("%w: threads %d", ErrUnsupported, a.Threads)
	}
	return nil
}

// BlockArms lists every valid BlockArm of the search space.
func BlockArms() []BlockArm {
	return enumerate(BlockKnobs, func(v map[string]int) BlockArm { return BlockArm{Threads: v["threads"]} }, BlockArm.Validate)
}

// String is the arm's short name used in kernel names and tables.
func (a BlockArm) String() string { return fmt.Sprintf("t%d", a.Threads) }

// cfloat writes a float constant as C source.
func cfloat(f float32) string {
	switch {
	case math.IsInf(float64(f), 1):
		return "__int_as_float(0x7f800000)"
	case math.IsInf(float64(f), -1):
		return "__int_as_float(0xff800000)"
	}
	return fmt.Sprintf("%.9gf", f)
}

// Embedding returns the kernel that gathers rows of a [vocab][dim] table of
// type t into f32 activations:
//
//	embed(const int* ids, const u8* table, float* out, int n)
//
// grid (n tokens), one block per token.
func Embedding(t dtype.Type, dim int, arm BlockArm) (*Kernel, error) {
	if err := checkRow(t, dim); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	rowBytes, _ := t.RowBytes(dim)
	name := fmt.Sprintf("embed_%s_d%d_%s", typeTag(t), dim, arm)
	params := []Param{{"const int* __restrict__", "ids"}, {"const u8* __restrict__", "table"}, {"float* __restrict__", "out"}, {"int", "n"}}
	src := source(fmt.Sprintf("embedding lookup: %v table, dim %d, %v", t, dim, arm), []string{dqHelper(t), "pdl"}, func(w *Writer) {
		w.Linef("#define DIM %d", dim)
		w.Linef("#define ROW_BYTES %d", rowBytes)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Line("const int tok = blockIdx.x;")
			w.Line("const u8* row = table + (size_t)ids[tok] * ROW_BYTES;")
			w.Line("float* o = out + (size_t)tok * DIM;")
			w.For("u", "threadIdx.x", "DIM / 32", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("float v[32];")
				w.Linef("%s(row, u, v);", dqFunc(t))
				w.For("i", "0", "32", "1", -1, func() { w.Line("o[32 * u + i] = v[i];") })
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "embedding", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// checkRow checks that a row of dim elements of t is whole blocks and whole
// 32-element units.
func checkRow(t dtype.Type, dim int) error {
	if err := supported(t); err != nil {
		return err
	}
	if dim <= 0 || dim%32 != 0 || dim%t.BlockElems() != 0 {
		return fmt.Errorf("%w: row of %d elements of %v", ErrUnsupported, dim, t)
	}
	return nil
}

// blockReduce writes a block-wide sum of the float variable v into total,
// using the shared array red[32].
func blockReduce(w *Writer, v, total, op string, threads int) {
	w.Linef("%s = warp_%s(%s);", v, op, v)
	w.If("(threadIdx.x & 31) == 0", func() { w.Linef("red[threadIdx.x >> 5] = %s;", v) })
	w.Line("__syncthreads();")
	w.Linef("float %s = red[0];", total)
	w.For("i", "1", fmt.Sprint(threads/32), "1", -1, func() {
		if op == "sum" {
			w.Linef("%s += red[i];", total)
		} else {
			w.Linef("%s = fmaxf(%s, red[i]);", total, total)
		}
	})
}

// RMSNormAdd returns the fused residual-add + RMSNorm kernel over rows of
// dim floats:
//
//	rmsnorm(float* x, const float* delta, const float* w, float* y, int rows)
//
// With add, x += delta is written back first (the residual stream); then
// y = x / sqrt(mean(x²) + eps) · w. grid (rows).
func RMSNormAdd(dim int, eps float32, add bool, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if dim <= 0 || dim%4 != 0 {
		return nil, fmt.Errorf("%w: rmsnorm dim %d", ErrUnsupported, dim)
	}
	tag := "rmsnorm"
	if add {
		tag = "add_rmsnorm"
	}
	name := fmt.Sprintf("%s_d%d_%s", tag, dim, arm)
	params := []Param{{"float* __restrict__", "x"}, {"const float* __restrict__", "delta"}, {"const float* __restrict__", "w"}, {"float* __restrict__", "y"}, {"int", "rows"}}
	src := source(fmt.Sprintf("%s: dim %d, eps %g, %v", tag, dim, eps, arm), []string{"types", "warp", "pdl"}, func(w *Writer) {
		w.Linef("#define DIM %d", dim)
		w.Linef("#define EPS %s", cfloat(eps))
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("__shared__ float red[32];")
			w.Line("pdl_wait();")
			w.Line("float4* xr = (float4*)(x + (size_t)blockIdx.x * DIM);")
			if add {
				w.Line("const float4* dr = (const float4*)(delta + (size_t)blockIdx.x * DIM);")
			}
			w.Line("float ss = 0.f;")
			w.For("i", "threadIdx.x", "DIM / 4", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("float4 v = xr[i];")
				if add {
					w.Line("float4 d = dr[i];")
					w.Line("v.x += d.x; v.y += d.y; v.z += d.z; v.w += d.w;")
					w.Line("xr[i] = v;")
				}
				w.Line("ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;")
			})
			blockReduce(w, "ss", "total", "sum", arm.Threads)
			w.Line("const float r = rsqrtf(total / (float)DIM + EPS);")
			w.Line("const float4* wr = (const float4*)w;")
			w.Line("float4* yr = (float4*)(y + (size_t)blockIdx.x * DIM);")
			w.For("i", "threadIdx.x", "DIM / 4", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("float4 v = xr[i], g = wr[i];")
				w.Line("yr[i] = make_float4(v.x * r * g.x, v.y * r * g.y, v.z * r * g.z, v.w * r * g.w);")
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "rmsnorm", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// SwiGLU returns the kernel out = silu(gate) · up over rows laid out as
// [gate (ffn) | up (ffn)], the output of a fused gate/up product:
//
//	swiglu(const float* gu, float* out, int rows)
//
// grid (⌈ffn/threads⌉, rows).
func SwiGLU(ffn int, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if ffn <= 0 {
		return nil, fmt.Errorf("%w: ffn %d", ErrUnsupported, ffn)
	}
	name := fmt.Sprintf("swiglu_f%d_%s", ffn, arm)
	params := []Param{{"const float* __restrict__", "gu"}, {"float* __restrict__", "out"}, {"int", "rows"}}
	src := source(fmt.Sprintf("swiglu: ffn %d, %v", ffn, arm), []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define FFN %d", ffn)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Linef("const int i = blockIdx.x * %d + threadIdx.x;", arm.Threads)
			w.If("i < FFN", func() {
				w.Line("const float* r = gu + (size_t)blockIdx.y * 2 * FFN;")
				w.Line("const float g = r[i];")
				w.Line("out[(size_t)blockIdx.y * FFN + i] = g / (1.f + expf(-g)) * r[FFN + i];")
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "swiglu", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(ffn, arm.Threads), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// Argmax returns the kernel writing the index of the largest logit of each
// row of vocab floats (the smallest index on ties):
//
//	argmax(const float* logits, int* out, int rows)
//
// grid (rows).
func Argmax(vocab int, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if vocab <= 0 {
		return nil, fmt.Errorf("%w: vocab %d", ErrUnsupported, vocab)
	}
	name := fmt.Sprintf("argmax_v%d_%s", vocab, arm)
	params := []Param{{"const float* __restrict__", "logits"}, {"int* __restrict__", "out"}, {"int", "rows"}}
	src := source(fmt.Sprintf("argmax: vocab %d, %v", vocab, arm), []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define VOCAB %d", vocab)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("__shared__ float bv[32];")
			w.Line("__shared__ int bi[32];")
			w.Line("pdl_wait();")
			w.Line("const float* r = logits + (size_t)blockIdx.x * VOCAB;")
			w.Line("float best = r[0];")
			w.Line("int idx = 0;")
			w.For("i", "threadIdx.x", "VOCAB", fmt.Sprint(arm.Threads), 4, func() {
				w.Line("const float v = r[i];")
				w.If("v > best", func() { w.Line("best = v; idx = i;") })
			})
			w.Line("#pragma unroll")
			w.Block("for (int o = 16; o > 0; o >>= 1)", func() {
				w.Line("const float ov = __shfl_xor_sync(0xffffffffu, best, o);")
				w.Line("const int oi = __shfl_xor_sync(0xffffffffu, idx, o);")
				w.If("ov > best || (ov == best && oi < idx)", func() { w.Line("best = ov; idx = oi;") })
			})
			w.If("(threadIdx.x & 31) == 0", func() { w.Line("bv[threadIdx.x >> 5] = best; bi[threadIdx.x >> 5] = idx;") })
			w.Line("__syncthreads();")
			w.If("threadIdx.x == 0", func() {
				w.For("i", "1", fmt.Sprint(arm.Threads/32), "1", 0, func() {
					w.If("bv[i] > best || (bv[i] == best && bi[i] < idx)", func() { w.Line("best = bv[i]; idx = bi[i];") })
				})
				w.Line("out[blockIdx.x] = idx;")
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "argmax", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}
