package codegen

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/ir/dtype"
)

// RouterNorm is a router's product with the RMSNorm before it in its
// prologue, for decode programs (a mixture of experts' norm, whose readers
// are the router and the experts' products, needs no launch of its own):
//
//	router_norm(const u8* W, const float* x, const float* nw, float* h, float* y, int m)
//
// Each block stages its token's residual row x in shared memory, sums its
// squares over the block, and normalises it there (x · 1/rms · nw, as
// RMSNormAdd computes an element); y = W·h as GEMV's float arm of the same
// geometry multiplies it. The blocks of a token also write the normalised
// row h for the experts' products that read it after the router, each
// block its share of the row's float4s. Every step class of a program runs
// this one kernel for every row (there is no one-row variant), so a row's
// logits and h do not depend on the rows beside it. grid (⌈n/rows⌉, m).
// Float arms with the row in shared memory (SharedX 1) only, K a multiple
// of 4.
//
// With quant the blocks also write h quantised for the experts' int8
// products (MoEXQ), XQuant(K, Prologue{})'s rows, each block its share of
// whole groups of 32 by XQuant's arithmetic (emitXQPack on the same
// floats), so that the experts need no XQuant launch:
//
//	router_norm(const u8* W, const float* x, const float* nw, float* h, u8* xq, float* y, int m)
func RouterNorm(t dtype.Type, n, k int, arm GEMVArm, eps float32, quant bool) (*Kernel, error) {
	if err := checkRow(t, k); err != nil {
		return nil, err
	}
	if err := arm.ValidFor(t); err != nil {
		return nil, err
	}
	if !RouterNormFits(arm) || n <= 0 || k%4 != 0 || (quant && k%32 != 0) {
		return nil, fmt.Errorf("%w: router_norm N %d, K %d, arm %v (want a float arm with the row in shared memory)", ErrUnsupported, n, k, arm)
	}
	rowBytes, _ := t.RowBytes(k)
	tpr := arm.Threads / arm.RowsPerBlock
	tag := ""
	params := []Param{{"const u8* __restrict__", "W"}, {"const float* __restrict__", "x"}, {"const float* __restrict__", "nw"},
		{"float* __restrict__", "h"}, {"float* __restrict__", "y"}, {"int", "m"}}
	if quant {
		tag = "_xq"
		params = slices.Insert(params, 4, Param{"u8* __restrict__", "xq"})
	}
	name := fmt.Sprintf("router_norm_%s_n%d_k%d%s_%s", typeTag(t), n, k, tag, arm)
	title := fmt.Sprintf("router_norm: %v weights, N %d, K %d, eps %g, quantised rows %v, %v", t, n, k, eps, quant, arm)
	src := source(title, []string{dqHelper(t), "warp", "pdl", "norm4"}, func(w *Writer) {
		if quant {
			emitXQPack4(w)
			w.Linef("#define XR %d // bytes of a quantised row", XQRowBytes(k))
		}
		w.Linef("#define N %d", n)
		w.Linef("#define K %d", k)
		w.Linef("#define EPS %s", cfloat(eps))
		w.Linef("#define ROW_BYTES %d", rowBytes)
		w.Linef("#define TPR %d // threads per row", tpr)
		w.Linef("#define RPB %d // rows per block", arm.RowsPerBlock)
		w.Linef("#define THREADS %d", arm.Threads)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("const int r = blockIdx.x * RPB + threadIdx.x / TPR;")
			w.Line("const int lane = threadIdx.x % TPR;")
			w.Line("const u8* wr = W + (size_t)r * ROW_BYTES;")
			w.Line("extern __shared__ float4 xs4[];")
			w.Line("__shared__ float red[32];")
			w.Line("pdl_wait();")
			w.Line("const float4* xg = (const float4*)(x + (size_t)blockIdx.y * K);")
			w.Line("float ss = 0.f;")
			w.For("i", "threadIdx.x", "K / 4", "THREADS", 0, func() {
				w.Line("const float4 v = xg[i];")
				w.Line("xs4[i] = v;")
				w.Line("ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;")
			})
			blockReduce(w, "ss", "total", "sum", arm.Threads)
			w.Line("const float rs = rsqrtf(total / (float)K + EPS);")
			w.Comment("each thread normalises the float4s it staged")
			w.Line("const float4* nw4 = (const float4*)nw;")
			w.For("i", "threadIdx.x", "K / 4", "THREADS", 0, func() { w.Line("xs4[i] = norm4(xs4[i], rs, nw4[i]);") })
			w.Line("__syncthreads();")
			w.Comment("the token's blocks write h, each its share of the row")
			w.Line("const int share = (K / 4 + gridDim.x - 1) / gridDim.x;")
			w.Line("const int h0 = blockIdx.x * share, h1 = min(h0 + share, K / 4);")
			w.Line("float4* hr = (float4*)(h + (size_t)blockIdx.y * K);")
			w.For("i", "h0 + threadIdx.x", "h1", "THREADS", 0, func() { w.Line("hr[i] = xs4[i];") })
			if quant {
				emitRouterQuant(w)
			}
			w.Line("const float* xs = (const float*)xs4;")
			emitFloatRowDot(w, t, n, arm, tpr, false)
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.RowsPerBlock), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1), Shared: uint32(4 * k)}
	}}, nil
}

// RouterNormFits reports whether a router's arm has a RouterNorm kernel:
// a float arm on the file's layout with the activation row in shared
// memory.
func RouterNormFits(arm GEMVArm) bool {
	return arm.Validate() == nil && arm.XQ == 0 && arm.Layout == 0 && arm.SharedX == 1
}

// emitRouterQuant writes RouterNorm's quantised rows: the token's blocks
// each quantise their share of whole groups of 32 of the normalised row
// in shared memory (xs4) into xq's row, chunks of 8 as XQuant takes them
// (4 consecutive threads a group, every thread of the block in the loop
// for the shuffles).
func emitRouterQuant(w *Writer) {
	w.Comment("the token's blocks write its quantised row (XQuant's), each its share of whole groups")
	w.Line("const int gs = (K / 32 + gridDim.x - 1) / gridDim.x; // groups a block")
	w.Line("const int c0 = blockIdx.x * gs * 4, c1 = min(c0 + gs * 4, K / 8); // its chunks of 8")
	w.Line("u8* qr = xq + (size_t)blockIdx.y * XR;")
	w.Line("float4* meta = (float4*)(qr + K);")
	emitQuantChunks(w, "c0", "c1", "xs4", "qr")
}

// emitQuantChunks writes the quantisation of chunks of 8 floats c0…c1−1
// of the float4s src into the int8 values at q and the groups' float4s at
// meta, as XQuant writes them: a thread a chunk, 4 consecutive threads a
// group (c0 a multiple of 4; every thread of the block in the loop for
// the shuffles).
func emitQuantChunks(w *Writer, c0, c1, src, q string) {
	w.Block(fmt.Sprintf("for (int cb = %s; cb < %s; cb += THREADS)", c0, c1), func() {
		w.Line("const int c = cb + threadIdx.x;")
		w.Linef("const bool ok = c < %s;", c1)
		w.Linef("const float4 a = ok ? %s[2 * c] : make_float4(0.f, 0.f, 0.f, 0.f);", src)
		w.Linef("const float4 b = ok ? %s[2 * c + 1] : make_float4(0.f, 0.f, 0.f, 0.f);", src)
		emitXQPack(w, q+" + 8 * c", "meta[c >> 2]")
	})
}
