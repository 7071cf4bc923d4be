package codegen

import (
	"fmt"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// rpType describes the layout-1 GEMV of one repacked weight type: the
// elements of a 16-byte quant unit, the per-slot registers, how slot i of
// unit uu is loaded and how it is folded into acc.
type rpType struct {
	unitElems int
	planes    func(n, nb int) []string // #define lines of the plane offsets
	ptrs      []string                 // row pointers (rr is the row)
	regs      []string                 // per-slot register arrays (U slots)
	load      []string                 // slot i from unit uu
	dot       string                   // slot i of unit uu into acc
}

var rpTypes = map[dtype.Type]rpType{
	dtype.Q4_0: {
		unitElems: 32,
		planes:    func(n, nb int) []string { return []string{fmt.Sprintf("#define DOFF ((size_t)%d)", n*nb*16)} },
		ptrs:      []string{"const uint4* qp = (const uint4*)W + (size_t)rr * UPR;", "const u16* dp = (const u16*)(W + DOFF) + (size_t)rr * NB;"},
		regs:      []string{"uint4 q[U];", "u16 dh[U];"},
		load:      []string{"q[i] = qp[uu];", "dh[i] = dp[uu];"},
		dot:       "acc += rp_q4_0(q[i], dh[i], xs4, uu);",
	},
	dtype.Q8_0: {
		unitElems: 16,
		planes:    func(n, nb int) []string { return []string{fmt.Sprintf("#define DOFF ((size_t)%d)", n*nb*32)} },
		ptrs:      []string{"const uint4* qp = (const uint4*)W + (size_t)rr * UPR;", "const u16* dp = (const u16*)(W + DOFF) + (size_t)rr * NB;"},
		regs:      []string{"uint4 q[U];", "u16 dh[U];"},
		load:      []string{"q[i] = qp[uu];", "dh[i] = dp[uu >> 1];"},
		dot:       "acc += rp_q8_0(q[i], dh[i], xs4, uu);",
	},
	dtype.Q4_K: {
		unitElems: 32,
		planes:    func(n, nb int) []string { return []string{fmt.Sprintf("#define HOFF ((size_t)%d)", n*nb*128)} },
		ptrs:      []string{"const uint4* qp = (const uint4*)W + (size_t)rr * UPR;", "const uint4* hp = (const uint4*)(W + HOFF) + (size_t)rr * NB;"},
		regs:      []string{"uint4 q[U];", "uint4 hd[U];"},
		load:      []string{"q[i] = qp[uu];", "hd[i] = hp[uu >> 3];"},
		dot:       "acc += rp_q4_k(q[i], hd[i], uu & 7, xs4, uu);",
	},
	dtype.Q6_K: {
		unitElems: 32,
		planes: func(n, nb int) []string {
			return []string{fmt.Sprintf("#define HOFF ((size_t)%d)", n*nb*128), fmt.Sprintf("#define SOFF ((size_t)%d)", n*nb*192),
				fmt.Sprintf("#define DOFF ((size_t)%d)", n*nb*208)}
		},
		ptrs: []string{"const uint4* lp = (const uint4*)W + (size_t)rr * UPR;", "const uint2* hp = (const uint2*)(W + HOFF) + (size_t)rr * UPR;",
			"const u16* sp = (const u16*)(W + SOFF) + (size_t)rr * UPR;", "const u16* dp = (const u16*)(W + DOFF) + (size_t)rr * NB;"},
		regs: []string{"uint4 q[U];", "uint2 qh[U];", "u16 sc[U];", "u16 dh[U];"},
		load: []string{"q[i] = lp[uu];", "qh[i] = hp[uu];", "sc[i] = sp[uu];", "dh[i] = dp[uu >> 3];"},
		dot:  "acc += rp_q6_k(q[i], qh[i], sc[i], dh[i], xs4, uu);",
	},
}

var f4 = []string{"x", "y", "z", "w"}

// scope writes body inside a bare { } block.
func scope(w *Writer, body func()) {
	w.Line("{")
	w.indent++
	body()
	w.indent--
	w.Line("}")
}

// emitRepackHelpers writes the device functions of the layout-1 GEMV of t.
// Activations sit in shared memory as float4 chunks, swizzled per 32-float
// group g: chunk c at 8g + (c ^ (g & 7)), so the 8 threads of a quarter
// warp reading chunk c of consecutive groups hit distinct banks.
func emitRepackHelpers(w *Writer, t dtype.Type) {
	w.Comment("2^23 + n as a float, less off: an exact small integer with no int-to-float conversion.")
	w.Emit(Func{Name: "rp_q", Return: "float", Params: []Param{{"u32", "n"}, {"float", "off"}}, Body: func(w *Writer) {
		w.Line("return __int_as_float(0x4b000000u | n) - off;")
	}})
	w.Comment("Chunk c (4 floats) of 32-float activation group g.")
	w.Emit(Func{Name: "rp_x", Return: "float4", Params: []Param{{"const float4*", "xs4"}, {"int", "g"}, {"int", "c"}}, Body: func(w *Writer) {
		w.Line("return xs4[8 * g + (c ^ (g & 7))];")
	}})
	words := []string{"q.x", "q.y", "q.z", "q.w"}
	// nib returns the sum over the 4 bytes of word c of q(byte) * chunk.
	sum := func(q func(b int) string, chunk string) string {
		var terms []string
		for b := range 4 {
			terms = append(terms, fmt.Sprintf("%s * %s.%s", q(b), chunk, f4[b]))
		}
		return strings.Join(terms, " + ")
	}
	nibble := func(word string, shift int, off string) string {
		return fmt.Sprintf("rp_q((%s >> %d) & 15u, %s)", word, shift, off)
	}
	switch t {
	case dtype.Q4_0, dtype.Q4_K:
		params := []Param{{"uint4", "q"}, {"u16", "dh"}, {"const float4*", "xs4"}, {"int", "g"}}
		off := "8388616.f" // 2^23 + 8
		if t == dtype.Q4_K {
			params = []Param{{"uint4", "q"}, {"uint4", "hd"}, {"int", "j"}, {"const float4*", "xs4"}, {"int", "g"}}
			off = "8388608.f"
		}
		w.Comment("One unit of a repacked %v row: byte i holds element i (low nibble) and 16 + i (high).", t)
		w.Emit(Func{Name: "rp_" + typeTag(t), Return: "float", Params: params, Body: func(w *Writer) {
			w.Line("float s = 0.f;")
			if t == dtype.Q4_K {
				w.Line("float sx = 0.f;")
			}
			for c := range 4 {
				scope(w, func() {
					w.Linef("const float4 a = rp_x(xs4, g, %d), h = rp_x(xs4, g, %d);", c, c+4)
					w.Linef("s += %s;", sum(func(b int) string { return nibble(words[c], 8*b, off) }, "a"))
					w.Linef("s += %s;", sum(func(b int) string { return nibble(words[c], 8*b+4, off) }, "h"))
					if t == dtype.Q4_K {
						w.Line("sx += (a.x + a.y) + (a.z + a.w) + (h.x + h.y) + (h.z + h.w);")
					}
				})
			}
			if t == dtype.Q4_0 {
				w.Line("return f16_to_f32(dh) * s;")
				return
			}
			w.Line("float d, m;")
			w.Line("q4k_dm(hd, j, d, m);")
			w.Line("return d * s - m * sx;")
		}})
	case dtype.Q8_0:
		w.Comment("One unit (16 elements, half a block) of a repacked Q8_0 row.")
		w.Emit(Func{Name: "rp_q8_0", Return: "float", Params: []Param{{"uint4", "q"}, {"u16", "dh"}, {"const float4*", "xs4"}, {"int", "uu"}}, Body: func(w *Writer) {
			w.Line("const int g = uu >> 1, cb = 4 * (uu & 1);")
			w.Line("float s = 0.f;")
			for c := range 4 {
				scope(w, func() {
					w.Linef("const float4 a = rp_x(xs4, g, cb + %d);", c)
					w.Linef("s += %s;", sum(func(b int) string {
						return fmt.Sprintf("rp_q(((%s >> %d) & 255u) ^ 128u, 8388736.f)", words[c], 8*b)
					}, "a"))
				})
			}
			w.Line("return f16_to_f32(dh) * s;")
		}})
	case dtype.Q6_K:
		w.Comment("One unit of a repacked Q6_K row: low 4 bits as in Q4_0, high 2 bits in qh placed")
		w.Comment("beside them by q6_words (6-bit bytes); scales sc (elements 0-15: low byte).")
		emitQ6Words(w)
		w.Emit(Func{Name: "rp_q6_k", Return: "float", Params: []Param{{"uint4", "q"}, {"uint2", "qh"}, {"u16", "sc"}, {"u16", "dh"}, {"const float4*", "xs4"}, {"int", "g"}}, Body: func(w *Writer) {
			w.Line("float s0 = 0.f, s1 = 0.f;")
			for c := range 4 {
				scope(w, func() {
					w.Linef("u32 lo, hi;")
					w.Linef("q6_words(%s, %s, %d, lo, hi);", words[c], []string{"qh.x", "qh.x", "qh.y", "qh.y"}[c], c&1)
					w.Linef("const float4 a = rp_x(xs4, g, %d), h = rp_x(xs4, g, %d);", c, c+4)
					six := func(word string, b int) string {
						return fmt.Sprintf("rp_q((%s >> %d) & 255u, 8388640.f)", word, 8*b)
					}
					w.Linef("s0 += %s;", sum(func(b int) string { return six("lo", b) }, "a"))
					w.Linef("s1 += %s;", sum(func(b int) string { return six("hi", b) }, "h"))
				})
			}
			w.Line("const float d = f16_to_f32(dh);")
			w.Line("return d * (float)(signed char)(sc & 0xffu) * s0 + d * (float)(signed char)(sc >> 8) * s1;")
		}})
	default:
		panic(fmt.Sprintf("BUG: no repacked GEMV for %v", t))
	}
}

// gemvRepacked is GEMV for arm.Layout 1: W in the repacked layout of
// Repack. Each thread keeps arm.Unroll 16-byte quant loads (and their
// scales) in flight; the first ones are issued before the PDL wait, since
// weights do not depend on the previous kernel.
func gemvRepacked(t dtype.Type, n, k int, residual bool, arm GEMVArm) (*Kernel, error) {
	rt, ok := rpTypes[t]
	if !ok {
		return nil, fmt.Errorf("%w: gemv layout 1 for %v (have %v)", ErrUnsupported, t, RepackTypes)
	}
	if arm.SharedX != 1 {
		return nil, fmt.Errorf("%w: gemv layout 1 needs shared_x 1", ErrUnsupported)
	}
	nb := k / t.BlockElems()
	tpr := arm.Threads / arm.RowsPerBlock
	epi := ""
	if residual {
		epi = "_res"
	}
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	params := productParams(false)
	src := source(fmt.Sprintf("gemv: %v weights repacked, N %d, K %d, residual %v, %v", t, n, k, residual, arm), repackDeps(t, "f16", "warp", "pdl"), func(w *Writer) {
		emitRepackHelpers(w, t)
		emitRepackDefines(w, rt, n, k, nb)
		w.Linef("#define TPR %d // threads per row", tpr)
		w.Linef("#define RPB %d // rows per block", arm.RowsPerBlock)
		w.Linef("#define U %d // units in flight per thread", arm.Unroll)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("const int r = blockIdx.x * RPB + threadIdx.x / TPR;")
			w.Line("const int lane = threadIdx.x % TPR;")
			if n%arm.RowsPerBlock != 0 {
				w.Comment("rows past N (last block only) read row N-1 and store nothing")
				w.Line("const int rr = r < N ? r : N - 1;")
			} else {
				w.Line("const int rr = r;")
			}
			for _, p := range rt.ptrs {
				w.Line(p)
			}
			for _, p := range rt.regs {
				w.Line(p)
			}
			load := func() {
				w.For("i", "0", "U", "1", -1, func() {
					w.Line("const int uu = u + i * TPR;")
					w.If("uu < UPR", func() {
						for _, l := range rt.load {
							w.Line(l)
						}
					})
				})
			}
			w.Line("int u = lane;")
			w.Comment("the first weight loads do not wait for the previous kernel")
			load()
			w.Line("pdl_wait();")
			w.Line("extern __shared__ float4 xs4[];")
			w.Line("const float4* xg = (const float4*)(x + (size_t)blockIdx.y * K);")
			w.For("i", "threadIdx.x", "K / 4", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("xs4[(i & ~7) + ((i & 7) ^ ((i >> 3) & 7))] = xg[i];")
			})
			w.Line("__syncthreads();")
			w.Line("float acc = 0.f;")
			w.Block("for (;;)", func() {
				w.For("i", "0", "U", "1", -1, func() {
					w.Line("const int uu = u + i * TPR;")
					w.If("uu < UPR", func() { w.Line(rt.dot) })
				})
				w.Line("u += U * TPR;")
				w.If("u >= UPR", func() { w.Line("break;") })
				load()
			})
			gemvRowStore(w, arm, tpr, n, residual, "N")
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.RowsPerBlock), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1), Shared: uint32(4 * k)}
	}}, nil
}

// repackDeps are the helpers of a product over repacked weights of type t:
// deps, and the Q4_K head decoder for Q4_K.
func repackDeps(t dtype.Type, deps ...string) []string {
	if t == dtype.Q4_K {
		return append(deps, "q4k_dm")
	}
	return deps
}

// emitQ6Words writes q6_words(l, h, odd, lo, hi): the 6-bit quants of one
// 32-bit word l of a repacked Q6_K unit's low-bit plane, as four bytes each:
// lo for its low nibbles (elements 4c..4c+3), hi for its high nibbles
// (elements 16+4c..16+4c+3), with the high bits from word h of the unit's
// high-bit plane (odd: l is an odd word c; see the layout in repack.go).
func emitQ6Words(w *Writer) {
	w.Emit(Func{Name: "q6_words", Params: []Param{{"u32", "l"}, {"u32", "h"}, {"int", "odd"}, {"u32&", "lo"}, {"u32&", "hi"}}, Body: func(w *Writer) {
		w.Line("const u32 hl = odd ? h : h << 4, hh = odd ? h >> 2 : h << 2;")
		w.Line("lo = (l & 0x0f0f0f0fu) | (hl & 0x30303030u);")
		w.Line("hi = ((l >> 4) & 0x0f0f0f0fu) | (hh & 0x30303030u);")
	}})
}

// emitRepackDefines writes the shape constants of a layout-1 GEMV: N, K,
// blocks and 16-byte units per row, and the plane offsets.
func emitRepackDefines(w *Writer, rt rpType, n, k, nb int) {
	w.Linef("#define N %d", n)
	w.Linef("#define K %d", k)
	w.Linef("#define NB %d // blocks per row", nb)
	w.Linef("#define UPR %d // 16-byte quant units per row", k/rt.unitElems)
	for _, p := range rt.planes(n, nb) {
		w.Raw(p)
	}
}
