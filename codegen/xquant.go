package codegen

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/ir/dtype"
)

// Activations quantised once per product (GEMVArm.XQ 2). An XQuant launch
// computes the product's prologue (RMSNorm, SwiGLU) and quantises each
// activation row to int8 the way the XQ 1 stage does, into a buffer row of
// XQRowBytes(k): the k int8 values, then k/32 float4 (dx, int8 sum of the
// group's elements 0-15, of 16-31, float sum of the 32), then k/32 floats,
// the sums of squares of the groups' inputs (written for a norm's rows
// only), padded to 16 bytes. The products read those rows from global
// memory (through L1, shared by the block's warps) instead of staging and
// quantising in every block, so a block starts on its weights at once, and
// the products that share an input (Q, K and V of different weight types)
// share one XQuant.
//
// A norm's rows are quantised before the norm's 1/rms is known: the groups
// hold x·nw, and the products that read them (GEMVXQ with XQEnds.NormIn)
// sum the groups' squares of x into the row's 1/rms and scale their results
// by it. Quantising is per group and the product linear in each row's
// factors, so the int8 values are those of the normalised row, and no
// quantiser needs the whole row: a residual product can write the next
// norm's rows in its epilogue (XQEnds.QuantOut), one group of 32 outputs
// at a time, and no XQuant launch is left between them.

// XQRowBytes is the bytes of one quantised activation row of k elements.
func XQRowBytes(k int) int { return k + k/2 + xqSSQBytes(k) }

// xqSSQBytes is the bytes of a quantised row's group sums of squares.
func xqSSQBytes(k int) int { return (k/8 + 15) / 16 * 16 }

// xquantMaxLoads is the most chunks of 8 floats one XQuant thread holds: a
// row is loaded once, kept in registers through the norm's reduction, and
// quantised from them.
const xquantMaxLoads = 4

// xquantThreads is XQuant's block size for rows of k: about two chunks of
// 8 a thread, whole warps, at most 1024 threads.
func xquantThreads(k int) int {
	return min(1024, max(32, roundUp32((k/8+1)/2)))
}

// XQuant returns the quantiser of the XQ 2 products with rows of k:
//
//	xquant(const float* x, [const float* nw,] u8* xq, int m)
//
// Row r of xq (XQRowBytes(k) bytes) is the int8 quantisation of row r of
// x; with ProNorm of x · nw with the groups' sums of squares of x (the
// products apply 1/rms(x)), with ProSwiGLU of silu(gate) · up where x holds
// rows of 2k, [gate | up]. One block a row, grid (m).
func XQuant(k int, pro Prologue) (*Kernel, error) {
	threads := xquantThreads(k)
	loads := (k/8 + threads - 1) / threads
	if k <= 0 || k%32 != 0 || loads > xquantMaxLoads {
		return nil, fmt.Errorf("%w: int8 activation quantiser for rows of %d", ErrUnsupported, k)
	}
	name := fmt.Sprintf("xquant_k%d%s", k, pro.suffix())
	params := []Param{{"const float* __restrict__", "x"}, {"u8* __restrict__", "xq"}, {"int", "m"}}
	if pro.Kind == ProNorm {
		params = []Param{{"const float* __restrict__", "x"}, {"const float* __restrict__", "nw"}, {"u8* __restrict__", "xq"}, {"int", "m"}}
	}
	src := source(fmt.Sprintf("xquant: rows of %d to int8 for the products that read them, prologue %q", k, pro.suffix()),
		proDeps(pro, "types", "warp", "pdl"), func(w *Writer) {
			emitXQPack4(w)
			w.Linef("#define K %d", k)
			w.Linef("#define XR %d // bytes of a quantised row", XQRowBytes(k))
			w.Linef("#define SL %d // chunks of 8 a thread", loads)
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
				xs := "K"
				if pro.Kind == ProSwiGLU {
					xs = "2 * K"
				}
				w.Line("const int row = blockIdx.x;")
				w.Linef("const float4* xp = (const float4*)(x + (size_t)row * %s);", xs)
				w.Line("u8* qr = xq + (size_t)row * XR;")
				w.Line("float4* meta = (float4*)(qr + K);")
				w.Line("pdl_wait();")
				emitXQuantRow(w, pro, threads)
				w.Line("pdl_launch();")
			}})
		})
	return &Kernel{Family: "xquant", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(max(1, d.Tokens), 1, 1), Block: dim3(threads, 1, 1)}
	}}, nil
}

// emitXQuantRow writes the quantisation of one row of K floats at xp into
// qr (int8 values) and meta (the groups' factors), by threads threads: SL
// chunks of 8 a thread, 4 consecutive threads a group of 32, each chunk's
// arithmetic rounded as written, so that the bytes depend on the row alone,
// not on the thread count (PostNormAddQuant writes XQuant's bytes so).
func emitXQuantRow(w *Writer, pro Prologue, threads int) { emitXQuantRowLd(w, pro, threads, "") }

// emitXQuantRowLd is emitXQuantRow with the row's loads made by ld ("" or
// "__ldcg": other blocks of the grid wrote the row). ProNorm and plain
// rows only take ld.
func emitXQuantRowLd(w *Writer, pro Prologue, threads int, ld string) {
	w.Line("float4 la[SL], lb[SL];")
	w.For("s", "0", "SL", "1", -1, func() {
		w.Linef("const int c = threadIdx.x + s * %d;", threads)
		w.Line("la[s] = make_float4(0.f, 0.f, 0.f, 0.f);")
		w.Line("lb[s] = la[s];")
		w.If("c < K / 8", func() {
			if pro.Kind == ProSwiGLU {
				w.Line("la[s] = swiglu4(xp[2 * c], xp[K / 4 + 2 * c]);")
				w.Line("lb[s] = swiglu4(xp[2 * c + 1], xp[K / 4 + 2 * c + 1]);")
			} else if ld != "" {
				w.Linef("la[s] = %s(xp + 2 * c);", ld)
				w.Linef("lb[s] = %s(xp + 2 * c + 1);", ld)
			} else {
				w.Line("la[s] = xp[2 * c];")
				w.Line("lb[s] = xp[2 * c + 1];")
			}
		})
	})
	if pro.Kind == ProNorm {
		w.Comment("x · nw, and each chunk's sum of squares of x")
		w.Line("float sq[SL];")
		w.For("s", "0", "SL", "1", -1, func() {
			w.Linef("const int c = threadIdx.x + s * %d;", threads)
			w.Line("const float4 a = la[s], b = lb[s];")
			w.Comment("squares and sums rounded as written: the tree of warp_sum_up(x · x) in QuantOut's epilogue")
			w.Line("sq[s] = __fadd_rn(__fadd_rn(__fadd_rn(__fmul_rn(a.x, a.x), __fmul_rn(a.y, a.y)), __fadd_rn(__fmul_rn(a.z, a.z), __fmul_rn(a.w, a.w))),")
			w.Line("                  __fadd_rn(__fadd_rn(__fmul_rn(b.x, b.x), __fmul_rn(b.y, b.y)), __fadd_rn(__fmul_rn(b.z, b.z), __fmul_rn(b.w, b.w))));")
			w.If("c < K / 8", func() {
				w.Line("la[s] = norm4(la[s], 1.f, *(const float4*)(nw + 8 * c));")
				w.Line("lb[s] = norm4(lb[s], 1.f, *(const float4*)(nw + 8 * c + 4));")
			})
		})
	}
	w.Comment("4 consecutive threads quantise a group of 32 (every lane runs the shuffles)")
	w.For("s", "0", "SL", "1", -1, func() {
		w.Linef("const int c = threadIdx.x + s * %d;", threads)
		w.Line("const bool ok = c < K / 8;")
		w.Line("const float4 a = la[s], b = lb[s];")
		emitXQPack(w, "qr + 8 * c", "meta[c >> 2]")
		if pro.Kind == ProNorm {
			w.Line("float g2 = __fadd_rn(sq[s], __shfl_xor_sync(0xffffffffu, sq[s], 1));")
			w.Line("g2 = __fadd_rn(g2, __shfl_xor_sync(0xffffffffu, g2, 2));")
			w.If("ok && (c & 3) == 0", func() { w.Line("((float*)(qr + K + K / 2))[c >> 2] = g2;") })
		}
	})
}

// XQEnds are the optional ends of an XQ 2 or 3 product (GEMVXQ).
type XQEnds struct {
	// NormIn: the activation rows are a norm's (XQuant ProNorm, or a
	// residual product's QuantOut): the product scales each row's result
	// by 1/rms from the rows' group sums of squares, with this epsilon.
	NormIn  bool
	NormEps float32
	// QuantOut (residual products, XQ 2): the epilogue also writes the new
	// residual row as the next norm's quantised rows (x·nw per group of 32
	// with the groups' sums of squares) into xo, so that the next products
	// need no XQuant launch. Needs whole groups of 32 rows a block.
	QuantOut bool
	// SwiGLUOut (gate/up products, XQ 2): W's rows are [gate | up] (the
	// two halves concatenated, as every other product of them reads them),
	// taken in pairs of 32 gate rows and the same 32 up rows (GateUpRow),
	// and instead of y the epilogue writes silu(gate)·up quantised into
	// xo, rows of n/2, for the down product. Needs whole pairs of 32 gate
	// and 32 up rows a block.
	SwiGLUOut bool
	// GeLU (with SwiGLUOut): the gate's activation is GELU's tanh form, as
	// Gemma's GeGLU has it, not SiLU: the epilogue writes
	// gelu_tanh(gate)·up quantised, as the GeGLU kernel and XQuant after it
	// would.
	GeLU bool
	// Rope (XQ 2 with two or four weight rows a warp, no residual): the
	// product's rows are columns RopeCol0… of a decode step's fused
	// [q | k | v] rows of shape RopeShape (adjacent pairs, not NeoX), and
	// the epilogue does RopeKV's work for them: q rotated into y, k rotated
	// and v as it is into the KV cache row slot[token] (y keeps k and v as
	// computed, as RopeKV leaves them), so the program launches no RopeKV.
	Rope      bool
	RopeShape RopeShape
	RopeCol0  int
	// PostNorm (XQ 2, no residual): the product's rows are a Gemma
	// post-norm's input, whose work the block that finishes last does
	// (gemv_postnorm.go); PostNormEps and PostNormThreads are the norm's.
	PostNorm        bool
	PostNormEps     float32
	PostNormThreads int
	// HeadRope (XQ 2, no residual): Rope's work for whole heads by the
	// block that finishes a head last, RopeKVNorm's with HeadNorm (epsilon
	// HeadNormEps): NeoX pairs and q/k norms too (gemv_headrope.go).
	HeadRope    bool
	HeadNorm    bool
	HeadNormEps float32
}

// suffix is the kernel name part of e.
func (e XQEnds) suffix() string {
	s := ""
	if e.NormIn {
		s += "_rn"
	}
	if e.QuantOut {
		s += "_qo"
	}
	switch {
	case e.SwiGLUOut && e.GeLU:
		s += "_go"
	case e.SwiGLUOut:
		s += "_so"
	}
	if e.Rope {
		r := e.RopeShape
		s += fmt.Sprintf("_rope_h%d_%d_d%d_r%d_%s_c%d", r.Heads, r.HeadsKV, r.HeadDim, r.RopeDim, typeTag(r.Cache), e.RopeCol0)
	}
	if e.PostNorm {
		s += fmt.Sprintf("_pn%d", e.PostNormThreads)
	}
	if e.HeadRope {
		s += e.headRopeSuffix()
	}
	return s
}

// outRows is the weight rows a block must hold whole for e's epilogue: 32
// (a group of outputs) for QuantOut, 64 (32 gate and 32 up rows) for
// SwiGLUOut, else 1.
func (e XQEnds) outRows() int {
	switch {
	case e.SwiGLUOut:
		return 64
	case e.QuantOut:
		return 32
	}
	return 1
}

// QuantOutFits reports whether a product of n rows with arm can take
// e's epilogue: an XQ 2 arm whose blocks hold whole groups of e.outRows()
// rows, and n a multiple of a block's rows.
func QuantOutFits(arm GEMVArm, n int, e XQEnds) bool {
	rb := arm.RowsPerBlock * arm.rowsPerWarp()
	return arm.XQ == 2 && rb%e.outRows() == 0 && n%rb == 0
}

// FitQuantOut returns arm with enough rows a block for e's epilogue (four
// weight rows a warp, then the warps of a split arm on rows of their own,
// then twice the warps) and whether it fits n rows.
func FitQuantOut(arm GEMVArm, n int, e XQEnds) (GEMVArm, bool) { return fitQuantOut(arm, n, e, false) }

// fitQuantOut is FitQuantOut, keeping arm's split with keepSplit (the
// int8 invariant class, whose products add in the order of their split).
func fitQuantOut(arm GEMVArm, n int, e XQEnds, keepSplit bool) (GEMVArm, bool) {
	for arm.XQ == 2 && (arm.RowsPerBlock*arm.rowsPerWarp())%e.outRows() != 0 {
		switch {
		case arm.rowsPerWarp() < 4:
			arm.RowsPerWarp = 4
		case arm.kSplit() > 1 && !keepSplit:
			arm.RowsPerBlock *= 2
		case arm.Threads < 1024:
			arm.Threads, arm.RowsPerBlock = 2*arm.Threads, 2*arm.RowsPerBlock
		default:
			return arm, false
		}
	}
	return arm, QuantOutFits(arm, n, e)
}

// GateUpRow is the row of a [gate | up] matrix of n rows (two halves of
// n/2) that a SwiGLUOut product takes as its row r: rows are taken in
// pairs of groups, 32 gate rows and the same 32 up rows, so that a block
// holding whole pairs computes silu(gate)·up of its outputs. The kernels'
// GU_ROW.
func GateUpRow(r, n int) int { return (r>>5&1)*(n/2) + r>>6*32 + r&31 }

// xqGlobalParams are the parameters of an XQ 2 product.
var xqGlobalParams = []Param{{"const u8* __restrict__", "W"}, {"const u8* __restrict__", "xq"}, {"float* __restrict__", "y"}, {"int", "m"}}

// xqQuantOutParams are the parameters of an XQ 2 product with
// XQEnds.QuantOut: the next norm's weight and its quantised rows.
var xqQuantOutParams = append(slices.Clone(xqGlobalParams), Param{"const float* __restrict__", "nw"}, Param{"u8* __restrict__", "xo"})

// xqSwiGLUOutParams are the parameters of an XQ 2 product with
// XQEnds.SwiGLUOut: its output is the down product's quantised rows.
var xqSwiGLUOutParams = []Param{{"const u8* __restrict__", "W"}, {"const u8* __restrict__", "xq"}, {"u8* __restrict__", "xo"}, {"int", "m"}}

// xqRopeParams are the parameters of an XQ 2 product with XQEnds.Rope:
// RopeKV's positions, cache rows, inverse frequencies and the layer's
// caches (of the cache element type, named by cacheCType).
func xqRopeParams(cache dtype.Type) []Param {
	ct := cacheCType(cache)
	return append(slices.Clone(xqGlobalParams), Param{"const int* __restrict__", "pos"}, Param{"const int* __restrict__", "slot"},
		Param{"const float* __restrict__", "inv_freq"}, Param{ct + "* __restrict__", "kcache"}, Param{ct + "* __restrict__", "vcache"})
}

// GEMVXQ returns the product of an XQ 2 or 3 arm over the rows an XQuant
// launch (or a QuantOut epilogue) wrote, or of an XQ 4 arm over the rows
// of an XHalf launch, with ends e:
//
//	gemv(const u8* W, const u8* xq, float* y, int m [, const float* nw, u8* xo])
//
// ystride as GEMVInto's.
func GEMVXQ(t dtype.Type, n, k int, residual bool, arm GEMVArm, e XQEnds, ystride int) (*Kernel, error) {
	if err := checkRow(t, k); err != nil {
		return nil, err
	}
	if err := arm.ValidFor(t); err != nil || arm.XQ < 2 {
		return nil, fmt.Errorf("%w: gemv on quantised rows for %v and arm %v", ErrUnsupported, t, arm)
	}
	if _, ok := rpTypes[t]; !ok || xqPrep[t] == "" || k%32 != 0 {
		return nil, fmt.Errorf("%w: int8-activation gemv for %v, K %d", ErrUnsupported, t, k)
	}
	if n <= 0 || (ystride != 0 && ystride < n) {
		return nil, fmt.Errorf("%w: gemv N %d, output stride %d", ErrUnsupported, n, ystride)
	}
	if ystride == n {
		ystride = 0
	}
	if e.QuantOut && (!residual || ystride != 0 || !QuantOutFits(arm, n, e)) {
		return nil, fmt.Errorf("%w: quantised-output epilogue for N %d, arm %v, residual %v", ErrUnsupported, n, arm, residual)
	}
	if e.GeLU && !e.SwiGLUOut {
		return nil, fmt.Errorf("%w: a GELU without the gated output epilogue", ErrUnsupported)
	}
	if e.SwiGLUOut && (residual || e.QuantOut || ystride != 0 || !QuantOutFits(arm, n, e)) {
		return nil, fmt.Errorf("%w: SwiGLU-output epilogue for N %d, arm %v, residual %v", ErrUnsupported, n, arm, residual)
	}
	if e.Rope {
		r := e.RopeShape
		if err := r.validate(); err != nil {
			return nil, err
		}
		if arm.XQ != 2 || arm.rowsPerWarp()%2 != 0 || residual || e.QuantOut || e.SwiGLUOut || r.Half || r.Cache == CacheQ8 ||
			e.RopeCol0%2 != 0 || n%2 != 0 || e.RopeCol0+n > r.QKVStride() {
			return nil, fmt.Errorf("%w: RoPE epilogue for N %d at column %d of %d, arm %v, residual %v, NeoX %v, %v cache",
				ErrUnsupported, n, e.RopeCol0, r.QKVStride(), arm, residual, r.Half, r.Cache)
		}
	}
	if err := e.postNormFits(n, residual, arm, ystride); err != nil {
		return nil, err
	}
	if err := e.headRopeFits(n, residual, arm); err != nil {
		return nil, err
	}
	if arm.XQ == 4 {
		return gemvMMAH(t, n, k, residual, arm, e, ystride)
	}
	if arm.XQ == 3 {
		return gemvMMA8(t, n, k, residual, arm, e, ystride)
	}
	return gemvXQGlobal(t, n, k, residual, arm, e, ystride)
}

// emitXQRowNorms writes 1/rms of each activation row j of the block from
// its group sums of squares at xb + j * XR + K + K/2, and returns the
// expression of row j's value for the code after the main loop. A block of
// one row keeps it in a register of every lane (rn[j]); a block of more
// rows computes each row's once, a warp a row, into shared memory (srn[j],
// read after a __syncthreads the caller writes; emitXQNormBarrier): every
// warp computing all of them held MB more registers through the main loop
// and cost batch 16 a tenth of its speed on the H200.
func emitXQRowNorms(w *Writer, eps float32, xb string, mb int) string {
	if mb == 1 {
		w.Line("float rn[MB];")
		w.Line("float s2 = 0.f;")
		w.If("mrows > 0", func() {
			w.Linef("const float* sq = (const float*)(%s + K + K / 2);", xb)
			w.Block("for (int g = lane; g < K / 32; g += 32)", func() { w.Line("s2 += sq[g];") })
		})
		w.Linef("rn[0] = rsqrtf(warp_sum(s2) / (float)K + %s);", cfloat(eps))
		return "rn[j]"
	}
	w.Line("__shared__ float srn[MB];")
	w.Block("for (int j = threadIdx.x >> 5; j < MB; j += blockDim.x >> 5)", func() {
		w.Line("float s2 = 0.f;")
		w.If("j < mrows", func() {
			w.Linef("const float* sq = (const float*)(%s + j * XR + K + K / 2);", xb)
			w.Block("for (int g = lane; g < K / 32; g += 32)", func() { w.Line("s2 += sq[g];") })
		})
		w.Line("s2 = warp_sum(s2);")
		w.If("lane == 0", func() { w.Linef("srn[j] = rsqrtf(s2 / (float)K + %s);", cfloat(eps)) })
	})
	return "srn[j]"
}

// emitXQNormBarrier writes the barrier after which emitXQRowNorms' shared
// values may be read (none for a block of one row).
func emitXQNormBarrier(w *Writer, mb int) {
	if mb > 1 {
		w.Line("__syncthreads(); // srn")
	}
}

// emitWarpQuant writes the quantisation of z, one element a lane, by a
// warp that holds a group of 32 of a row of XQuant's layout: the int8
// value into byte col of row xr (of k elements), the group's float4 (dx,
// int8 sums of lanes 0-15 and 16-31, float sum) by the lane where first
// holds. Every lane of the warp must run it (shuffles).
func emitWarpQuant(w *Writer, xr, col, k, first string) {
	w.Line("const float am = warp_max(fabsf(z));")
	w.Line("const float inv = am > 0.f ? 127.f / am : 0.f;")
	w.Line("const int q = __float2int_rn(z * inv);")
	w.Line("int hs = q;")
	w.Comment("sums of the int8 values of lanes 0-15 and 16-31")
	w.Line("#pragma unroll")
	w.Block("for (int o = 8; o > 0; o >>= 1)", func() { w.Line("hs += __shfl_xor_sync(0xffffffffu, hs, o);") })
	w.Line("const int hs1 = __shfl_sync(0xffffffffu, hs, 16);")
	w.Comment("the group's float sum by XQuant's tree (warp_sum_up), so both write the same float")
	w.Line("const float zs = warp_sum_up(z);")
	w.Linef("%s[%s] = (u8)(q & 255);", xr, col)
	w.If(first, func() {
		w.Linef("((float4*)(%s + %s))[%s >> 5] = make_float4(am * (1.f / 127.f), (float)hs, (float)hs1, zs);", xr, k, col)
	})
}

// emitXQSplitSums writes the meeting of a split arm's sums (kSplit > 1):
// the warps ks > 0 of each row set leave their warp sums in shared
// memory, and lane 0 of warp ks 0 adds them to its own, so that the warp
// sum of warp ks 0's accumulators is the row set's product.
func emitXQSplitSums(w *Writer) {
	w.Comment("each row set's warps ks > 0 hand their sums to warp ks 0")
	w.Line("__shared__ float kpart[KS - 1][RPB][RW][MB];")
	w.If("ks > 0", func() {
		w.For("r", "0", "RW", "1", -1, func() {
			w.For("j", "0", "MB", "1", -1, func() {
				w.Line("const float v = warp_sum(acc[r][j]);")
				w.If("lane == 0", func() { w.Line("kpart[ks - 1][wr][r][j] = v;") })
			})
		})
	})
	w.Line("__syncthreads();")
	w.If("ks == 0 && lane == 0", func() {
		w.For("r", "0", "RW", "1", -1, func() {
			w.For("j", "0", "MB", "1", -1, func() {
				w.For("s", "0", "KS - 1", "1", -1, func() { w.Line("acc[r][j] += kpart[s][wr][r][j];") })
			})
		})
	})
}

// emitXQQuantOut writes the end of an XQ 2 product with XQEnds.QuantOut
// or SwiGLUOut: the warps' sums into shared memory, then each group of 32
// outputs of each activation row by one warp, a lane an element. QuantOut:
// the new residual value x = y + v stored, and x·nw quantised into xo's row
// as XQuant's ProNorm writes it. SwiGLUOut: silu(gate)·up of the group's 32
// gate and 32 up rows quantised into xo's row as XQuant's ProSwiGLU does.
func emitXQQuantOut(w *Writer, e XQEnds, rn string, split bool) {
	w.Line("__shared__ float ev[RPB * RW][MB];")
	w.For("r", "0", "RW", "1", -1, func() {
		w.For("j", "0", "MB", "1", -1, func() {
			w.Linef("const float v = %s;", xqWarpValue(rn))
			if split {
				w.If("lane == 0 && ks == 0", func() { w.Line("ev[wr * RW + r][j] = v;") })
			} else {
				w.If("lane == 0", func() { w.Line("ev[(threadIdx.x >> 5) * RW + r][j] = v;") })
			}
		})
	})
	w.Line("__syncthreads();")
	w.Linef("#define G (RPB * RW / %d) // groups of 32 outputs a block", e.outRows())
	warps := "RPB"
	if split {
		warps = "RPB * KS"
	}
	w.Block("for (int p = threadIdx.x >> 5; p < G * MB; p += "+warps+")", func() {
		w.Line("const int g = p % G, j = p / G;")
		w.If("j < mrows", func() { // the same for the whole warp
			w.Line("const int col = (blockIdx.x * G + g) * 32 + lane; // this lane's output")
			if e.SwiGLUOut {
				w.Line("const float gv = ev[64 * g + lane][j], uv = ev[64 * g + 32 + lane][j];")
				if e.GeLU {
					w.Linef("const float z = %s;", geluTanhMul("gv", "uv"))
				} else {
					w.Line("const float z = gv / (1.f + expf(-gv)) * uv;")
				}
			} else {
				w.Line("float* yr = y + (size_t)(m0 + j) * YS;")
				w.Line("const float xv = yr[col] + ev[32 * g + lane][j];")
				w.Line("yr[col] = xv;")
				w.Line("const float z = xv * nw[col];")
				w.Line("const float x2 = warp_sum_up(__fmul_rn(xv, xv)); // XQuant's sum of squares, the same tree")
			}
			w.Line("u8* xr = xo + (size_t)(m0 + j) * XRO;")
			emitWarpQuant(w, "xr", "col", "NO", "lane == 0")
			if !e.SwiGLUOut {
				w.If("lane == 0", func() { w.Line("((float*)(xr + NO + NO / 2))[col >> 5] = x2;") })
			}
		})
	})
	w.Comment("one warp wrote this block's outputs while the others were done: the block's writes all")
	w.Comment("come before its launch trigger (on the H200, with the trigger first, products after it")
	w.Comment("read stale rows under programmatic dependent launch; with the barrier they pass parity)")
	w.Line("__syncthreads();")
	w.Line("pdl_launch();")
}

// gemvXQGlobal is gemvXQ for XQ 2: the activation rows come quantised from
// XQuant, and the loop over a row's units keeps two sets of weight
// registers, loading the next units while it computes the current ones.
func gemvXQGlobal(t dtype.Type, n, k int, residual bool, arm GEMVArm, e XQEnds, ystride int) (*Kernel, error) {
	rt := rpTypes[t]
	if k%32 != 0 {
		return nil, fmt.Errorf("%w: int8-activation gemv with K %d", ErrUnsupported, k)
	}
	mb := arm.batchRows()
	rw := arm.rowsPerWarp()
	split := arm.kSplit() > 1
	nb := k / t.BlockElems()
	epi := ""
	if residual {
		epi = "_res"
	}
	epi += e.suffix() + ysName(ystride)
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	params := xqGlobalParams
	switch {
	case e.QuantOut:
		params = xqQuantOutParams
	case e.SwiGLUOut:
		params = xqSwiGLUOutParams
	case e.Rope:
		params = xqRopeParams(e.RopeShape.Cache)
	case e.PostNorm:
		params = xqPostNormParams
	case e.HeadRope:
		params = xqHeadRopeParams(e.RopeShape.Cache, e.HeadNorm)
	}
	deps := repackDeps(t, "f16", "warp", "pdl")
	if e.Rope || e.HeadRope {
		deps = append(deps, append(cacheHelpers(e.RopeShape.Cache), "rope_rot")...)
	}
	if e.QuantOut || e.SwiGLUOut {
		deps = append(deps, "warp_up")
	}
	if e.PostNorm {
		deps = proDeps(Prologue{Kind: ProNorm}, append(deps, "types")...)
	}
	src := source(fmt.Sprintf("gemv: %v weights repacked, int8 activations from xquant, N %d, K %d, residual %v, ends %q, %v", t, n, k, residual, e.suffix(), arm),
		deps, func(w *Writer) {
			emitXQWeightHelpers(w, t)
			if e.PostNorm {
				emitXQPack4(w)
			}
			emitRepackDefines(w, rt, n, k, nb)
			w.Linef("#define RPB %d // warps per block", arm.RowsPerBlock)
			w.Linef("#define RW %d // weight rows per warp", rw)
			if e.Rope || e.HeadRope {
				e.RopeShape.defines(w)
				w.Linef("#define C0 %d // the product's first column of the [q | k | v] row", e.RopeCol0)
			}
			if e.HeadRope {
				emitHeadRopeDefines(w, e)
			}
			w.Linef("#define U %d // units in flight per thread, row and buffer", arm.Unroll)
			step := "U * 32" // a warp's stride over a row's units
			if split {
				w.Linef("#define KS %d // warps a row set, each taking every KS-th stretch of U·32 units", arm.kSplit())
				step = "KS * U * 32"
			}
			w.Linef("#define MB %d // activation rows per block", mb)
			w.Linef("#define XR %d // bytes of a quantised activation row", XQRowBytes(k))
			if e.QuantOut || e.SwiGLUOut {
				no := n / (e.outRows() / 32)
				w.Linef("#define NO %d // outputs a row", no)
				w.Linef("#define XRO %d // bytes of a quantised output row", XQRowBytes(no))
				if e.GeLU {
					w.Line("#define GELU_K 0.797884561f // √(2/π)")
				}
			}
			w.Raw(ysDefine(ystride))
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, MinBlocks: arm.MinBlocks, Params: params, Body: func(w *Writer) {
				emitXQRows(w, rt, n, arm, "b", e.SwiGLUOut)
				// load writes the loads of buffer buf ("" or "b") of the U
				// units from base on.
				load := func(buf, base string) {
					w.For("i", "0", "U", "1", -1, func() {
						w.Linef("const int uu = %s + i * 32;", base)
						w.If("uu < UPR", func() {
							for r := range rw {
								for _, l := range rt.load {
									w.Line(xqBuffer(xqRename(l, r), buf))
								}
							}
						})
					})
				}
				compute := func(buf string) {
					if arm.Prefetch == 1 {
						emitXQComputePrefetch(w, t, rw, buf, "(const int4*)(xb + (%s) * XR)", "(const float4*)(xb + (%s) * XR + K)")
						return
					}
					emitXQCompute(w, t, rw, buf, "(const int4*)(xb + j * XR)", "(const float4*)(xb + j * XR + K)")
				}
				if split {
					w.Line("int u = ks * U * 32 + lane;")
				} else {
					w.Line("int u = lane;")
				}
				w.Comment("the first weight loads do not wait for the previous kernel")
				load("", "u")
				w.Line("const int m0 = blockIdx.y * MB;")
				w.Line("const int mrows = min(MB, m - m0);")
				w.Line("const u8* xb = xq + (size_t)m0 * XR;")
				w.Line("float acc[RW][MB];")
				w.For("r", "0", "RW", "1", -1, func() {
					w.For("j", "0", "MB", "1", -1, func() { w.Line("acc[r][j] = 0.f;") })
				})
				w.Line("pdl_wait();")
				rn := ""
				if e.NormIn {
					rn = emitXQRowNorms(w, e.NormEps, "xb", mb)
				}
				w.Comment("two buffers: the loads of the next units are in flight while the current ones are computed")
				w.Block("for (;;)", func() {
					load("b", "u + "+step)
					compute("")
					w.Linef("u += %s;", step)
					w.If("u >= UPR", func() { w.Line("break;") })
					load("", "u + "+step)
					compute("b")
					w.Linef("u += %s;", step)
					w.If("u >= UPR", func() { w.Line("break;") })
				})
				if split {
					emitXQSplitSums(w)
				}
				if e.NormIn {
					emitXQNormBarrier(w, mb)
				}
				// store writes the results (rn is empty without NormIn)
				store := func() {
					switch {
					case e.Rope:
						emitXQStoreRope(w, e.RopeShape.Cache, rn)
					case e.PostNorm || e.HeadRope:
						emitXQStoreRows(w, residual, rn) // the trigger after the tail
					default:
						emitXQStoreScaled(w, residual, rn)
					}
				}
				switch {
				case e.QuantOut || e.SwiGLUOut:
					emitXQQuantOut(w, e, rn, split)
				case split:
					w.Comment("warp ks 0 of each row set holds the sums and stores them")
					w.If("ks == 0", store)
				default:
					store()
				}
				if e.PostNorm {
					emitPostNormTail(w, n, e)
				}
				if e.HeadRope {
					emitHeadRopeTail(w, e, arm.RowsPerBlock*rw)
				}
			}})
		})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.RowsPerBlock*rw), ceilDiv(d.Tokens, mb), 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}
