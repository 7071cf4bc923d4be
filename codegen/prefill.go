package codegen

import (
	"fmt"
	"math"
)

// PrefillArm is the tuning of causal prefill attention.
type PrefillArm struct {
	Warps int // warps per block; each warp owns one (token, head) query
}

// DefaultPrefillArm is the arm used before tuning.
var DefaultPrefillArm = PrefillArm{Warps: 4}

// PrefillKnobs is the search space of PrefillArm.
var PrefillKnobs = []Knob{{"warps", []int{1, 2, 4, 8, 16}}}

// Validate reports whether a is well formed.
func (a PrefillArm) Validate() error {
	if a.Warps < 1 || a.Warps > 32 {
		return fmt.Errorf("%w: prefill attention arm %+v", ErrUnsupported, a)
	}
	return nil
}

// PrefillArms lists every valid PrefillArm of the search space.
func PrefillArms() []PrefillArm {
	return enumerate(PrefillKnobs, func(v map[string]int) PrefillArm { return PrefillArm{Warps: v["warps"]} }, PrefillArm.Validate)
}

// String is the arm's short name used in kernel names and tables.
func (a PrefillArm) String() string { return fmt.Sprintf("w%d", a.Warps) }

// PrefillAttention returns causal attention for a step's tokens, each
// attending to the cache rows of its own sequence up to its own position:
//
//	attn_prefill(const float* q, const cache_t* kc, const cache_t* vc, const int* pages,
//	             const int* tok_base, const int* tok_pos, float* out, int ntok)
//
// Token t reads its sequence's keys 0 .. tok_pos[t] at cache rows
// PageRow(pages, tok_base[t], j) (its own key included, so RoPE/KV write
// runs first) and writes
// out [t][HQ·HD]. One warp per (token, head) with an online softmax over
// 32 keys at a time; grid (⌈ntok/Warps⌉, HQ).
func PrefillAttention(s AttnShape, arm PrefillArm) (*Kernel, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	ct := cacheCType(s.Cache)
	name := fmt.Sprintf("attn_prefill_%s_%s", s.tag(), arm)
	params := []Param{{"const float* __restrict__", "q"}, {"const " + ct + "* __restrict__", "kc"}, {"const " + ct + "* __restrict__", "vc"},
		{"const int* __restrict__", "pages"}, {"const int* __restrict__", "tok_base"}, {"const int* __restrict__", "tok_pos"}, {"float* __restrict__", "out"}, {"int", "ntok"}}
	src := source(fmt.Sprintf("causal prefill attention: %s, %v", s.tag(), arm), append(cacheHelpers(s.Cache), "warp", "pdl"), func(w *Writer) {
		s.defines(w)
		w.Linef("#define NW %d", arm.Warps)
		w.Line("#define DPL (HD / 32) // head dims per lane")
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: 32 * arm.Warps, Params: params, Body: func(w *Writer) {
			emitWarpQueryAttention(w, s, warpAttnPrefill)
		}})
	})
	return &Kernel{Family: "attn_prefill", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(d.Tokens, arm.Warps), s.Heads, 1), Block: dim3(32*arm.Warps, 1, 1)}
	}}, nil
}

// warpAttnStyle is what differs between the two emitters of one-warp-per-
// query attention: the prefill family (head dims a multiple of 32) and
// WarpAttention (any head size up to 256, lanes past it guarded).
type warpAttnStyle struct {
	guarded  bool // head dims not a multiple of 32: guard the lanes past HD
	qUnroll  int  // the unroll of the query load loop (Writer.For's)
	comments bool
}

var warpAttnPrefill = warpAttnStyle{qUnroll: -1, comments: true}

// emitWarpQueryAttention writes the body shared by PrefillAttention and
// WarpAttention: one warp per (token, head), each lane scoring one key of a
// group of 32, an online softmax, and the output row.
func emitWarpQueryAttention(w *Writer, s AttnShape, st warpAttnStyle) {
	ct := cacheCType(s.Cache)
	guard := func(body func()) {
		if !st.guarded {
			body()
			return
		}
		w.If("lane + 32 * i < HD", body)
	}
	w.Line("__shared__ float qs[NW][HD];")
	w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
	w.Line("const int t = blockIdx.x * NW + warp, h = blockIdx.y, kvh = h / GROUP;")
	w.Line("pdl_wait();")
	w.If("t >= ntok", func() { w.Line("return;") })
	w.For("d", "lane", "HD", "32", st.qUnroll, func() { w.Line("qs[warp][d] = q[(size_t)t * QSTRIDE + h * HD + d] * SCALE;") })
	w.Line("__syncwarp();")
	w.Line("const int nkeys = tok_pos[t] + 1;")
	w.Line("const int* __restrict__ pt = pages + tok_base[t]; // the sequence's page table")
	w.Linef("float m = %s, l = 0.f;", cfloat(float32(math.Inf(-1))))
	w.Line("float o[DPL];")
	w.For("i", "0", "DPL", "1", -1, func() { w.Line("o[i] = 0.f;") })
	from := "0"
	if s.Window > 0 {
		w.Line("const int jlo = max(0, nkeys - WINDOW); // the first key in the window: each group's lane 0 holds a key")
		from = "jlo"
	}
	w.For("j0", from, "nkeys", "32", 0, func() {
		if st.comments {
			w.Comment("each lane scores one key of this group of 32")
		}
		w.Line("const int j = j0 + lane;")
		w.Linef("float sc = %s;", cfloat(float32(math.Inf(-1))))
		w.If("j < nkeys", func() {
			w.Linef("const %s* kr = kc + PROW(pt, j) * CROW + kvh * HD;", ct)
			w.Line("float a = 0.f;")
			if s.Cache == CacheQ8 {
				w.Line("const float* ks = (const float*)(kr - kvh * HD + HKV * HD) + kvh * (HD / 32); // the head's block scales")
				w.For("b", "0", "HD / 32", "1", -1, func() {
					w.Line("float ab = 0.f;")
					w.For("d", "32 * b", "32 * b + 32", "1", 8, func() { w.Line("ab += qs[warp][d] * (float)(signed char)kr[d];") })
					w.Line("a += ab * ks[b];")
				})
			} else {
				w.For("d", "0", "HD", "1", 8, func() { w.Linef("a += qs[warp][d] * %s;", cacheLoad(s.Cache, "kr[d]")) })
			}
			s.capScore(w, "a")
			w.Line("sc = a;")
		})
		w.Line("const float mn = fmaxf(m, warp_max(sc));")
		w.Line("const float p = (j < nkeys) ? expf(sc - mn) : 0.f;")
		w.Line("const float corr = expf(m - mn);")
		w.Line("l = l * corr + warp_sum(p);")
		w.For("i", "0", "DPL", "1", -1, func() { w.Line("o[i] *= corr;") })
		w.Line("const int cnt = min(32, nkeys - j0);")
		w.For("jj", "0", "cnt", "1", 0, func() {
			w.Line("const float pj = __shfl_sync(0xffffffffu, p, jj);")
			w.Linef("const %s* vr = vc + PROW(pt, j0 + jj) * CROW + kvh * HD;", ct)
			if s.Cache == CacheQ8 {
				w.Line("const float* vs = (const float*)(vr - kvh * HD + HKV * HD) + kvh * (HD / 32); // the head's block scales")
				w.For("i", "0", "DPL", "1", -1, func() { w.Line("o[i] += pj * vs[i] * (float)(signed char)vr[lane + 32 * i];") })
			} else {
				w.For("i", "0", "DPL", "1", -1, func() {
					guard(func() { w.Linef("o[i] += pj * %s;", cacheLoad(s.Cache, "vr[lane + 32 * i]")) })
				})
			}
		})
		w.Line("m = mn;")
	})
	w.Line("float* orow = out + (size_t)t * HQ * HD + h * HD;")
	w.For("i", "0", "DPL", "1", -1, func() {
		guard(func() { w.Line("orow[lane + 32 * i] = o[i] / l;") })
	})
	w.Line("pdl_launch();")
}
