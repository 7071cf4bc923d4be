package codegen

import (
	"fmt"
	"strings"
)

// The small families lowering needs around the main ones: the QKV bias
// epilogue (qwen2), per-head RMSNorm of q and k inside the fused QKV row
// (qwen3), the concatenation of products of different weight types into one
// fused row, the gather of each sequence's last token before the logits,
// and attention for head sizes that are not a multiple of 32.

// BiasAdd returns the kernel adding a bias vector of n floats to every row:
//
//	bias_add(float* y, const float* b, int rows)
//
// grid (⌈n/threads⌉, rows).
func BiasAdd(n int, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: bias of %d", ErrUnsupported, n)
	}
	name := fmt.Sprintf("bias_add_n%d_%s", n, arm)
	params := []Param{{"float* __restrict__", "y"}, {"const float* __restrict__", "b"}, {"int", "rows"}}
	src := source(fmt.Sprintf("bias add: n %d, %v", n, arm), []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define NB %d", n)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Linef("const int i = blockIdx.x * %d + threadIdx.x;", arm.Threads)
			w.If("i < NB", func() { w.Line("y[(size_t)blockIdx.y * NB + i] += b[i];") })
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "bias_add", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.Threads), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// HeadNormShape places per-head RMSNorm inside activation rows: Heads heads
// of HeadDim floats starting at float Offset of rows of Stride floats, and
// Heads2 more right after them with a second weight (a layer's k norm
// beside its q norm: one launch for both).
type HeadNormShape struct {
	Heads, HeadDim, Offset, Stride int
	Heads2                         int
	Eps                            float32
}

// HeadRMSNorm returns the in-place per-head RMSNorm (qwen3's q/k norm):
// each head h of each row, x[h] = x[h] / sqrt(mean(x[h]²) + eps) · w (w2
// for the s.Heads2 heads after the first s.Heads):
//
//	head_rmsnorm(float* x, const float* w, [const float* w2,] int rows)
//
// One warp per head; grid (rows).
func HeadRMSNorm(s HeadNormShape, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if s.Heads <= 0 || s.HeadDim <= 0 || s.Offset < 0 || s.Heads2 < 0 || s.Stride < s.Offset+(s.Heads+s.Heads2)*s.HeadDim {
		return nil, fmt.Errorf("%w: head norm %+v", ErrUnsupported, s)
	}
	two := ""
	params := []Param{{"float* __restrict__", "x"}, {"const float* __restrict__", "w"}, {"int", "rows"}}
	if s.Heads2 > 0 {
		two = fmt.Sprintf("_k%d", s.Heads2)
		params = []Param{{"float* __restrict__", "x"}, {"const float* __restrict__", "w"}, {"const float* __restrict__", "w2"}, {"int", "rows"}}
	}
	name := fmt.Sprintf("head_rmsnorm_h%d%s_d%d_o%d_s%d_%s", s.Heads, two, s.HeadDim, s.Offset, s.Stride, arm)
	src := source(fmt.Sprintf("per-head rmsnorm: %d (+%d) heads of %d at %d of %d, eps %g, %v", s.Heads, s.Heads2, s.HeadDim, s.Offset, s.Stride, s.Eps, arm),
		[]string{"types", "warp", "pdl"}, func(w *Writer) {
			w.Linef("#define HEADS %d", s.Heads)
			w.Linef("#define ALL %d // heads with the first weight and after them with the second", s.Heads+s.Heads2)
			w.Linef("#define HD %d", s.HeadDim)
			w.Linef("#define OFF %d", s.Offset)
			w.Linef("#define STRIDE %d", s.Stride)
			w.Linef("#define EPS %s", cfloat(s.Eps))
			w.Linef("#define NW %d", arm.Threads/32)
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
				w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
				w.Line("pdl_wait();")
				w.For("h", "warp", "ALL", "NW", 0, func() {
					w.Line("float* p = x + (size_t)blockIdx.x * STRIDE + OFF + h * HD;")
					if s.Heads2 > 0 {
						w.Line("const float* wh = h < HEADS ? w : w2;")
					} else {
						w.Line("const float* wh = w;")
					}
					w.Line("float ss = 0.f;")
					w.For("d", "lane", "HD", "32", 0, func() { w.Line("ss += p[d] * p[d];") })
					w.Line("ss = warp_sum(ss);")
					w.Line("const float r = rsqrtf(ss / (float)HD + EPS);")
					w.For("d", "lane", "HD", "32", 0, func() { w.Line("p[d] = p[d] * r * wh[d];") })
				})
				w.Line("pdl_launch();")
			}})
		})
	return &Kernel{Family: "head_rmsnorm", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// Concat returns the kernel writing rows of len(widths) sources side by
// side into one row of Σwidths floats:
//
//	concat(const float* src0, …, float* out, int rows)
//
// grid (⌈Σwidths/threads⌉, rows).
func Concat(widths []int, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if len(widths) < 2 {
		return nil, fmt.Errorf("%w: concat of %d parts", ErrUnsupported, len(widths))
	}
	total := 0
	tags := make([]string, len(widths))
	var params []Param
	for i, wd := range widths {
		if wd <= 0 {
			return nil, fmt.Errorf("%w: concat part of %d", ErrUnsupported, wd)
		}
		total += wd
		tags[i] = fmt.Sprint(wd)
		params = append(params, Param{"const float* __restrict__", fmt.Sprintf("src%d", i)})
	}
	params = append(params, Param{"float* __restrict__", "out"}, Param{"int", "rows"})
	name := fmt.Sprintf("concat_%s_%s", strings.Join(tags, "_"), arm)
	src := source(fmt.Sprintf("concat: widths %v, %v", widths, arm), []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define TOTAL %d", total)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Comment("elements 4g..4g+3 of the output row")
			w.Linef("const int g = blockIdx.x * %d + threadIdx.x;", arm.Threads)
			w.Line("const size_t r = blockIdx.y;")
			// part lookup: v = element i of the row, from the source holding it
			chain := func(i, v string, vec bool) {
				var conds []string
				var bodies []func()
				off := 0
				for p, wd := range widths {
					p, wd, o := p, wd, off
					conds = append(conds, fmt.Sprintf("%s < %d", i, off+wd))
					idx := fmt.Sprintf("%s - %d", i, o)
					if o == 0 {
						idx = i
					}
					bodies = append(bodies, func() {
						if vec {
							w.Linef("%s = ((const float4*)(src%d + r * %d))[(%s) / 4];", v, p, wd, idx)
						} else {
							w.Linef("%s = src%d[r * %d + %s];", v, p, wd, idx)
						}
					})
					off += wd
				}
				// the last part takes the rest of the row (i < TOTAL)
				n := len(conds) - 1
				ifChain(w, conds[:n], bodies[:n], bodies[n])
			}
			scalar := func() {
				w.For("i", "4 * g", "min(4 * g + 4, TOTAL)", "1", 0, func() {
					w.Line("float v;")
					chain("i", "v", false)
					w.Line("out[r * TOTAL + i] = v;")
				})
			}
			vec := true // every part a whole number of float4s
			for _, wd := range widths {
				vec = vec && wd%4 == 0
			}
			w.If("4 * g < TOTAL", func() {
				if !vec {
					scalar()
					return
				}
				ptrs := []string{"out"}
				for i := range widths {
					ptrs = append(ptrs, fmt.Sprintf("src%d", i))
				}
				w.IfElse(aligned16(ptrs...), func() {
					w.Line("const int i = 4 * g;")
					w.Line("float4 v;")
					chain("i", "v", true)
					w.Line("((float4*)(out + r * TOTAL))[g] = v;")
				}, scalar)
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "concat", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(total, 4*arm.Threads), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// GatherRows returns the kernel copying row idx[r] of x into row r of y,
// rows of width floats (the last token of each sequence before the logits):
//
//	gather_rows(const float* x, const int* idx, float* y, int rows)
//
// grid (rows).
func GatherRows(width int, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if width <= 0 {
		return nil, fmt.Errorf("%w: gather of width %d", ErrUnsupported, width)
	}
	name := fmt.Sprintf("gather_rows_w%d_%s", width, arm)
	params := []Param{{"const float* __restrict__", "x"}, {"const int* __restrict__", "idx"}, {"float* __restrict__", "y"}, {"int", "rows"}}
	src := source(fmt.Sprintf("gather rows: width %d, %v", width, arm), []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define WIDTH %d", width)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Line("const float* s = x + (size_t)idx[blockIdx.x] * WIDTH;")
			w.Line("float* d = y + (size_t)blockIdx.x * WIDTH;")
			w.For("i", "threadIdx.x", "WIDTH", fmt.Sprint(arm.Threads), 0, func() { w.Line("d[i] = s[i];") })
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "gather_rows", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// WarpAttention returns causal attention for any head size up to 256 (the
// families in attention.go and prefill.go need a multiple of 32), with the
// parameters of PrefillAttention:
//
//	attn_warp(const float* q, const cache_t* kc, const cache_t* vc, const int* pages,
//	          const int* tok_base, const int* tok_pos, float* out, int ntok)
//
// One warp per (token, head), each lane scoring one key of a group of 32
// with an online softmax; grid (⌈ntok/Warps⌉, HQ). It serves decode too
// (one token per sequence).
func WarpAttention(s AttnShape, arm PrefillArm) (*Kernel, error) {
	if s.Heads <= 0 || s.HeadsKV <= 0 || s.Heads%s.HeadsKV != 0 || s.HeadDim <= 0 || s.HeadDim > 256 || s.QStride < s.Heads*s.HeadDim {
		return nil, fmt.Errorf("%w: warp attention %+v", ErrUnsupported, s)
	}
	if err := CheckCacheRow(s.Cache, s.HeadsKV, s.HeadDim); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	ct := cacheCType(s.Cache)
	dpl := ceilDiv(s.HeadDim, 32)
	name := fmt.Sprintf("attn_warp_%s_q%d_%s", s.tag(), s.QStride, arm)
	params := []Param{{"const float* __restrict__", "q"}, {"const " + ct + "* __restrict__", "kc"}, {"const " + ct + "* __restrict__", "vc"},
		{"const int* __restrict__", "pages"}, {"const int* __restrict__", "tok_base"}, {"const int* __restrict__", "tok_pos"}, {"float* __restrict__", "out"}, {"int", "ntok"}}
	src := source(fmt.Sprintf("causal attention, one warp per query: %s, query stride %d, %v", s.tag(), s.QStride, arm),
		append(cacheHelpers(s.Cache), "warp", "pdl"), func(w *Writer) {
			s.defines(w)
			w.Linef("#define NW %d", arm.Warps)
			w.Linef("#define DPL %d // head dims per lane, rounded up", dpl)
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: 32 * arm.Warps, Params: params, Body: func(w *Writer) {
				emitWarpQueryAttention(w, s, warpAttnStyle{guarded: s.HeadDim%32 != 0})
			}})
		})
	return &Kernel{Family: "attn_warp", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(d.Tokens, arm.Warps), s.Heads, 1), Block: dim3(32*arm.Warps, 1, 1)}
	}}, nil
}
