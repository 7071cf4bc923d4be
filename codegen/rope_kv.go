package codegen

import (
	"fmt"
	"slices"
)

// ropeHeadsPerThread is how many heads (of the q, k and v heads of a token)
// each thread of RopeKV handles: it computes the (cos, sin) of its pairs
// once and reuses them across these heads, loading all of them before
// storing any (one memory round trip).
const ropeHeadsPerThread = 2

// ropePlan is the thread → (unit, pair) mapping of RopeKV. A unit is one
// head of a token's fused QKV row: q heads 0..HQ-1, k heads HQ..HQ+HKV-1,
// v heads HQ+HKV..HQ+2·HKV-1. Thread tid of block (t, by) has head lane
// tid / Pairs and pair i0 = tid % Pairs; it handles pairs i0 + j·Threads
// (j < PPT) of units by·UPB + k·Lanes + lane (k < HPT).
type ropePlan struct {
	Threads int
	Pairs   int // HD/2 element pairs per head
	Lanes   int // head lanes per block: Threads/Pairs (1 when Threads < Pairs)
	PPT     int // pairs per thread: ⌈Pairs/Threads⌉ (1 when Threads ≥ Pairs)
	HPT     int // units per thread
	Units   int // HQ + 2·HKV
	UPB     int // units per block: Lanes·HPT
	Blocks  int // blocks per token: ⌈Units/UPB⌉
}

func newRopePlan(s RopeShape, threads int) ropePlan {
	p := ropePlan{Threads: threads, Pairs: s.HeadDim / 2, Units: s.Heads + 2*s.HeadsKV}
	p.Lanes, p.PPT = max(1, threads/p.Pairs), ceilDiv(p.Pairs, threads)
	p.HPT = min(ropeHeadsPerThread, ceilDiv(p.Units, p.Lanes))
	p.UPB = p.Lanes * p.HPT
	p.Blocks = ceilDiv(p.Units, p.UPB)
	return p
}

// laneGuard reports whether some threads of a block have no head lane
// (Threads ≥ Pairs but not a multiple of it).
func (p ropePlan) laneGuard() bool { return p.Threads > p.Pairs && p.Threads%p.Pairs != 0 }

// pairGuard reports whether pair i0 + j·Threads may run past Pairs.
func (p ropePlan) pairGuard() bool { return p.PPT > 1 && p.Pairs%p.Threads != 0 }

// ropePairs returns the element indices (a, b) of pair i of a head: the
// rotated pairs i < RopeDim/2 ((i, i+RopeDim/2) for NeoX, else (2i, 2i+1)),
// then the unrotated tail two by two. Over i < HeadDim/2 they cover every
// element of the head once; v heads are copied pair by pair with them too.
func (s RopeShape) ropePairs(i int) (a, b int) {
	switch {
	case !s.Half:
		return 2 * i, 2*i + 1
	case i < s.RopeDim/2:
		return i, i + s.RopeDim/2
	}
	a = s.RopeDim + 2*(i-s.RopeDim/2)
	return a, a + 1
}

// RopeKV returns the kernel that rotates q and k of each token's fused QKV
// row in place of q, and writes the rotated k and the plain v into the KV
// cache row slot[t] ([row][HeadsKV][HeadDim]; for the 8-bit cache the block
// stages its k and v heads in shared memory and quantises each block of 32
// with a warp):
//
//	rope_kv(float* qkv, const int* pos, const int* slot, const float* inv_freq,
//	        cache_t* kcache, cache_t* vcache, int ntok)
//
// inv_freq holds RopeDim/2 inverse frequencies, any scaling (linear, llama3)
// already applied. The k part of qkv is left as it was. grid (ntok, B): the
// q, k and v heads of a token are spread over B blocks (see ropePlan), each
// thread computing the sincosf of its pairs once for all its heads.
func RopeKV(s RopeShape, arm BlockArm) (*Kernel, error) { return ropeKV(s, arm, nil) }

// RopeKVNorm is RopeKV after the per-head RMSNorm of the q heads (weight
// wq) and the k heads (wk), HeadRMSNorm's work for a layer's q/k norms
// (qwen3, Gemma 3) in the same launch:
//
//	rope_kv_norm(float* qkv, const int* pos, const int* slot, const float* inv_freq,
//	             cache_t* kcache, cache_t* vcache, const float* wq, const float* wk, int ntok)
//
// Each head's sum of squares is added over the threads of its lane (a
// warp's sums, then the lane's warps in shared memory), so it needs head
// lanes of whole warps (HeadDim/2 a multiple of 32, arm.Threads a multiple
// of 32 and of HeadDim/2 where larger); the normalised head is x·r·w as
// HeadRMSNorm writes it, rotated after.
func RopeKVNorm(s RopeShape, eps float32, arm BlockArm) (*Kernel, error) {
	return ropeKV(s, arm, &eps)
}

// RopeKVNormFits reports whether RopeKVNorm supports s with arm.
func RopeKVNormFits(s RopeShape, arm BlockArm) bool {
	if s.validate() != nil || arm.Validate() != nil {
		return false
	}
	pl := newRopePlan(s, arm.Threads)
	return pl.Pairs%32 == 0 && arm.Threads%32 == 0 && !pl.laneGuard()
}

func ropeKV(s RopeShape, arm BlockArm, eps *float32) (*Kernel, error) {
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
	pl := newRopePlan(s, arm.Threads)
	q8 := s.Cache == CacheQ8
	if q8 && arm.Threads%32 != 0 {
		return nil, fmt.Errorf("%w: an 8-bit cache's RoPE + KV write quantises with whole warps (%d threads)", ErrUnsupported, arm.Threads)
	}
	norm, what, deps := "", "", append(cacheHelpers(s.Cache), "rope_rot", "pdl")
	if eps != nil {
		if !RopeKVNormFits(s, arm) {
			return nil, fmt.Errorf("%w: q/k norms in RoPE with head dim %d and %d threads", ErrUnsupported, s.HeadDim, arm.Threads)
		}
		norm, what, deps = "_norm", fmt.Sprintf("q/k norms (eps %g) + ", *eps), append(deps, "warp")
	}
	name := fmt.Sprintf("rope_kv%s_%s_h%d_%d_d%d_r%d_%s_%s", norm, style, s.Heads, s.HeadsKV, s.HeadDim, s.RopeDim, typeTag(s.Cache), arm)
	ct := cacheCType(s.Cache)
	params := []Param{{"float* __restrict__", "qkv"}, {"const int* __restrict__", "pos"}, {"const int* __restrict__", "slot"},
		{"const float* __restrict__", "inv_freq"}, {ct + "* __restrict__", "kcache"}, {ct + "* __restrict__", "vcache"}, {"int", "ntok"}}
	if eps != nil {
		params = slices.Insert(params, 6, Param{"const float* __restrict__", "wq"}, Param{"const float* __restrict__", "wk"})
	}
	src := source(fmt.Sprintf("%sRoPE (%s) + KV cache write: heads %d/%d, head dim %d, rope dim %d, %v cache, %v",
		what, style, s.Heads, s.HeadsKV, s.HeadDim, s.RopeDim, s.Cache, arm), deps, func(w *Writer) {
		s.defines(w)
		if eps != nil {
			w.Linef("#define EPS %s", cfloat(*eps))
			w.Linef("#define WPL %d // warps a head lane", min(pl.Pairs, arm.Threads)/32)
		}
		w.Linef("#define STRIDE %d", s.QKVStride())
		w.Linef("#define NT %d", arm.Threads)
		w.Linef("#define PAIRS %d // element pairs per head", pl.Pairs)
		w.Linef("#define LANES %d // head lanes per block", pl.Lanes)
		w.Linef("#define PPT %d // pairs per thread", pl.PPT)
		w.Linef("#define HPT %d // heads per thread", pl.HPT)
		w.Linef("#define UNITS %d // q, k and v heads per token", pl.Units)
		w.Linef("#define UPB %d // heads per block", pl.UPB)
		w.Blank()
		emitRopePair(w, s)
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			if q8 {
				w.Line("__shared__ float kvs[UPB][HD]; // the block's rotated k and plain v heads, quantised below")
			}
			w.Line("pdl_wait();")
			w.Line("const int t = blockIdx.x;")
			w.Line("const int lane = threadIdx.x / PAIRS, i0 = threadIdx.x % PAIRS;")
			body := func() {
				ropeBody(w, s, pl, ct, eps != nil)
			}
			if pl.laneGuard() {
				w.If("lane < LANES", body)
			} else {
				body()
			}
			if q8 {
				w.Line("__syncthreads();")
				w.Comment("a warp a block of 32 elements of the block's k and v heads")
				w.Line("u8* const kdst = kcache + (size_t)slot[t] * CROW;")
				w.Line("u8* const vdst = vcache + (size_t)slot[t] * CROW;")
				w.For("qb", "threadIdx.x >> 5", "UPB * (HD / 32)", "NT / 32", 0, func() {
					w.Line("const int li = qb / (HD / 32), e0 = (qb % (HD / 32)) * 32;")
					w.Line("const int u = blockIdx.y * UPB + li;")
					w.If("u < HQ || u >= UNITS", func() { w.Line("continue; // a q head, or none (warp-uniform)") })
					w.Line("const bool isk = u < HQ + HKV;")
					w.Line("const int c = (isk ? u - HQ : u - HQ - HKV) * HD + e0; // the block's first element in the cache row")
					w.Line("u8* const dst = isk ? kdst : vdst;")
					w.Line("const float x = kvs[li][e0 + (threadIdx.x & 31)];")
					emitCacheQuant(w, "x", "dst + c", "(float*)(dst + HKV * HD) + (c >> 5)")
				})
			}
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "rope_kv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, pl.Blocks, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// emitRopePair writes rope_pair(i, a, b), the elements (a, b) of pair i
// of a head (RopeShape.ropePairs), for RD defined.
func emitRopePair(w *Writer, s RopeShape) {
	w.Comment("Elements (a, b) of pair i of a head: rotated pairs first, then the tail.")
	w.Emit(Func{Name: "rope_pair", Params: []Param{{"int", "i"}, {"int&", "a"}, {"int&", "b"}}, Body: func(w *Writer) {
		if s.Half {
			w.IfElse("i < RD / 2", func() { w.Line("a = i; b = i + RD / 2;") },
				func() { w.Line("a = RD + 2 * (i - RD / 2); b = a + 1;") })
		} else {
			w.Line("a = 2 * i; b = a + 1;")
		}
	}})
}

// emitRopeNorms writes 1/rms of each of a thread's q and k heads (rn[k])
// from the loaded pairs: each thread's sum of squares of its pairs, the
// warp's sum, then the head lane's WPL warps added in shared memory (a
// barrier every thread of the block reaches: no lane guard, RopeKVNormFits).
func emitRopeNorms(w *Writer, pl ropePlan) {
	w.Comment("q and k heads: 1/rms of each head over its lane's threads, before the rotation")
	w.Line("__shared__ float red[HPT][NT / 32];")
	w.Line("float rn[HPT];")
	w.For("k", "0", "HPT", "1", -1, func() {
		w.Line("const int u = blockIdx.y * UPB + k * LANES + lane;")
		w.Line("float ss = 0.f;")
		w.For("j", "0", "PPT", "1", -1, func() {
			cond := "u < HQ + HKV"
			if pl.pairGuard() {
				cond += " && i0 + j * NT < PAIRS"
			}
			w.If(cond, func() { w.Line("ss += xa[k][j] * xa[k][j] + xb[k][j] * xb[k][j];") })
		})
		w.Line("ss = warp_sum(ss);")
		w.If("(threadIdx.x & 31) == 0", func() { w.Line("red[k][threadIdx.x >> 5] = ss;") })
	})
	w.Line("__syncthreads();")
	w.For("k", "0", "HPT", "1", -1, func() {
		w.Line("float ss = 0.f;")
		w.For("i", "0", "WPL", "1", -1, func() { w.Line("ss += red[k][lane * WPL + i];") })
		w.Line("rn[k] = rsqrtf(ss / (float)HD + EPS);")
	})
}

// ropeBody writes one thread's work: the (cos, sin) of its pairs, the loads
// of all its heads, then the rotations and stores; with norm the q and k
// heads normalised first (RopeKVNorm).
func ropeBody(w *Writer, s RopeShape, pl ropePlan, ct string, norm bool) {
	w.Line("float* row = qkv + (size_t)t * STRIDE;")
	w.Line("const float p = (float)pos[t];")
	if s.Cache != CacheQ8 {
		w.Line("const size_t crow = (size_t)slot[t] * CROW;")
	}
	w.Line("int pa[PPT], pb[PPT];")
	w.Line("float cs[PPT], sn[PPT];")
	w.Comment("the angles of this thread's pairs, shared by all its heads")
	w.For("j", "0", "PPT", "1", -1, func() {
		w.Line("const int i = i0 + j * NT;")
		w.Line("rope_pair(i, pa[j], pb[j]);")
		w.Line("cs[j] = 1.f; sn[j] = 0.f;")
		w.If("i < RD / 2", func() { w.Line("sincosf(p * inv_freq[i], &sn[j], &cs[j]);") })
	})
	// valid writes the guard of pair j of unit u (nil body guard when none)
	valid := func(body func()) {
		cond := "u < UNITS"
		if pl.pairGuard() {
			cond += " && i0 + j * NT < PAIRS"
		}
		w.If(cond, body)
	}
	w.Line("float xa[HPT][PPT], xb[HPT][PPT];")
	w.Comment("load every head first: one round trip to memory")
	w.For("k", "0", "HPT", "1", -1, func() {
		w.Line("const int u = blockIdx.y * UPB + k * LANES + lane;")
		w.For("j", "0", "PPT", "1", -1, func() {
			valid(func() {
				w.Line("const float* h = row + u * HD;")
				w.Line("xa[k][j] = h[pa[j]]; xb[k][j] = h[pb[j]];")
			})
		})
	})
	if norm {
		emitRopeNorms(w, pl)
	}
	w.For("k", "0", "HPT", "1", -1, func() {
		w.Line("const int u = blockIdx.y * UPB + k * LANES + lane;")
		w.For("j", "0", "PPT", "1", -1, func() {
			valid(func() {
				w.Line("float va = xa[k][j], vb = xb[k][j];")
				w.Line("const int a = pa[j], b = pb[j];")
				if norm {
					w.If("u < HQ + HKV", func() {
						w.Line("const float* nw = u < HQ ? wq : wk;")
						w.Line("va = va * rn[k] * nw[a]; vb = vb * rn[k] * nw[b]; // HeadRMSNorm's x·r·w")
					})
				}
				w.If("u < HQ + HKV && i0 + j * NT < RD / 2", func() {
					w.Line("rope_rot(va, vb, cs[j], sn[j]);")
				})
				w.IfElse("u < HQ", func() {
					w.Line("float* h = row + u * HD;")
					w.Line("h[a] = va; h[b] = vb;")
				}, func() {
					if s.Cache == CacheQ8 {
						w.Comment("k and v heads to shared memory: the block quantises them when all are in")
						w.Line("float* h = kvs[u - blockIdx.y * UPB];")
						w.Line("h[a] = va; h[b] = vb;")
						return
					}
					w.IfElse("u < HQ + HKV", func() {
						w.Linef("%s* kc = kcache + crow + (u - HQ) * HD;", ct)
						w.Line(cacheStore(s.Cache, "kc[a]", "va"))
						w.Line(cacheStore(s.Cache, "kc[b]", "vb"))
					}, func() {
						w.Linef("%s* vc = vcache + crow + (u - HQ - HKV) * HD;", ct)
						w.Line(cacheStore(s.Cache, "vc[a]", "va"))
						w.Line(cacheStore(s.Cache, "vc[b]", "vb"))
					})
				})
			})
		})
	})
}
