package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// helper is a __device__ function (or macro block) kernels can request.
type helper struct {
	deps []string
	emit func(w *Writer)
}

// helperOrder fixes the order helpers appear in a source file.
var helperOrder = []string{
	"types", "f16", "bf16", "warp", "warp_up", "rope_rot", "pdl", "swiglu4", "norm4", "kscale", "q4k_dm",
	"dq_f32", "dq_f16", "dq_bf16", "dq_q4_0", "dq_q4_1", "dq_q5_0", "dq_q5_1", "dq_q8_0", "dq_q4_k", "dq_q5_k", "dq_q6_k",
	"iq4_table", "dq_q2_k", "dq_q3_k", "dq_iq4_nl", "dq_iq4_xs",
}

var helpers = map[string]helper{
	"types": {emit: func(w *Writer) {
		w.Line("typedef unsigned char u8;")
		w.Line("typedef unsigned short u16;")
		w.Line("typedef unsigned int u32;")
		w.Blank()
	}},
	"f16": {deps: []string{"types"}, emit: func(w *Writer) {
		w.Emit(Func{Name: "f16_to_f32", Return: "float", Params: []Param{{"u16", "h"}}, Body: func(w *Writer) {
			w.Line("float f;")
			w.Line(`asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));`)
			w.Line("return f;")
		}})
		w.Emit(Func{Name: "f32_to_f16", Return: "u16", Params: []Param{{"float", "f"}}, Body: func(w *Writer) {
			w.Line("u16 h;")
			w.Line(`asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));`)
			w.Line("return h;")
		}})
	}},
	"bf16": {deps: []string{"types"}, emit: func(w *Writer) {
		w.Emit(Func{Name: "bf16_to_f32", Return: "float", Params: []Param{{"u16", "h"}}, Body: func(w *Writer) {
			w.Line("return __uint_as_float(((u32)h) << 16);")
		}})
		w.Emit(Func{Name: "f32_to_bf16", Return: "u16", Params: []Param{{"float", "f"}}, Body: func(w *Writer) {
			w.Comment("round to nearest even; NaN stays NaN")
			w.Line("u32 u = __float_as_uint(f);")
			w.If("(u & 0x7fffffffu) > 0x7f800000u", func() { w.Line("return (u16)((u >> 16) | 0x40);") })
			w.Line("u += 0x7fffu + ((u >> 16) & 1u);")
			w.Line("return (u16)(u >> 16);")
		}})
	}},
}

func init() {
	helpers["warp"] = helper{emit: func(w *Writer) {
		for _, op := range []struct{ name, expr string }{{"warp_sum", "v += __shfl_xor_sync(0xffffffffu, v, o);"}, {"warp_max", "v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));"}} {
			w.Emit(Func{Name: op.name, Return: "float", Params: []Param{{"float", "v"}}, Body: func(w *Writer) {
				w.Line("#pragma unroll")
				w.Block("for (int o = 16; o > 0; o >>= 1)", func() { w.Line(op.expr) })
				w.Line("return v;")
			}})
		}
	}}
	helpers["warp_up"] = helper{emit: func(w *Writer) {
		w.Comment("The warp's sum by the butterfly from below (lanes L and L^1, then ^2, … ^16): the")
		w.Comment("sum of 32 values in index order as a balanced tree, the tree XQuant adds a")
		w.Comment("group's 32 elements by, so a warp that holds a group a lane an element and")
		w.Comment("XQuant, which holds it 8 a thread, write the same float.")
		w.Emit(Func{Name: "warp_sum_up", Return: "float", Params: []Param{{"float", "v"}}, Body: func(w *Writer) {
			w.Line("#pragma unroll")
			w.Block("for (int o = 1; o < 32; o <<= 1)", func() { w.Line("v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));") })
			w.Line("return v;")
		}})
	}}
	helpers["rope_rot"] = helper{emit: func(w *Writer) {
		w.Comment("The pair (a, b) rotated by the angle of cosine cs and sine sn, every product and")
		w.Comment("sum rounded as written (no contraction left to the compiler), so that RopeKV and")
		w.Comment("the QKV products' RoPE epilogue rotate a pair to the same floats.")
		w.Emit(Func{Name: "rope_rot", Params: []Param{{"float&", "a"}, {"float&", "b"}, {"float", "cs"}, {"float", "sn"}}, Body: func(w *Writer) {
			w.Line("const float ra = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));")
			w.Line("b = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, cs));")
			w.Line("a = ra;")
		}})
	}}
	helpers["pdl"] = helper{emit: func(w *Writer) {
		w.Comment("Programmatic dependent launch (sm_90+): wait for the previous kernel's")
		w.Comment("results; let the next kernel start its prologue (pdl_launch, at the")
		w.Comment("kernel's end). MEMRA_PDL_EARLY lets it launch right after the wait")
		w.Comment("instead (its own wait still waits for this whole grid): measured")
		w.Comment("slower on the H200 (prefill 10 percent slower), kept for comparison.")
		w.Emit(Func{Name: "pdl_wait", Body: func(w *Writer) {
			w.IfArch("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900", func() {
				w.Line(`asm volatile("griddepcontrol.wait;" ::: "memory");`)
				w.IfArch("defined(MEMRA_PDL_EARLY)", func() {
					w.Line(`asm volatile("griddepcontrol.launch_dependents;");`)
				})
			})
		}})
		w.Emit(Func{Name: "pdl_launch", Body: func(w *Writer) {
			w.IfArch("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900", func() {
				w.Line(`asm volatile("griddepcontrol.launch_dependents;");`)
			})
		}})
	}}
	helpers["swiglu4"] = helper{deps: []string{"types"}, emit: func(w *Writer) {
		w.Comment("silu(g) · u of four elements (the SwiGLU kernel and the GEMVs that fuse it).")
		w.Emit(Func{Name: "swiglu4", Return: "float4", Params: []Param{{"float4", "g"}, {"float4", "u"}}, Body: func(w *Writer) {
			w.Line("return make_float4(g.x / (1.f + expf(-g.x)) * u.x, g.y / (1.f + expf(-g.y)) * u.y,")
			w.Line("                   g.z / (1.f + expf(-g.z)) * u.z, g.w / (1.f + expf(-g.w)) * u.w);")
		}})
	}}
	helpers["norm4"] = helper{deps: []string{"types"}, emit: func(w *Writer) {
		w.Comment("Four elements of an RMS-normalised row: v · (1/rms) r · weight g.")
		w.Emit(Func{Name: "norm4", Return: "float4", Params: []Param{{"float4", "v"}, {"float", "r"}, {"float4", "g"}}, Body: func(w *Writer) {
			w.Line("return make_float4(v.x * r * g.x, v.y * r * g.y, v.z * r * g.z, v.w * r * g.w);")
		}})
	}}
	helpers["kscale"] = helper{deps: []string{"types"}, emit: func(w *Writer) {
		w.Comment("6-bit scale and min j (0..7) of a Q4_K/Q5_K block's 12-byte table s.")
		w.Emit(Func{Name: "kq_scale_min", Params: []Param{{"const u8*", "s"}, {"int", "j"}, {"float&", "sc"}, {"float&", "mn"}}, Body: func(w *Writer) {
			w.IfElse("j < 4", func() {
				w.Line("sc = (float)(s[j] & 63);")
				w.Line("mn = (float)(s[j + 4] & 63);")
			}, func() {
				w.Line("sc = (float)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));")
				w.Line("mn = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));")
			})
		}})
	}}
	helpers["q4k_dm"] = helper{deps: []string{"f16"}, emit: func(w *Writer) {
		w.Comment("Scale d and min m of sub-block j (0..7) of a repacked Q4_K super-block's")
		w.Comment("16-byte head hd (d and dmin as f16 in x, the 12 bytes of 6-bit scales and mins in y, z, w).")
		w.Emit(Func{Name: "q4k_dm", Params: []Param{{"uint4", "hd"}, {"int", "j"}, {"float&", "d"}, {"float&", "m"}}, Body: func(w *Writer) {
			w.Line("const int sh = 8 * (j & 3);")
			w.Line("const u32 lo = (hd.y >> sh) & 63u, lm = (hd.z >> sh) & 63u;")
			w.Line("const u32 hi = ((hd.w >> sh) & 15u) | (((hd.y >> (sh + 6)) & 3u) << 4);")
			w.Line("const u32 hm = ((hd.w >> (sh + 4)) & 15u) | (((hd.z >> (sh + 6)) & 3u) << 4);")
			w.Comment("the 6-bit values as floats by their bit patterns (2^23 + v, less 2^23): exact, no conversion")
			w.Line("d = f16_to_f32((u16)(hd.x & 0xffffu)) * (__int_as_float(0x4b000000u | (j < 4 ? lo : hi)) - 8388608.f);")
			w.Line("m = f16_to_f32((u16)(hd.x >> 16)) * (__int_as_float(0x4b000000u | (j < 4 ? lm : hm)) - 8388608.f);")
		}})
	}}
	helpers["iq4_table"] = helper{deps: []string{"types"}, emit: func(w *Writer) {
		w.Comment("Code q (0..15) of IQ4_NL and IQ4_XS as its value in the non-linear codebook")
		w.Comment("(-127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113): a byte permute")
		w.Comment("of the table's 16 bytes, no memory read.")
		w.Emit(Func{Name: "iq4_value", Return: "float", Params: []Param{{"u32", "q"}}, Body: func(w *Writer) {
			w.Linef("const u32 lo = __byte_perm(0x%08xu, 0x%08xu, q & 7u);", iq4Words[0], iq4Words[1])
			w.Linef("const u32 hi = __byte_perm(0x%08xu, 0x%08xu, q & 7u);", iq4Words[2], iq4Words[3])
			w.Line("return (float)(signed char)(q & 8u ? hi : lo);")
		}})
	}}
	for _, t := range WeightTypes {
		t := t
		helpers[dqHelper(t)] = helper{deps: dqDeps(t), emit: func(w *Writer) { emitDequant(w, t) }}
	}
}

// dqHelper names the helper that dequantises 32 elements of type t.
func dqHelper(t dtype.Type) string { return "dq_" + typeTag(t) }

// dqFunc names the device function dq32_<type>(row, u, v).
func dqFunc(t dtype.Type) string { return "dq32_" + typeTag(t) }

func dqDeps(t dtype.Type) []string {
	switch t {
	case dtype.F32:
		return []string{"types"}
	case dtype.BF16:
		return []string{"bf16"}
	case dtype.Q4_K, dtype.Q5_K:
		return []string{"f16", "kscale"}
	case dtype.IQ4_NL, dtype.IQ4_XS:
		return []string{"f16", "iq4_table"}
	default:
		return []string{"f16"}
	}
}

// emitHelpers writes the requested helpers and their dependencies in
// helperOrder.
func emitHelpers(w *Writer, names []string) {
	want := map[string]bool{}
	var add func(n string)
	add = func(n string) {
		h, ok := helpers[n]
		if !ok {
			panic("BUG: codegen helper " + n + " not registered")
		}
		if want[n] {
			return
		}
		want[n] = true
		for _, d := range h.deps {
			add(d)
		}
	}
	for _, n := range names {
		add(n)
	}
	for _, n := range helperOrder {
		if want[n] {
			helpers[n].emit(w)
		}
	}
}

// emitDequant writes dq32_<type>(row, u, v): elements 32u..32u+31 of a
// stored row, as floats, into v[0..31].
func emitDequant(w *Writer, t dtype.Type) {
	w.Comment("Elements 32u..32u+31 of a %v row, dequantised into v.", t)
	w.Emit(Func{Name: dqFunc(t), Params: []Param{{"const u8* __restrict__", "row"}, {"int", "u"}, {"float*", "v"}}, Body: func(w *Writer) {
		switch t {
		case dtype.F32:
			w.Line("const float4* p = (const float4*)(row + 128 * u);")
			w.For("i", "0", "8", "1", -1, func() {
				w.Line("float4 q = p[i];")
				w.Line("v[4 * i] = q.x; v[4 * i + 1] = q.y; v[4 * i + 2] = q.z; v[4 * i + 3] = q.w;")
			})
		case dtype.F16, dtype.BF16:
			conv := "f16_to_f32"
			if t == dtype.BF16 {
				conv = "bf16_to_f32"
			}
			w.Line("const uint4* p = (const uint4*)(row + 64 * u);")
			w.For("i", "0", "4", "1", -1, func() {
				w.Line("uint4 q = p[i];")
				w.Line("u32 x[4] = {q.x, q.y, q.z, q.w};")
				w.For("j", "0", "4", "1", -1, func() {
					w.Linef("v[8 * i + 2 * j] = %s((u16)(x[j] & 0xffffu));", conv)
					w.Linef("v[8 * i + 2 * j + 1] = %s((u16)(x[j] >> 16));", conv)
				})
			})
		case dtype.Q8_0:
			w.Line("const u8* b = row + 34 * u;")
			w.Line("const float d = f16_to_f32(*(const u16*)b);")
			w.Line("const u16* q = (const u16*)(b + 2);")
			w.For("i", "0", "16", "1", -1, func() {
				w.Line("u16 s = q[i];")
				w.Line("v[2 * i] = d * (float)(signed char)(s & 0xff);")
				w.Line("v[2 * i + 1] = d * (float)(signed char)(s >> 8);")
			})
		case dtype.Q4_0:
			w.Line("const u8* b = row + 18 * u;")
			w.Line("const float d = f16_to_f32(*(const u16*)b);")
			w.Line("const u16* q = (const u16*)(b + 2);")
			w.For("i", "0", "8", "1", -1, func() {
				w.Line("u16 s = q[i];")
				w.Line("v[2 * i] = d * (float)((int)(s & 15) - 8);")
				w.Line("v[2 * i + 1] = d * (float)((int)((s >> 8) & 15) - 8);")
				w.Line("v[2 * i + 16] = d * (float)((int)((s >> 4) & 15) - 8);")
				w.Line("v[2 * i + 17] = d * (float)((int)(s >> 12) - 8);")
			})
		case dtype.Q4_1:
			w.Line("const u8* b = row + 20 * u;")
			w.Line("const float d = f16_to_f32(*(const u16*)b);")
			w.Line("const float m = f16_to_f32(*(const u16*)(b + 2));")
			w.For("i", "0", "16", "1", -1, func() {
				w.Line("const u8 q = b[4 + i];")
				w.Line("v[i] = d * (float)(q & 15) + m;")
				w.Line("v[i + 16] = d * (float)(q >> 4) + m;")
			})
		case dtype.Q5_0, dtype.Q5_1:
			// Q5_0: d, qh[4], qs[16] (22 bytes); Q5_1: d, m, qh[4], qs[16] (24 bytes).
			hdr, bias := 2, "- 16"
			if t == dtype.Q5_1 {
				hdr, bias = 4, ""
			}
			w.Linef("const u8* b = row + %d * u;", t.BlockBytes())
			w.Line("const float d = f16_to_f32(*(const u16*)b);")
			if t == dtype.Q5_1 {
				w.Line("const float m = f16_to_f32(*(const u16*)(b + 2));")
			}
			w.Linef("const u32 qh = (u32)b[%d] | ((u32)b[%d] << 8) | ((u32)b[%d] << 16) | ((u32)b[%d] << 24);", hdr, hdr+1, hdr+2, hdr+3)
			w.For("i", "0", "16", "1", -1, func() {
				w.Linef("const u8 q = b[%d + i];", hdr+4)
				lo := fmt.Sprintf("(float)((int)((q & 15) | (((qh >> i) & 1) << 4)) %s)", bias)
				hi := fmt.Sprintf("(float)((int)((q >> 4) | (((qh >> (i + 16)) & 1) << 4)) %s)", bias)
				if t == dtype.Q5_1 {
					w.Linef("v[i] = d * %s + m;", lo)
					w.Linef("v[i + 16] = d * %s + m;", hi)
				} else {
					w.Linef("v[i] = d * %s;", lo)
					w.Linef("v[i + 16] = d * %s;", hi)
				}
			})
		case dtype.Q4_K, dtype.Q5_K:
			bb := t.BlockBytes()
			qsOff := 16
			if t == dtype.Q5_K {
				qsOff = 48
			}
			w.Linef("const u8* b = row + %d * (u >> 3);", bb)
			w.Line("const int j = u & 7;")
			w.Line("float sc, mn;")
			w.Line("kq_scale_min(b + 4, j, sc, mn);")
			w.Line("const float d = f16_to_f32(*(const u16*)b) * sc;")
			w.Line("const float m = f16_to_f32(*(const u16*)(b + 2)) * mn;")
			w.Line("const int shift = 4 * (j & 1);")
			w.Linef("const uint4* qp = (const uint4*)(b + %d + 32 * (j >> 1));", qsOff)
			if t == dtype.Q5_K {
				w.Line("const uint4* hp = (const uint4*)(b + 16);")
			}
			w.For("i", "0", "2", "1", -1, func() {
				w.Line("uint4 q = qp[i];")
				w.Line("u32 x[4] = {q.x, q.y, q.z, q.w};")
				if t == dtype.Q5_K {
					w.Line("uint4 h = hp[i];")
					w.Line("u32 hx[4] = {h.x, h.y, h.z, h.w};")
				}
				w.For("k", "0", "16", "1", -1, func() {
					w.Line("int n = (x[k >> 2] >> (8 * (k & 3) + shift)) & 15;")
					if t == dtype.Q5_K {
						w.Line("n += ((hx[k >> 2] >> (8 * (k & 3) + j)) & 1) << 4;")
					}
					w.Line("v[16 * i + k] = d * (float)n - m;")
				})
			})
		case dtype.Q6_K:
			w.Line("const u8* b = row + 210 * (u >> 3);")
			w.Line("const int j = u & 7, h = j >> 2, g = j & 3;")
			w.Line("const float d = f16_to_f32(*(const u16*)(b + 208));")
			w.Line("const float s0 = d * (float)(signed char)b[192 + 2 * j];")
			w.Line("const float s1 = d * (float)(signed char)b[193 + 2 * j];")
			w.Line("const u16* ql = (const u16*)(b + 64 * h + 32 * (g & 1));")
			w.Line("const u16* qh = (const u16*)(b + 128 + 32 * h);")
			w.Line("const int lshift = 4 * (g >> 1), hshift = 2 * g;")
			w.For("i", "0", "16", "1", -1, func() {
				w.Line("u32 l = ql[i], hi = qh[i];")
				w.Line("int q0 = (int)(((l >> lshift) & 15) | (((hi >> hshift) & 3) << 4)) - 32;")
				w.Line("int q1 = (int)(((l >> (8 + lshift)) & 15) | (((hi >> (8 + hshift)) & 3) << 4)) - 32;")
				w.Line("v[2 * i] = (i < 8 ? s0 : s1) * (float)q0;")
				w.Line("v[2 * i + 1] = (i < 8 ? s0 : s1) * (float)q1;")
			})
		case dtype.Q2_K, dtype.Q3_K, dtype.IQ4_NL, dtype.IQ4_XS:
			emitDequantLowBit(w, t)
		default:
			panic(fmt.Sprintf("BUG: no dequantiser for %v", t))
		}
	}})
}
