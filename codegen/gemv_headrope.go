package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// A decode step's RoPE, and the q/k head norms before it, in the QKV
// products (XQEnds.HeadRope): the block that finishes a head's rows last
// does RopeKV's work (RopeKVNorm's with HeadNorm) for that head, so a
// one-sequence program launches no RoPE kernel. XQEnds.Rope rotates in
// each warp's registers and needs adjacent pairs and no norm; a head's
// last block has the whole head, so NeoX pairs (qwen2, qwen3, Gemma) and
// the head's sum of squares are in reach.

// xqHeadRopeParams are the parameters of an XQ 2 product with
// XQEnds.HeadRope: XQEnds.Rope's, the q and k norms' weights with
// HeadNorm, and a ticket a (block row, head):
//
//	gemv_…_hrope…(W, xq, y, int m, pos, slot, inv_freq, kcache, vcache [, const float* wq, const float* wk], int* tickets)
func xqHeadRopeParams(cache dtype.Type, norm bool) []Param {
	p := xqRopeParams(cache)
	if norm {
		p = append(p, Param{"const float* __restrict__", "wq"}, Param{"const float* __restrict__", "wk"})
	}
	return append(p, Param{"int* __restrict__", "tickets"})
}

// headRopeTickets is the tickets a HeadRope product of shape s takes for
// tokens activation rows: one a token and head (at most; a block of
// several activation rows takes one for all of them).
func headRopeTickets(s RopeShape, tokens int) int { return tokens * (s.Heads + 2*s.HeadsKV) }

// headRopeFits reports why an XQ 2 product of n rows with arm cannot take
// e's HeadRope epilogue (nil if it can, or if e has none): it writes whole
// heads of the fused row into a float row (no residual, no other
// epilogue, an f16/bf16/f32 cache), its blocks each hold part of one head
// (whole rows: a block's rows divide the head dim), and it has at least a
// head's pairs of threads (RopeKV's thread a pair; with HeadNorm whole
// warps of them, as RopeKVNorm adds a head's squares).
func (e XQEnds) headRopeFits(n int, residual bool, arm GEMVArm) error {
	if !e.HeadRope {
		return nil
	}
	r := e.RopeShape
	if err := r.validate(); err != nil {
		return err
	}
	rb, pairs := arm.RowsPerBlock*arm.rowsPerWarp(), r.HeadDim/2
	if arm.XQ != 2 || residual || e.QuantOut || e.SwiGLUOut || e.Rope || e.PostNorm || r.Cache == CacheQ8 ||
		e.RopeCol0%r.HeadDim != 0 || n%r.HeadDim != 0 || e.RopeCol0+n > r.QKVStride() || r.HeadDim%rb != 0 ||
		arm.Threads < pairs || (e.HeadNorm && pairs%32 != 0) {
		return fmt.Errorf("%w: head RoPE epilogue (norm %v) for N %d at column %d of %d, arm %v (%d rows a block), residual %v, %v cache",
			ErrUnsupported, e.HeadNorm, n, e.RopeCol0, r.QKVStride(), arm, rb, residual, r.Cache)
	}
	return nil
}

// headRopeSuffix is the kernel name part of e's HeadRope.
func (e XQEnds) headRopeSuffix() string {
	r, norm := e.RopeShape, ""
	if e.HeadNorm {
		norm = "n"
	}
	style := "i"
	if r.Half {
		style = "h"
	}
	return fmt.Sprintf("_hrope%s%s_h%d_%d_d%d_r%d_%s_c%d", norm, style, r.Heads, r.HeadsKV, r.HeadDim, r.RopeDim, typeTag(r.Cache), e.RopeCol0)
}

// emitHeadRopeDefines writes the defines and the pair function of a
// HeadRope product besides the RoPE shape's and C0 (Rope's too).
func emitHeadRopeDefines(w *Writer, e XQEnds) {
	r := e.RopeShape
	w.Linef("#define PAIRS %d // element pairs a head", r.HeadDim/2)
	w.Linef("#define UNITS %d // q, k and v heads a token", r.Heads+2*r.HeadsKV)
	if e.HeadNorm {
		w.Linef("#define EPS %s", cfloat(e.HeadNormEps))
		w.Linef("#define WPL %d // warps a head's pairs", r.HeadDim/64)
	}
	emitRopePair(w, r)
}

// emitHeadRopeTail writes the end of a HeadRope product: each block takes
// a ticket of its (block row, head) once its rows are stored and fenced;
// the block that takes the last does, for each activation row of the
// block row, RopeKV's work for the head with its first PAIRS threads, one
// pair a thread (RopeKVNorm's head lane of threads, so the head's sum of
// squares adds as RopeKVNorm's: each thread's pair, the warp's sum, the
// warps in order): q normalised and rotated into y, k normalised and
// rotated and v as computed into the cache row slot[token].
func emitHeadRopeTail(w *Writer, e XQEnds, rb int) {
	r := e.RopeShape
	ct := cacheCType(r.Cache)
	w.Comment("RopeKV's work for the block's head, in the block that finishes the head last")
	w.Linef("const int hu = (C0 + blockIdx.x * %d) / HD; // the block's head: q, k or v", rb)
	emitLastBlock(w, "tickets + blockIdx.y * UNITS + hu", fmt.Sprint(r.HeadDim/rb), "this block's rows of the head", func() {
		if e.HeadNorm {
			w.Line("__shared__ float red[WPL];")
		}
		w.Line("const int i0 = threadIdx.x; // the head's pair, as RopeKV's thread of a head lane")
		w.Line("int a = 0, b = 0;")
		w.Line("float cs = 1.f, sn = 0.f;")
		w.If("i0 < PAIRS", func() { w.Line("rope_pair(i0, a, b);") })
		w.Line("#pragma unroll 1")
		w.Block("for (int j = 0; j < mrows; ++j)", func() {
			w.Line("const int tok = m0 + j;")
			w.Line("float* h = y + (size_t)tok * YS + hu * HD - C0; // the head in the grid's rows")
			w.Line("float va = 0.f, vb = 0.f;")
			w.If("i0 < PAIRS", func() { w.Line("va = __ldcg(h + a); vb = __ldcg(h + b);") })
			if e.HeadNorm {
				w.If("hu < HQ + HKV", func() {
					w.Comment("1/rms of the head: RopeKVNorm's sums (block-uniform branch)")
					w.Line("float ss = 0.f;")
					w.If("i0 < PAIRS", func() { w.Line("ss += va * va + vb * vb;") })
					w.Line("ss = warp_sum(ss);")
					w.If("(threadIdx.x & 31) == 0 && i0 < PAIRS", func() { w.Line("red[threadIdx.x >> 5] = ss;") })
					w.Line("__syncthreads();")
					w.Line("ss = 0.f;")
					w.For("i", "0", "WPL", "1", -1, func() { w.Line("ss += red[i];") })
					w.Line("const float rn = rsqrtf(ss / (float)HD + EPS);")
					w.Line("__syncthreads(); // red read before the next row's sums")
					w.If("i0 < PAIRS", func() {
						w.Line("const float* nw = hu < HQ ? wq : wk;")
						w.Line("va = va * rn * nw[a]; vb = vb * rn * nw[b]; // HeadRMSNorm's x·r·w")
					})
				})
			}
			w.If("i0 < PAIRS", func() {
				w.If("hu < HQ + HKV && i0 < RD / 2", func() {
					w.Line("sincosf((float)pos[tok] * inv_freq[i0], &sn, &cs);")
					w.Line("rope_rot(va, vb, cs, sn); // as RopeKV rotates it")
				})
				w.IfElse("hu < HQ", func() {
					w.Line("h[a] = va; h[b] = vb;")
				}, func() {
					w.Line("const size_t crow = (size_t)slot[tok] * CROW;")
					w.Linef("%s* c = hu < HQ + HKV ? kcache + crow + (hu - HQ) * HD : vcache + crow + (hu - HQ - HKV) * HD;", ct)
					w.Line(cacheStore(r.Cache, "c[a]", "va"))
					w.Line(cacheStore(r.Cache, "c[b]", "vb"))
				})
			})
		})
	})
	w.Comment("the trigger after every write of the block")
	w.Line("pdl_launch();")
}

// headRopeInProducts gives the product launches that wrote the fused
// [q | k | v] rows qkv the HeadRope epilogue, with the layer's q/k norms
// hn when not nil, and reports whether it did: a one-sequence decode
// program whose q, k and v are products' (fromProducts), written by plain
// XQ 2 launches of one kernel that cover the row, each of whole heads
// (headRopeFits), and with hn a RoPE arm of a thread a pair, whose sums
// the tail repeats (RopeKVNorm of more pairs a thread adds them in another
// order). It changes nothing unless all of that holds.
func (l *lowerer) headRopeInProducts(q, k, v *ir.Node, qkv view, rs RopeShape, inv, layer int, nodes []int, hn *ropeNorm, ropeArm BlockArm) (bool, error) {
	qs, ks := q.Args[0], k.Args[0]
	if hn != nil {
		qs, ks = qs.Args[0], ks.Args[0] // the norms' inputs: the tail normalises them
	}
	if !l.tailOn(TailHeadRope) || !l.o.RopeInProduct || l.o.Class != Decode || l.o.MaxSeqs != 1 || rs.Cache == CacheQ8 ||
		(hn != nil && ropeArm.Threads < rs.HeadDim/2) || !fromProducts(qs, ks, v) {
		return false, nil
	}
	idx := l.qkvLaunches(qkv, rs)
	if idx == nil {
		return false, nil
	}
	kerns := make([]int, len(idx))
	for j, i := range idx {
		xl := l.xqLaunches[i]
		if xl.arm.XQ != 2 || xl.one != (GEMVArm{}) || xl.large != (GEMVArm{}) || xl.e.Rope || xl.e.PostNorm {
			return false, nil
		}
		e := xl.e
		e.HeadRope, e.RopeShape, e.RopeCol0 = true, rs, xl.y.off-qkv.off
		if hn != nil {
			e.HeadNorm, e.HeadNormEps = true, hn.shape.Eps
		}
		kn, err := l.optionalKernel(xl.gen(xl.arm, e))
		if err != nil || kn < 0 {
			return false, err
		}
		l.repacked[kn] = true
		kerns[j] = kn
	}
	for j, i := range idx {
		ln := &l.p.Launches[i]
		ln.Kernel = kerns[j]
		ln.Args = append(ln.Args, inArg(InPositions), inArg(InSlots), wArg(inv), cacheArg(layer, false), cacheArg(layer, true))
		if hn != nil {
			ln.Args = append(ln.Args, hn.args[1:]...) // the q and k norms' weights
		}
		ln.Args = append(ln.Args, l.ticketsArg(headRopeTickets(rs, l.o.MaxTokens)))
		if j == 0 {
			ln.Nodes = append(ln.Nodes, nodes...)
		}
		delete(l.xqLaunches, i)
	}
	return true, nil
}
