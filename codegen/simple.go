package codegen

import (
	"fmt"
	"math"
	"strings"

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
	s := fmt.Sprintf("%.9g", f)
	if !strings.ContainsAny(s, ".en") {
		s += ".0" // "50.0f", not "50f", which C reads as an integer with a bad suffix
	}
	return s + "f"
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
			w.Comment("a negative id (a pipelined step fed a failed choice: NaN, no candidate) reads row 0;")
			w.Comment("the host retires its sequence and drops the row's result")
			w.Line("const int id = ids[tok] < 0 ? 0 : ids[tok];")
			w.Line("const u8* row = table + (size_t)id * ROW_BYTES;")
			w.Line("float* o = out + (size_t)tok * DIM;")
			w.Comment("a row of DIM (a multiple of 32) floats is 16-byte aligned when out is")
			w.Line("const bool vec = " + aligned16("out") + ";")
			w.For("u", "threadIdx.x", "DIM / 32", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("float v[32];")
				w.Linef("%s(row, u, v);", dqFunc(t))
				w.IfElse("vec", func() {
					w.Line("float4* o4 = (float4*)(o + 32 * u);")
					w.For("i", "0", "8", "1", -1, func() { w.Line("o4[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);") })
				}, func() {
					w.For("i", "0", "32", "1", -1, func() { w.Line("o[32 * u + i] = v[i];") })
				})
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
	src := source(fmt.Sprintf("%s: dim %d, eps %g, %v", tag, dim, eps, arm), []string{"types", "warp", "pdl", "norm4"}, func(w *Writer) {
		w.Linef("#define DIM %d", dim)
		w.Linef("#define EPS %s", cfloat(eps))
		nv := ceilDiv(dim/4, arm.Threads)
		if rmsnormInRegisters(dim, arm.Threads) {
			w.Linef("#define NV %d // float4s of the row per thread", nv)
		}
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("__shared__ float red[32];")
			if rmsnormInRegisters(dim, arm.Threads) {
				rmsnormRegisters(w, add, nv, dim/4%arm.Threads != 0, arm.Threads)
			} else {
				rmsnormTwoPass(w, add, arm.Threads)
			}
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "rmsnorm", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// rmsnormInRegisters reports whether a thread's float4s of the row (and of
// the weights) fit in registers: at most 8 per thread and 2048 per block.
func rmsnormInRegisters(dim, threads int) bool {
	nv := ceilDiv(dim/4, threads)
	return nv <= 8 && nv*threads <= 2048
}

// rmsnormRegisters writes the RMSNorm body keeping the thread's nv float4s
// of x and of the weights in registers: the weights (constant) are loaded
// before pdl_wait, x (+ delta) once, so the row costs one round trip to
// memory before the reduction and the stores after it.
func rmsnormRegisters(w *Writer, add bool, nv int, ragged bool, threads int) {
	guard := func(body func()) {
		if ragged {
			w.If("i < DIM / 4", body)
		} else {
			body()
		}
	}
	w.Line("const float4* wr = (const float4*)w;")
	w.Line("float4 g[NV], v[NV];")
	w.Comment("the weights do not depend on the previous kernel")
	w.For("k", "0", "NV", "1", -1, func() {
		w.Linef("const int i = threadIdx.x + k * %d;", threads)
		guard(func() { w.Line("g[k] = wr[i];") })
	})
	w.Line("pdl_wait();")
	w.Line("float4* xr = (float4*)(x + (size_t)blockIdx.x * DIM);")
	if add {
		w.Line("const float4* dr = (const float4*)(delta + (size_t)blockIdx.x * DIM);")
	}
	w.Line("float ss = 0.f;")
	w.For("k", "0", "NV", "1", -1, func() {
		w.Linef("const int i = threadIdx.x + k * %d;", threads)
		guard(func() {
			w.Line("v[k] = xr[i];")
			if add {
				w.Line("const float4 d = dr[i];")
				w.Line("v[k].x += d.x; v[k].y += d.y; v[k].z += d.z; v[k].w += d.w;")
				w.Line("xr[i] = v[k];")
			}
			w.Line("ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;")
		})
	})
	blockReduce(w, "ss", "total", "sum", threads)
	w.Line("const float r = rsqrtf(total / (float)DIM + EPS);")
	w.Line("float4* yr = (float4*)(y + (size_t)blockIdx.x * DIM);")
	w.For("k", "0", "NV", "1", -1, func() {
		w.Linef("const int i = threadIdx.x + k * %d;", threads)
		guard(func() {
			w.Line("yr[i] = norm4(v[k], r, g[k]);")
		})
	})
}

// rmsnormTwoPass writes the RMSNorm body for rows too long to keep in
// registers: x is read again after the reduction.
func rmsnormTwoPass(w *Writer, add bool, threads int) {
	w.Line("pdl_wait();")
	w.Line("float4* xr = (float4*)(x + (size_t)blockIdx.x * DIM);")
	if add {
		w.Line("const float4* dr = (const float4*)(delta + (size_t)blockIdx.x * DIM);")
	}
	w.Line("float ss = 0.f;")
	w.For("i", "threadIdx.x", "DIM / 4", fmt.Sprint(threads), 0, func() {
		w.Line("float4 v = xr[i];")
		if add {
			w.Line("float4 d = dr[i];")
			w.Line("v.x += d.x; v.y += d.y; v.z += d.z; v.w += d.w;")
			w.Line("xr[i] = v;")
		}
		w.Line("ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;")
	})
	blockReduce(w, "ss", "total", "sum", threads)
	w.Line("const float r = rsqrtf(total / (float)DIM + EPS);")
	w.Line("const float4* wr = (const float4*)w;")
	w.Line("float4* yr = (float4*)(y + (size_t)blockIdx.x * DIM);")
	w.For("i", "threadIdx.x", "DIM / 4", fmt.Sprint(threads), 0, func() {
		w.Line("float4 v = xr[i], g = wr[i];")
		w.Line("yr[i] = norm4(v, r, g);")
	})
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
	vec := ffn%4 == 0 // four elements per thread
	src := source(fmt.Sprintf("swiglu: ffn %d, %v", ffn, arm), []string{"types", "pdl", "swiglu4"}, func(w *Writer) {
		w.Linef("#define FFN %d", ffn)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Line("const float* r = gu + (size_t)blockIdx.y * 2 * FFN;")
			w.Line("float* o = out + (size_t)blockIdx.y * FFN;")
			if !vec {
				w.Linef("const int i = blockIdx.x * %d + threadIdx.x;", arm.Threads)
				w.If("i < FFN", func() {
					w.Line("const float g = r[i];")
					w.Line("o[i] = g / (1.f + expf(-g)) * r[FFN + i];")
				})
				w.Line("pdl_launch();")
				return
			}
			w.Comment("elements 4q..4q+3; rows are 16-byte aligned when gu and out are")
			w.Linef("const int q = blockIdx.x * %d + threadIdx.x;", arm.Threads)
			w.If("q < FFN / 4", func() {
				w.IfElse(aligned16("gu", "out"), func() {
					w.Line("((float4*)o)[q] = swiglu4(((const float4*)r)[q], ((const float4*)(r + FFN))[q]);")
				}, func() {
					w.For("i", "4 * q", "4 * q + 4", "1", -1, func() {
						w.Line("const float g = r[i];")
						w.Line("o[i] = g / (1.f + expf(-g)) * r[FFN + i];")
					})
				})
			})
			w.Line("pdl_launch();")
		}})
	})
	per := 1
	if vec {
		per = 4
	}
	return &Kernel{Family: "swiglu", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(ffn, per*arm.Threads), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1)}
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
		w.Linef("#define ARGMAX_U %d // loads in flight per thread", argmaxU)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("__shared__ float bv[32];")
			w.Line("__shared__ int bi[32];")
			w.Line("pdl_wait();")
			w.Line("const float* r = logits + (size_t)blockIdx.x * VOCAB;")
			w.Line("float best = r[0];")
			w.Line("int idx = 0;")
			w.Line("int nan = 0; // a NaN logit: the row has no argmax (-1)")
			w.Comment("each thread visits its elements in increasing index order and keeps the")
			w.Comment("first of equal maxima; the ARGMAX_U loads of a round are in flight together")
			if vocab%4 == 0 {
				w.IfElse(aligned16("logits"), func() { argmaxScan(w, true, arm.Threads) }, func() { argmaxScan(w, false, arm.Threads) })
			} else {
				argmaxScan(w, false, arm.Threads)
			}
			w.Line("#pragma unroll")
			w.Block("for (int o = 16; o > 0; o >>= 1)", func() {
				w.Line("const float ov = __shfl_xor_sync(0xffffffffu, best, o);")
				w.Line("const int oi = __shfl_xor_sync(0xffffffffu, idx, o);")
				w.If("ov > best || (ov == best && oi < idx)", func() { w.Line("best = ov; idx = oi;") })
			})
			w.If("(threadIdx.x & 31) == 0", func() { w.Line("bv[threadIdx.x >> 5] = best; bi[threadIdx.x >> 5] = idx;") })
			w.Line("nan = __syncthreads_or(nan);")
			w.If("threadIdx.x == 0", func() {
				w.For("i", "1", fmt.Sprint(arm.Threads/32), "1", 0, func() {
					w.If("bv[i] > best || (bv[i] == best && bi[i] < idx)", func() { w.Line("best = bv[i]; idx = bi[i];") })
				})
				w.Line("out[blockIdx.x] = nan ? -1 : idx;")
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "argmax", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// argmaxU is the loads each argmax thread issues before comparing them.
const argmaxU = 8

// argmaxScan writes a thread's scan of row r into (best, idx): float4s of
// the row (vec) or single floats, ARGMAX_U loads per round, compared in
// increasing index order with a strict > (ties keep the lower index).
func argmaxScan(w *Writer, vec bool, threads int) {
	n, ty, load := "VOCAB", "float", "r"
	if vec {
		n, ty, load = "VOCAB / 4", "float4", "((const float4*)r)"
	}
	w.For("q0", "threadIdx.x", n, fmt.Sprintf("%d * ARGMAX_U", threads), 0, func() {
		w.Linef("%s v[ARGMAX_U];", ty)
		w.For("k", "0", "ARGMAX_U", "1", -1, func() {
			w.Linef("const int q = q0 + k * %d;", threads)
			w.If("q < "+n, func() { w.Linef("v[k] = %s[q];", load) })
		})
		w.For("k", "0", "ARGMAX_U", "1", -1, func() {
			w.Linef("const int q = q0 + k * %d;", threads)
			w.If("q < "+n, func() {
				if !vec {
					w.Line("nan |= v[k] != v[k];")
					w.If("v[k] > best", func() { w.Line("best = v[k]; idx = q;") })
					return
				}
				w.Line("nan |= (v[k].x != v[k].x) | (v[k].y != v[k].y) | (v[k].z != v[k].z) | (v[k].w != v[k].w);")
				for e, c := range []string{"x", "y", "z", "w"} {
					w.If(fmt.Sprintf("v[k].%s > best", c), func() { w.Linef("best = v[k].%s; idx = 4 * q + %d;", c, e) })
				}
			})
		})
	})
}
