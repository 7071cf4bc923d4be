package codegen

import (
	"fmt"
	"regexp"

	"github.com/memra-ai/memra/ir/dtype"
)

// The int8-activation GEMV (GEMVArm.XQ 1, layout 1 only). Each block first
// quantises its MB activation rows into shared memory, 32 elements at a
// time, the way 8-bit block formats do: per group g of 32, dx = max|x|/127
// and q = round(x/dx) in int8, beside the float sums of the group's two
// halves' int8 sums and the group's float sum. A 16-byte weight unit then
// meets its activations through dp4a (four int8 products an instruction)
// instead of 32 float conversions and FMAs, so the product reads weights at
// memory speed instead of being bound by instruction issue. Quants are
// centred in integers before scaling (Q4_0 q-8, Q6_K q-32, Q4_K q-8 with
// the rest of its offset times the float sum), so the rounding error scales
// with the weights, not with their unsigned codes. The result differs from
// the float product by the activations' rounding (relative L2 error ~6e-3
// on random inputs, TestXQMirror), so it is its own numerical class:
// autotune checks these arms against XQTol, and the exact configuration
// never uses them.
//
// One weight load serves all MB activation rows of a block, so a batch of
// decode rows costs little more weight traffic than one.

// XQTol is the check tolerance (relative L2 error against the float
// reference) of the int8-activation GEMV arms.
const XQTol = 2e-2

// xqMaxShared is the dynamic shared memory a block may use (sm_90: 227 KiB).
const xqMaxShared = 227 << 10

// xqShared returns the dynamic shared bytes of an int8-activation GEMV:
// min(MB, m) rows of K int8 and K/32 float4 (dx, int8 sum of elements
// 0-15, of 16-31, float sum of all 32).
func xqShared(k, mb int) int { return mb * (k + k/2) }

// emitXQHelpers writes dp4a, the weight unit's unpacking and dot
// (emitXQWeightHelpers) and the quantiser's packing.
func emitXQHelpers(w *Writer, t dtype.Type) {
	emitXQWeightHelpers(w, t)
	emitXQPack4(w)
}

// emitDP4A writes dp4a.
func emitDP4A(w *Writer) {
	w.Comment("d = c + the dot product of the four signed bytes of a and b.")
	w.Emit(Func{Name: "dp4a", Return: "int", Params: []Param{{"int", "a"}, {"int", "b"}, {"int", "c"}}, Body: func(w *Writer) {
		w.Line("int d;")
		w.Line(`asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));`)
		w.Line("return d;")
	}})
}

// emitXQPack4 writes xq_pack4, the quantiser's rounding and packing.
func emitXQPack4(w *Writer) {
	w.Comment("Four floats times inv, rounded to nearest, as int8 bytes of a word; their sum is added to is.")
	w.Emit(Func{Name: "xq_pack4", Return: "u32", Params: []Param{{"float4", "v"}, {"float", "inv"}, {"int&", "is"}}, Body: func(w *Writer) {
		w.Line("const int a = __float2int_rn(v.x * inv), b = __float2int_rn(v.y * inv);")
		w.Line("const int c = __float2int_rn(v.z * inv), d = __float2int_rn(v.w * inv);")
		w.Line("is += (a + b) + (c + d);")
		w.Line("return ((u32)a & 255u) | (((u32)b & 255u) << 8) | (((u32)c & 255u) << 16) | ((u32)d << 24);")
	}})
}

// xqStageLoads is the chunks of 8 activations each thread of the
// quantising stage loads before it processes them: the stage runs many
// rounds at batch 16, and one load in flight a thread left it waiting on
// L2 latency each round.
const xqStageLoads = 4

// emitXQStage writes the quantisation of the block's MB activation rows
// into shared memory: thread c handles 8 floats, 4 consecutive threads a
// group of 32 (the loop runs whole warps so every shuffle has its partner),
// with xqStageLoads chunks a thread loaded before any is processed.
//
// With the ProNorm prologue a first pass sums each row's squares (rs, in
// shared memory) and the quantising pass scales each element by the row's
// 1/rms and the norm weight nw before quantising it; with ProSwiGLU the
// rows are [gate | up] of 2K and the pass quantises silu(gate) · up.
func emitXQStage(w *Writer, threads, k int, pro Prologue) {
	w.Line("extern __shared__ uint4 xsm[];")
	w.Line("signed char* xq8 = (signed char*)xsm;")
	w.Comment("rows of this block; shared memory holds min(MB, m) rows (the launch sizes it so)")
	w.Line("const int m0 = blockIdx.y * MB;")
	w.Line("const int mrows = min(MB, m - m0);")
	w.Line("float4* meta = (float4*)(xq8 + min(MB, m) * K);")
	w.Line("const int qch = (mrows * (K / 8) + 31) & ~31; // whole warps")
	w.Linef("#define SL %d // chunks loaded a thread before processing", xqStageLoads)
	swi := pro.Kind == ProSwiGLU
	loads := func() {
		w.Line("float4 la[SL], lb[SL];")
		if swi {
			w.Line("float4 lc[SL], ld[SL]; // up")
		}
		w.For("s", "0", "SL", "1", -1, func() {
			w.Linef("const int c = c0 + s * %d;", threads)
			w.Line("la[s] = make_float4(0.f, 0.f, 0.f, 0.f);")
			w.Line("lb[s] = la[s];")
			if swi {
				w.Line("lc[s] = la[s];")
				w.Line("ld[s] = la[s];")
			}
			w.If("c < mrows * (K / 8)", func() {
				if swi {
					w.Line("const float4* xp = (const float4*)(x + (size_t)(m0 + c / (K / 8)) * 2 * K + (c % (K / 8)) * 8);")
					w.Line("lc[s] = xp[K / 4];")
					w.Line("ld[s] = xp[K / 4 + 1];")
				} else {
					w.Line("const float4* xp = (const float4*)(x + (size_t)(m0 + c / (K / 8)) * K + (c % (K / 8)) * 8);")
				}
				w.Line("la[s] = xp[0];")
				w.Line("lb[s] = xp[1];")
			})
		})
	}
	// pass writes one pass over the block's chunks of 8: SL loads a thread
	// in flight, then body for each loaded chunk c (whole warps only).
	pass := func(body func()) {
		w.Linef("for (int c0 = threadIdx.x; c0 < qch; c0 += SL * %d) {", threads)
		w.indent++
		loads()
		w.For("s", "0", "SL", "1", -1, func() {
			w.Linef("const int c = c0 + s * %d;", threads)
			w.If("c < qch", body) // the same for the whole warp
		})
		w.indent--
		w.Line("}")
	}
	if pro.Kind == ProNorm {
		w.Comment("the rows' sums of squares, then 1/rms")
		w.Line("__shared__ float rs[MB];")
		w.If("threadIdx.x < MB", func() { w.Line("rs[threadIdx.x] = 0.f;") })
		w.Line("__syncthreads();")
		pass(func() {
			w.Line("const bool ok = c < mrows * (K / 8);")
			w.Line("const float4 a = la[s], b = lb[s];")
			w.Line("float ss = ((a.x * a.x + a.y * a.y) + (a.z * a.z + a.w * a.w)) + ((b.x * b.x + b.y * b.y) + (b.z * b.z + b.w * b.w));")
			if k%256 == 0 {
				w.Comment("K/8 is a multiple of 32: a warp's chunks lie in one row")
				w.Line("ss = warp_sum(ss);")
				w.If("ok && (threadIdx.x & 31) == 0", func() { w.Line("atomicAdd(&rs[c / (K / 8)], ss);") })
			} else {
				w.If("ok", func() { w.Line("atomicAdd(&rs[c / (K / 8)], ss);") })
			}
		})
		w.Line("__syncthreads();")
		w.If("threadIdx.x < mrows", func() { w.Linef("rs[threadIdx.x] = rsqrtf(rs[threadIdx.x] / (float)K + %s);", cfloat(pro.Eps)) })
		w.Line("__syncthreads();")
	}
	pass(func() {
		w.Line("const bool ok = c < mrows * (K / 8);")
		w.Line("const int mr = c / (K / 8), e = (c % (K / 8)) * 8;")
		switch pro.Kind {
		case ProSwiGLU:
			w.Line("const float4 a = swiglu4(la[s], lc[s]), b = swiglu4(lb[s], ld[s]);")
		case ProNorm:
			w.Line("float4 a = la[s], b = lb[s];")
			w.If("ok", func() {
				w.Line("const float r = rs[mr];")
				w.Line("a = norm4(a, r, *(const float4*)(nw + e));")
				w.Line("b = norm4(b, r, *(const float4*)(nw + e + 4));")
			})
		default:
			w.Line("const float4 a = la[s], b = lb[s];")
		}
		emitXQPack(w, "xq8 + mr * K + e", "meta[mr * (K / 32) + e / 32]")
	})
	w.Line("__syncthreads();")
}

// emitXQPack writes the quantisation of chunk c (8 floats a, b; ok when
// it is a real chunk) by 4 consecutive lanes a group of 32: the int8 words
// stored at the byte address q, the group's float4 (dx, int8 sums of
// elements 0-15 and 16-31, float sum) into meta by the group's first lane.
// Every lane of the warp must run it (shuffles).
func emitXQPack(w *Writer, q, meta string) {
	w.Line("float am = fmaxf(fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))),")
	w.Line("                 fmaxf(fmaxf(fabsf(b.x), fabsf(b.y)), fmaxf(fabsf(b.z), fabsf(b.w))));")
	w.Line("am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));")
	w.Line("am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));")
	w.Line("const float s8 = ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w));")
	w.Line("const float s16 = s8 + __shfl_xor_sync(0xffffffffu, s8, 1);")
	w.Line("const float o16 = __shfl_xor_sync(0xffffffffu, s16, 2);")
	w.Line("const float inv = am > 0.f ? 127.f / am : 0.f;")
	w.Line("int is = 0;")
	w.Line("const u32 pa = xq_pack4(a, inv, is), pb = xq_pack4(b, inv, is);")
	w.Line("const int i16 = is + __shfl_xor_sync(0xffffffffu, is, 1);")
	w.Line("const int io16 = __shfl_xor_sync(0xffffffffu, i16, 2);")
	w.If("ok", func() {
		w.Linef("*(uint2*)(%s) = make_uint2(pa, pb);", q)
		w.If("(c & 3) == 0", func() {
			w.Linef("%s = make_float4(am * (1.f / 127.f), (float)i16, (float)io16, s16 + o16);", meta)
		})
	})
}

// emitXQRows writes the start of an int8-activation GEMV: the warp's
// first row r0, its lane, and per weight row the row pointers and the
// weight registers (and their second buffer buf, if not empty).
func emitXQRows(w *Writer, rt rpType, n int, arm GEMVArm, buf string, gateUp bool) {
	rw := arm.rowsPerWarp()
	if arm.kSplit() > 1 {
		w.Line("const int wr = (threadIdx.x >> 5) % RPB, ks = (threadIdx.x >> 5) / RPB; // the warp's row set, its share of K")
		w.Line("const int r0 = (blockIdx.x * RPB + wr) * RW; // the warp's first row")
	} else {
		w.Line("const int r0 = (blockIdx.x * RPB + (threadIdx.x >> 5)) * RW; // the warp's first row")
	}
	w.Line("const int lane = threadIdx.x & 31;")
	clamp := n%(arm.RowsPerBlock*rw) != 0
	if clamp {
		w.Comment("rows past N (last block only) read row N-1 and store nothing")
	}
	row := "r0 + %d"
	if gateUp {
		w.Comment("the warp's rows of the [gate | up] halves: 32 gate rows, then the same 32 up rows (GateUpRow)")
		w.Line("#define GU_ROW(r) ((((r) >> 5) & 1) * (N / 2) + ((r) >> 6) * 32 + ((r) & 31))")
		row = "GU_ROW(r0 + %d)"
	}
	for r := range rw {
		if clamp {
			w.Linef("const int rr%d = min("+row+", N - 1);", r, r)
		} else {
			w.Linef("const int rr%d = "+row+";", r, r)
		}
		for _, p := range rt.ptrs {
			w.Line(xqRename(p, r))
		}
		for _, p := range rt.regs {
			w.Line(xqRename(p, r))
			if buf != "" {
				w.Line(xqBuffer(xqRename(p, r), buf))
			}
		}
	}
}

// emitXQStore writes the end of an int8-activation GEMV: each of the
// warp's rows and activation rows summed over the warp and stored (added
// for a residual) by lane 0.
func emitXQStore(w *Writer, residual bool) { emitXQStoreScaled(w, residual, "") }

// emitXQStoreScaled is emitXQStore with each activation row j's sums
// multiplied by the expression scale of j (none if empty).
func emitXQStoreScaled(w *Writer, residual bool, scale string) {
	emitXQStoreRows(w, residual, scale)
	w.Line("pdl_launch();")
}

// emitXQStoreRows is emitXQStoreScaled without the launch trigger (a
// PostNorm product triggers after its tail).
func emitXQStoreRows(w *Writer, residual bool, scale string) {
	op := "="
	if residual {
		op = "+="
	}
	w.For("r", "0", "RW", "1", -1, func() {
		w.For("j", "0", "MB", "1", -1, func() {
			w.Linef("const float v = %s;", xqWarpValue(scale))
			w.If("lane == 0 && r0 + r < N && j < mrows", func() { w.Linef("y[(size_t)(m0 + j) * YS + r0 + r] %s v;", op) })
		})
	})
}

// xqWarpValue is the expression of weight row r's result for activation
// row j, summed over the warp and multiplied by scale (none if empty).
func xqWarpValue(scale string) string {
	if scale == "" {
		return "warp_sum(acc[r][j])"
	}
	return "warp_sum(acc[r][j]) * " + scale
}

// emitXQStoreRope is emitXQStoreScaled for XQEnds.Rope: per activation
// row (token) j, the warp's rows in pairs (r0 and RW even, so a pair never
// leaves the warp, and C0 even, so it is one of RopeKV's adjacent pairs),
// rotated by pos[token] where they are q or k columns within RD; q goes to
// y rotated, k rotated and v as computed to the cache row slot[token], and
// y keeps k and v as computed (what RopeKV leaves in the fused row).
func emitXQStoreRope(w *Writer, cache dtype.Type, scale string) {
	ct := cacheCType(cache)
	w.For("j", "0", "MB", "1", -1, func() {
		w.Line("float v[RW];")
		w.For("r", "0", "RW", "1", -1, func() { w.Linef("v[r] = %s;", xqWarpValue(scale)) })
		w.If("lane == 0 && j < mrows", func() {
			w.Line("const int tok = m0 + j;")
			w.Line("const float p = (float)pos[tok];")
			w.Line("const size_t crow = (size_t)slot[tok] * HKV * HD;")
			w.For("r", "0", "RW", "2", -1, func() {
				w.If("r0 + r < N", func() {
					w.Line("const int c = C0 + r0 + r, u = c / HD, e = c % HD; // head unit (q, k, v heads in order), element")
					w.Line("float va = v[r], vb = v[r + 1];")
					w.If("u < HQ + HKV && e / 2 < RD / 2", func() {
						w.Line("float sn, cs;")
						w.Line("sincosf(p * inv_freq[e / 2], &sn, &cs);")
						w.Line("rope_rot(va, vb, cs, sn); // as RopeKV rotates it")
					})
					w.Comment("y: q rotated, k and v as computed")
					w.Line("y[(size_t)tok * YS + r0 + r] = u < HQ ? va : v[r];")
					w.Line("y[(size_t)tok * YS + r0 + r + 1] = u < HQ ? vb : v[r + 1];")
					w.If("u >= HQ", func() {
						w.Linef("%s* cr = (u < HQ + HKV ? kcache + (u - HQ) * HD : vcache + (u - HQ - HKV) * HD) + crow;", ct)
						w.Line(cacheStore(cache, "cr[e]", "va"))
						w.Line(cacheStore(cache, "cr[e + 1]", "vb"))
					})
				})
			})
		})
	})
	w.Line("pdl_launch();")
}

// xqNames are the row pointers and weight registers of rpTypes' code, to
// which xqRename gives the suffix of weight row w of a warp's RowsPerWarp
// rows.
var xqNames = regexp.MustCompile(`\b(qp|hp|lp|sp|dp|q|hd|qh|sc|dh|rr)\b`)

func xqRename(code string, w int) string {
	return xqNames.ReplaceAllString(code, fmt.Sprintf("${1}%d", w))
}

// xqRegs are the weight registers of a row after xqRename, to which
// xqBuffer gives the suffix of the second buffer of a double-buffered loop.
var xqRegs = regexp.MustCompile(`\b(q|hd|qh|sc|dh)(\d+)\b`)

func xqBuffer(code, buf string) string {
	return xqRegs.ReplaceAllString(code, "${1}${2}"+buf)
}

// gemvXQ is GEMV for arm.XQ 1 to 4: W repacked (layout 1), activations
// quantised to int8 (XQ 1: by each block into shared memory; XQ 2: read
// from the rows an XQuant launch wrote), arm.BatchRows activation rows per
// block, each warp computing arm.RowsPerWarp consecutive weight rows.
// grid (⌈n/(RowsPerBlock·RowsPerWarp)⌉, ⌈m/MB⌉).
// pro (GEMVNorm, GEMVSwiGLU; XQ 1 only) is computed by the quantising stage.
func gemvXQ(t dtype.Type, n, k int, residual bool, arm GEMVArm, pro Prologue, ystride int) (*Kernel, error) {
	rt, ok := rpTypes[t]
	if !ok || xqPrep[t] == "" {
		return nil, fmt.Errorf("%w: int8-activation gemv for %v", ErrUnsupported, t)
	}
	switch arm.XQ {
	case 2, 3, 4:
		if pro.Kind != ProNone {
			return nil, fmt.Errorf("%w: XQ %d product with a prologue (XQuant computes it)", ErrUnsupported, arm.XQ)
		}
		return GEMVXQ(t, n, k, residual, arm, XQEnds{}, ystride)
	}
	mb := arm.batchRows()
	rw := arm.rowsPerWarp()
	shared := xqShared(k, mb)
	if k%32 != 0 || shared > xqMaxShared {
		return nil, fmt.Errorf("%w: int8-activation gemv with K %d, %d rows a block (%d bytes of shared memory)", ErrUnsupported, k, mb, shared)
	}
	nb := k / t.BlockElems()
	epi := ""
	if residual {
		epi = "_res"
	}
	epi += pro.suffix() + ysName(ystride)
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	params := productParams(pro.Kind == ProNorm)
	src := source(fmt.Sprintf("gemv: %v weights repacked, int8 activations, N %d, K %d, residual %v, prologue %q, %v", t, n, k, residual, pro.suffix(), arm),
		proDeps(pro, repackDeps(t, "f16", "warp", "pdl")...), func(w *Writer) {
			emitXQHelpers(w, t)
			emitRepackDefines(w, rt, n, k, nb)
			w.Linef("#define RPB %d // warps per block", arm.RowsPerBlock)
			w.Linef("#define RW %d // weight rows per warp", rw)
			w.Linef("#define U %d // units in flight per thread and row", arm.Unroll)
			w.Linef("#define MB %d // activation rows per block", mb)
			w.Raw(ysDefine(ystride))
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
				emitXQRows(w, rt, n, arm, "", false)
				load := func() {
					w.For("i", "0", "U", "1", -1, func() {
						w.Line("const int uu = u + i * 32;")
						w.If("uu < UPR", func() {
							for r := range rw {
								for _, l := range rt.load {
									w.Line(xqRename(l, r))
								}
							}
						})
					})
				}
				w.Line("int u = lane;")
				w.Comment("the first weight loads do not wait for the previous kernel")
				load()
				w.Line("pdl_wait();")
				emitXQStage(w, arm.Threads, k, pro)
				w.Line("float acc[RW][MB];")
				w.For("r", "0", "RW", "1", -1, func() {
					w.For("j", "0", "MB", "1", -1, func() { w.Line("acc[r][j] = 0.f;") })
				})
				w.Block("for (;;)", func() {
					emitXQCompute(w, t, rw, "", "(const int4*)(xq8 + j * K)", "meta + j * (K / 32)")
					w.Line("u += U * 32;")
					w.If("u >= UPR", func() { w.Line("break;") })
					load()
				})
				emitXQStore(w, residual)
			}})
		})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.RowsPerBlock*rw), ceilDiv(d.Tokens, mb), 1), Block: dim3(arm.Threads, 1, 1),
			Shared: uint32(xqShared(k, max(1, min(mb, d.Tokens))))}
	}}, nil
}
