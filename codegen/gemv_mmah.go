package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// The f16 tensor-core product of decode batches (GEMVArm.XQ 4). The int8
// products (XQ 3) scale every mma tile's int32 sums by their group's weight
// and activation factors, four floats a tile and about half of the
// instructions of a group, which grows with the tokens; here each lane
// dequantises its weights once to f16 (the group's scale and min folded in
// by one f16x2 fma a pair) and multiplies them on f16 tensor cores
// (mma.sync m16n8k16, f32 accumulators) against f16 activation rows that
// an XHalf launch wrote, so nothing is scaled after the mma and the weight
// decoding is shared by every token of the block.
//
// The fragments need no shuffles and the weights keep their repacked
// layout (the one the one-row products read). Word t of a Q4_K unit holds
// elements 4t..4t+3 (low nibbles of its bytes) and 16+4t..16+4t+3 (high
// nibbles); the f16 bit tricks turn a word into the pairs (4t, 4t+2),
// (16+4t, 16+4t+2) (masks 0x000f000f, 0x00f000f0), and (4t+1, 4t+3),
// (16+4t+1, 16+4t+3) after a shift by 8. A sum over k does not depend on
// the order of k, so the k slots of lane (g, t)'s A fragments (2t, 2t+1 and
// 2t+8, 2t+9 of two m16n8k16) take those pairs, and the activations are
// stored in the same order: XHalf writes element e of each group of 32 at
// HalfPos(e), so the B fragments of a lane are one 16-byte load.
//
// The weights' rounding to f16 (|w| of the group scale's size, 11
// significant bits) and the activations' make the relative error about
// 7.5e-4 (Q4_K) and 3.6e-4 (Q6_K) on random rows in the Go mirror of the
// kernel (TestMMAHMirror), within HalfTol; the int8 products
// are held to XQTol.

// HalfTol is the tolerance of XQ 4 products against the float32 reference.
const HalfTol = 5e-3

// mmahTypes are the weight types of XQ 4 products: the pipelined ring's
// (mma8PipeTypes), whose byte layout in a stage the f16 kernel shares.
var mmahTypes = map[dtype.Type]bool{dtype.Q4_K: true, dtype.Q6_K: true}

// HalfTypes lists mmahTypes.
func HalfTypes() []dtype.Type { return []dtype.Type{dtype.Q4_K, dtype.Q6_K} }

// HalfProduct reports whether an XQ 4 product exists for weights of type t
// and rows of k.
func HalfProduct(t dtype.Type, k int) bool { return mmahTypes[t] && k%256 == 0 }

// XHRowBytes is the bytes of one f16 activation row of k elements (XHalf).
func XHRowBytes(k int) int { return 2 * k }

// HalfPos is where XHalf stores element e (0..31) of a group of 32 within
// the group: lane t's four words of B fragments are words 4t..4t+3, holding
// elements (4t, 4t+2), (4t+1, 4t+3), (16+4t, 18+4t), (17+4t, 19+4t).
func HalfPos(e int) int {
	t, hi, odd, up := (e%16)/4, e/16, e%2, (e%4)/2
	return 8*t + 2*(2*hi+odd) + up
}

// mmahTokenBytes is a token's bytes of one group in a stage: 32 f16.
const mmahTokenBytes = 64

// mmahShared is the dynamic shared memory of an XQ 4 arm's blocks for rows
// of type pt: each warp's ring of Stages groups (weights and f16 tokens)
// and its two heads, which the split sums reuse after the main loop.
func (a GEMVArm) mmahShared(pt mma8PipeType) int {
	wr := 16 * a.rowsPerWarp()
	stage := wr*pt.rowBytes + 8*((a.batchRows()+7)/8)*mmahTokenBytes
	return max(a.Threads/32*(a.Stages*a.Unroll*stage+2*wr*pt.headBytes), a.mma8SplitBytes())
}

// mmahMaxShared is the most shared memory arm's blocks take over mmahTypes.
func (a GEMVArm) mmahMaxShared() int {
	n := 0
	for t := range mmahTypes {
		n = max(n, a.mmahShared(mma8PipeTypes[t]))
	}
	return n
}

// emitMMAHOps writes the f16x2 helpers of XQ 4 (inline PTX, no headers):
// the f16 mma, fma, mul and sub on pairs, the lop3 of the nibble trick,
// the pair of floats as one f16x2, and the two weight decoders: q4h, the
// four pairs of a Q4_K word (quants 0..15 as 1024 + q, exact, less 1024,
// then q·s - m in one rounding), and q6h, those of two Q6_K words of
// 6-bit bytes (as 1024 + q, less 1056: q - 32, then times the half's s).
func emitMMAHOps(w *Writer, t dtype.Type) {
	w.Comment("c += a·b over 16 rows × 8 columns × 16 f16 elements, f32 accumulators.")
	w.Emit(Func{Name: "mma_h16", Params: []Param{{"float*", "c"}, {"u32", "a0"}, {"u32", "a1"}, {"u32", "a2"}, {"u32", "a3"}, {"u32", "b0"}, {"u32", "b1"}},
		Body: func(w *Writer) {
			w.Line(`asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"`)
			w.Line(`    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));`)
		}})
	w.Comment("Pairs of f16 in a u32 (element 0 in the low half).")
	for _, op := range []struct{ name, asm string }{{"hfma2", "fma.rn.f16x2 %0, %1, %2, %3;"}} {
		w.Emit(Func{Name: op.name, Return: "u32", Params: []Param{{"u32", "a"}, {"u32", "b"}, {"u32", "c"}}, Body: func(w *Writer) {
			w.Line("u32 d;")
			w.Linef(`asm("%s" : "=r"(d) : "r"(a), "r"(b), "r"(c));`, op.asm)
			w.Line("return d;")
		}})
	}
	for _, op := range []struct{ name, asm string }{{"hmul2", "mul.rn.f16x2 %0, %1, %2;"}, {"hsub2", "sub.rn.f16x2 %0, %1, %2;"}} {
		w.Emit(Func{Name: op.name, Return: "u32", Params: []Param{{"u32", "a"}, {"u32", "b"}}, Body: func(w *Writer) {
			w.Line("u32 d;")
			w.Linef(`asm("%s" : "=r"(d) : "r"(a), "r"(b));`, op.asm)
			w.Line("return d;")
		}})
	}
	w.Comment("(a & b) | c in one instruction.")
	w.Emit(Func{Name: "and_or", Return: "u32", Params: []Param{{"u32", "a"}, {"u32", "b"}, {"u32", "c"}}, Body: func(w *Writer) {
		w.Line("u32 d;")
		w.Line(`asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(b), "r"(c));`)
		w.Line("return d;")
	}})
	w.Comment("lo in the low half, hi in the high half, each rounded to nearest.")
	w.Emit(Func{Name: "pack_h2", Return: "u32", Params: []Param{{"float", "lo"}, {"float", "hi"}}, Body: func(w *Writer) {
		w.Line("u32 d;")
		w.Line(`asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));`)
		w.Line("return d;")
	}})
	switch t {
	case dtype.Q4_K:
		w.Comment("The weights of Q4_K word q: s·n - m for its nibbles n, as the pairs p0 (elements 4t, 4t+2),")
		w.Comment("p1 (16+4t, 18+4t), p2 (4t+1, 4t+3), p3 (17+4t, 19+4t); s and m are f16x2 broadcasts.")
		w.Emit(Func{Name: "q4h", Params: []Param{{"u32", "q"}, {"u32", "s"}, {"u32", "m"}, {"u32&", "p0"}, {"u32&", "p1"}, {"u32&", "p2"}, {"u32&", "p3"}},
			Body: func(w *Writer) {
				w.Line("const u32 e = q >> 8;")
				w.Comment("1024 + n (low nibbles) and 1024 + 16n (high), exactly; then n, exactly")
				w.Line("p0 = hfma2(hsub2(and_or(q, 0x000f000fu, 0x64006400u), 0x64006400u), s, m);")
				w.Line("p2 = hfma2(hsub2(and_or(e, 0x000f000fu, 0x64006400u), 0x64006400u), s, m);")
				w.Line("p1 = hfma2(hfma2(and_or(q, 0x00f000f0u, 0x64006400u), 0x2c002c00u, 0xd400d400u), s, m); // ·1/16 - 64")
				w.Line("p3 = hfma2(hfma2(and_or(e, 0x00f000f0u, 0x64006400u), 0x2c002c00u, 0xd400d400u), s, m);")
			}})
	case dtype.Q6_K:
		w.Comment("The weights of a Q6_K word pair as 6-bit bytes (lo: elements 4t..4t+3, hi: 16+4t..): s·(q - 32),")
		w.Comment("sa the scale of the group's first 16 elements, sb of the next, as the pairs of q4h.")
		w.Emit(Func{Name: "q6h", Params: []Param{{"u32", "lo"}, {"u32", "hi"}, {"u32", "sa"}, {"u32", "sb"}, {"u32&", "p0"}, {"u32&", "p1"}, {"u32&", "p2"}, {"u32&", "p3"}},
			Body: func(w *Writer) {
				w.Comment("bytes 0, 2 (and 1, 3) beside 0x64: 1024 + q, exactly; less 1056")
				w.Line("p0 = hmul2(hsub2(__byte_perm(lo, 0x64646464u, 0x4240), 0x64206420u), sa);")
				w.Line("p2 = hmul2(hsub2(__byte_perm(lo, 0x64646464u, 0x4341), 0x64206420u), sa);")
				w.Line("p1 = hmul2(hsub2(__byte_perm(hi, 0x64646464u, 0x4240), 0x64206420u), sb);")
				w.Line("p3 = hmul2(hsub2(__byte_perm(hi, 0x64646464u, 0x4341), 0x64206420u), sb);")
			}})
	}
	w.Blank()
}

// XHalf returns the f16 activation rows of the XQ 4 products with rows of
// k, in place of XQuant's int8 rows (the same parameters, so one launch
// takes either kernel by the step's rows):
//
//	xhalf(const float* x, [const float* nw,] u8* xq, int m)
//
// Row r of xq (XHRowBytes(k) bytes) is row r of x as f16, element e of
// each group of 32 at HalfPos(e); with ProNorm the RMS-normalised x·nw
// (the norm taken here over the whole row: f16 would not hold every
// un-normalised x·nw the int8 rows carry), with ProSwiGLU silu(gate)·up
// where x holds rows of 2k, [gate | up]. One block a row, grid (m).
func XHalf(k int, pro Prologue) (*Kernel, error) {
	threads := xquantThreads(k)
	loads := (k/8 + threads - 1) / threads
	if k <= 0 || k%32 != 0 || loads > xquantMaxLoads {
		return nil, fmt.Errorf("%w: f16 activation rows of %d", ErrUnsupported, k)
	}
	name := fmt.Sprintf("xhalf_k%d%s", k, pro.suffix())
	params := []Param{{"const float* __restrict__", "x"}, {"u8* __restrict__", "xq"}, {"int", "m"}}
	if pro.Kind == ProNorm {
		params = []Param{{"const float* __restrict__", "x"}, {"const float* __restrict__", "nw"}, {"u8* __restrict__", "xq"}, {"int", "m"}}
	}
	src := source(fmt.Sprintf("xhalf: rows of %d to f16 in the XQ 4 products' order, prologue %q", k, pro.suffix()),
		proDeps(pro, "types", "warp", "pdl"), func(w *Writer) {
			w.Comment("lo in the low half, hi in the high half, each rounded to nearest.")
			w.Emit(Func{Name: "pack_h2", Return: "u32", Params: []Param{{"float", "lo"}, {"float", "hi"}}, Body: func(w *Writer) {
				w.Line("u32 d;")
				w.Line(`asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));`)
				w.Line("return d;")
			}})
			w.Linef("#define K %d", k)
			w.Linef("#define SL %d // chunks of 8 a thread", loads)
			w.Linef("#define NWARP %d", threads/32)
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
				xs := "K"
				if pro.Kind == ProSwiGLU {
					xs = "2 * K"
				}
				w.Line("const int row = blockIdx.x;")
				w.Linef("const float4* xp = (const float4*)(x + (size_t)row * %s);", xs)
				w.Line("uint2* hr = (uint2*)(xq + (size_t)row * 2 * K);")
				w.Line("pdl_wait();")
				w.Line("float4 la[SL], lb[SL];")
				w.For("s", "0", "SL", "1", -1, func() {
					w.Linef("const int c = threadIdx.x + s * %d;", threads)
					w.Line("la[s] = make_float4(0.f, 0.f, 0.f, 0.f);")
					w.Line("lb[s] = la[s];")
					w.If("c < K / 8", func() {
						if pro.Kind == ProSwiGLU {
							w.Line("la[s] = swiglu4(xp[2 * c], xp[K / 4 + 2 * c]);")
							w.Line("lb[s] = swiglu4(xp[2 * c + 1], xp[K / 4 + 2 * c + 1]);")
						} else {
							w.Line("la[s] = xp[2 * c];")
							w.Line("lb[s] = xp[2 * c + 1];")
						}
					})
				})
				if pro.Kind == ProNorm {
					w.Comment("1/rms of the row: each warp's sum of squares, then every thread adds the warps' in order")
					w.Line("__shared__ float red[NWARP];")
					w.Line("float s2 = 0.f;")
					w.For("s", "0", "SL", "1", -1, func() {
						w.Line("const float4 a = la[s], b = lb[s];")
						w.Line("s2 += ((a.x * a.x + a.y * a.y) + (a.z * a.z + a.w * a.w)) + ((b.x * b.x + b.y * b.y) + (b.z * b.z + b.w * b.w));")
					})
					w.Line("s2 = warp_sum(s2);")
					w.If("(threadIdx.x & 31) == 0", func() { w.Line("red[threadIdx.x >> 5] = s2;") })
					w.Line("__syncthreads();")
					w.Line("s2 = 0.f;")
					w.For("i", "0", "NWARP", "1", -1, func() { w.Line("s2 += red[i];") })
					w.Linef("const float rn = rsqrtf(s2 / (float)K + %s);", cfloat(pro.Eps))
					w.For("s", "0", "SL", "1", -1, func() {
						w.Linef("const int c = threadIdx.x + s * %d;", threads)
						w.If("c < K / 8", func() {
							w.Line("la[s] = norm4(la[s], rn, *(const float4*)(nw + 8 * c));")
							w.Line("lb[s] = norm4(lb[s], rn, *(const float4*)(nw + 8 * c + 4));")
						})
					})
				}
				w.Comment("chunk c is elements 8q..8q+7 (q = c %% 4) of group c / 4: by HalfPos, its pairs (0, 2), (1, 3)")
				w.Comment("are words 8(q %% 2) + 2(q / 2) and the one after, its pairs (4, 6), (5, 7) the two 4 words on")
				w.For("s", "0", "SL", "1", -1, func() {
					w.Linef("const int c = threadIdx.x + s * %d;", threads)
					w.If("c < K / 8", func() {
						w.Line("const float4 a = la[s], b = lb[s];")
						w.Line("const int q = c & 3, wd = 16 * (c >> 2) + 8 * (q & 1) + 2 * (q >> 1); // u32 index in the row")
						w.Line("hr[wd >> 1] = make_uint2(pack_h2(a.x, a.z), pack_h2(a.y, a.w));")
						w.Line("hr[(wd >> 1) + 2] = make_uint2(pack_h2(b.x, b.z), pack_h2(b.y, b.w));")
					})
				})
				w.Line("pdl_launch();")
			}})
		})
	return &Kernel{Family: "xquant", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(max(1, d.Tokens), 1, 1), Block: dim3(threads, 1, 1)}
	}}, nil
}

// gemvMMAH is GEMVXQ for arm.XQ 4 over Q4_K and Q6_K weights (K a
// multiple of 256; Validate has checked the arm's shared memory): the
// pipelined int8 kernel's warps, rings and split (gemvMMA8Pipe), fed f16
// activation rows (XHalf) and multiplying f16 weights dequantised from each
// group's words. e may only ask for NormIn, which XHalf has done (its rows
// are normalised). grid
// (⌈n/(16·RowsPerWarp·RowsPerBlock)⌉, ⌈m/MB⌉), dynamic shared memory
// mmahShared.
func gemvMMAH(t dtype.Type, n, k int, residual bool, arm GEMVArm, e XQEnds, ystride int) (*Kernel, error) {
	if !HalfProduct(t, k) || e.QuantOut || e.SwiGLUOut || e.Rope {
		return nil, fmt.Errorf("%w: f16 tensor-core gemv for %v, K %d, ends %+v", ErrUnsupported, t, k, e)
	}
	fr := mma8Frags[t]
	pt := mma8PipeTypes[t]
	mb := arm.batchRows()
	mt := arm.rowsPerWarp()
	ks := arm.Threads / 32 / arm.RowsPerBlock
	nt := (mb + 7) / 8
	p := arm.Stages
	gs := arm.Unroll // groups a stage
	wr := 16 * mt
	cr := ceilDiv(wr, 32)        // weight rows a lane copies
	xa := ceilDiv(4*8*nt, 32)    // activation chunks a lane copies (four a token)
	shared := arm.mmahShared(pt) // a block's
	pr := pipeRing{t: t, fr: fr, mt: mt, cr: cr, p: p, gs: gs}
	epi := ""
	if residual {
		epi = "_res"
	}
	epi += ysName(ystride)
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	deps := repackDeps(t, "f16", "warp", "pdl")
	src := source(fmt.Sprintf("gemv: %v weights repacked, f16 activations from xhalf, f16 mma.sync fed by cp.async, %d stages, N %d, K %d, residual %v, %v", t, p, n, k, residual, arm),
		deps, func(w *Writer) {
			if t == dtype.Q6_K {
				emitQ6Words(w)
			}
			emitCPAsync(w)
			emitMMAHOps(w, t)
			emitMMA8Defines(w, t, n, k, arm, "super-blocks")
			pr.defines(w, pt, mmahTokenBytes, ystride)
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: xqGlobalParams, Body: func(w *Writer) {
				pr.warpStart(w)
				w.Comment("the activation chunks this lane copies: chunk c is bytes 16(c %% 4).. of token c / 4's group,")
				w.Comment("a token past the block's rows copying its last")
				for a := range xa {
					w.Linef("const int xc%[1]d = lane + %[2]d, xt%[1]d = xc%[1]d >> 2;", a, 32*a)
					if arm.wideBatch() {
						w.Linef("const bool xk%[1]d = xc%[1]d < 4 * 8 * NT && 8 * (xt%[1]d >> 3) < mrows; // a tile of the step's rows", a)
					} else if arm.smallBatch() {
						w.Linef("const bool xk%[1]d = xc%[1]d < 4 * 8 * NT && xt%[1]d < mrows; // a token of the step (no other C column is stored)", a)
					} else {
						w.Linef("const bool xk%[1]d = xc%[1]d < 4 * 8 * NT;", a)
					}
					w.Linef("const u8* xg%[1]d = xq + (size_t)(m0 + min(xt%[1]d, mrows - 1)) * HR + 16 * (xc%[1]d & 3);", a)
					w.Linef("const u32 xo%[1]d = XO + xt%[1]d * TB + 16 * (xc%[1]d & 3);", a)
				}
				pr.columns(w)
				acts := func(u, sa string) {
					for a := range xa {
						w.If(fmt.Sprintf("xk%d", a), func() { w.Linef("cp_ca16(%s + xo%[2]d, xg%[2]d + 64 * (%[3]s));", sa, a, u) })
					}
				}
				pr.loop(w, func() {}, acts, func(j int) {
					for _, r := range mma8Rows(mt) {
						w.Linef("u32 p0%[1]s, p1%[1]s, p2%[1]s, p3%[1]s;", r)
						switch t {
						case dtype.Q4_K:
							w.Linef("q4h(cw%[1]s, pack_h2(fa%[1]s, fa%[1]s), pack_h2(-mn%[1]s, -mn%[1]s), p0%[1]s, p1%[1]s, p2%[1]s, p3%[1]s);", r)
						case dtype.Q6_K:
							w.Linef("q6h(lo%[1]s, hi%[1]s, pack_h2(fa%[1]s, fa%[1]s), pack_h2(fb%[1]s, fb%[1]s), p0%[1]s, p1%[1]s, p2%[1]s, p3%[1]s);", r)
						}
					}
					w.For("nt", "0", "NT", "1", -1, func() {
						w.Comment("a tile of tokens past the block's rows is skipped (the same for the whole warp)")
						w.If("8 * nt < mrows", func() {
							w.Comment("token g's B fragments of both halves of the group, in HalfPos order")
							w.Line("const uint4 bx = *(const uint4*)(st + XO + (8 * nt + g) * TB + 16 * t);")
							for i := range mt {
								a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
								w.Linef("mma_h16(acc[%d][nt], p0%s, p0%s, p2%s, p2%s, bx.x, bx.y);", i, a, b, a, b)
								w.Linef("mma_h16(acc[%d][nt], p1%s, p1%s, p3%s, p3%s, bx.z, bx.w);", i, a, b, a, b)
							}
						})
					})
				})
				emitMMA8Finish(w, XQEnds{}, residual, mb, ks, redRing, false)
			}})
		})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: xqGlobalParams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, wr*arm.RowsPerBlock), ceilDiv(d.Tokens, mb), 1), Block: dim3(arm.Threads, 1, 1), Shared: uint32(shared)}
	}}, nil
}
