package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// The dequantisers of the 2- and 3-bit k-quants and of the non-linear
// 4-bit types (Q2_K, Q3_K, IQ4_NL, IQ4_XS): dq32_<type>(row, u, v) like the
// others in helpers.go, so every product that reads the file's layout
// (GEMV, the mma and gemm_small products, DequantBF16 for cuBLASLt, the MoE
// products) and the embedding lookup take them. None of them has a
// repacked layout: lowering gives their decode products the float GEMV on
// the file's layout (lowerer.gemvArm).
//
// Each value is computed with the roundings ir/dtype's dequantiser uses, so
// the two agree bit for bit (TestLowBitDequantMirror). Where the compiler
// may contract a product and a subtraction into an fma (Q2_K's scale times
// code less the min), the product is exact (an f16 times a 4-bit scale
// times a 2-bit code: at most 17 significant bits), so the fma rounds as
// the separate operations do.

// iq4Codebook is the value of each 4-bit code of IQ4_NL and IQ4_XS.
var iq4Codebook = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// iq4Words are iq4Codebook's 16 bytes as four little-endian words, the
// operands of iq4_value's byte permutes.
var iq4Words = func() (w [4]uint32) {
	for i, v := range iq4Codebook {
		w[i/4] |= uint32(uint8(v)) << (8 * (i % 4))
	}
	return w
}()

// emitDequantLowBit writes the body of dq32_<t> for Q2_K, Q3_K, IQ4_NL and
// IQ4_XS. The alignment each load assumes is the block's within a row of
// whole blocks: 4 bytes for Q2_K (84-byte blocks), 2 for Q3_K (110) and
// IQ4_NL (18), 8 for IQ4_XS (136).
func emitDequantLowBit(w *Writer, t dtype.Type) {
	switch t {
	case dtype.Q2_K:
		// scales[16] (scale low, min high nibble per 16 elements), qs[64] (2 bits:
		// element 128h + 32g + l in bits 2g of byte 32h + l), d, dmin
		w.Line("const u8* b = row + 84 * (u >> 3);")
		w.Line("const int j = u & 7;")
		w.Line("const float d = f16_to_f32(*(const u16*)(b + 80));")
		w.Line("const float dm = f16_to_f32(*(const u16*)(b + 82));")
		w.Line("const u32 s = *(const u16*)(b + 2 * j); // the scales of elements 0-15 and 16-31")
		w.Line("const float d0 = d * (float)(s & 15u), m0 = dm * (float)((s >> 4) & 15u);")
		w.Line("const float d1 = d * (float)((s >> 8) & 15u), m1 = dm * (float)(s >> 12);")
		w.Line("const u32* qp = (const u32*)(b + 16 + 32 * (j >> 2));")
		w.Line("const int shift = 2 * (j & 3);")
		w.For("i", "0", "8", "1", -1, func() {
			w.Line("const u32 x = qp[i] >> shift;")
			w.Line("const float dd = i < 4 ? d0 : d1, mm = i < 4 ? m0 : m1;")
			w.For("k", "0", "4", "1", -1, func() {
				w.Line("v[4 * i + k] = dd * (float)((x >> (8 * k)) & 3u) - mm;")
			})
		})
	case dtype.Q3_K:
		// hmask[32] (the third bit, clear for q - 4: element 32g + l in bit g of
		// byte l), qs[64] (the low bits, as Q2_K), scales[12] (sixteen 6-bit
		// scales less 32: low nibbles in bytes 0-7, high pairs in 8-11), d
		w.Line("const u8* b = row + 110 * (u >> 3);")
		w.Line("const int j = u & 7;")
		w.Line("const float d = f16_to_f32(*(const u16*)(b + 108));")
		w.Line("const u8* sc = b + 96;")
		w.Line("const int a = (2 * j) & 7, ls = 4 * (j >> 2), hs = 2 * (j >> 1);")
		w.Line("const float d0 = d * (float)((int)(((sc[a] >> ls) & 15) | (((sc[8 + (a & 3)] >> hs) & 3) << 4)) - 32);")
		w.Line("const float d1 = d * (float)((int)(((sc[a + 1] >> ls) & 15) | (((sc[9 + (a & 3)] >> hs) & 3) << 4)) - 32);")
		w.Line("const u16* qp = (const u16*)(b + 32 + 32 * (j >> 2));")
		w.Line("const u16* hp = (const u16*)b;")
		w.Line("const int shift = 2 * (j & 3);")
		w.For("i", "0", "16", "1", -1, func() {
			w.Line("const u32 x = (u32)qp[i] >> shift, h = (u32)hp[i] >> j;")
			w.Line("const float dd = i < 8 ? d0 : d1;")
			w.Line("v[2 * i] = dd * (float)((int)(x & 3u) - (h & 1u ? 0 : 4));")
			w.Line("v[2 * i + 1] = dd * (float)((int)((x >> 8) & 3u) - ((h >> 8) & 1u ? 0 : 4));")
		})
	case dtype.IQ4_NL:
		// d, qs[16]: element l in the low nibble of byte l, l + 16 in its high one
		w.Line("const u8* b = row + 18 * u;")
		w.Line("const float d = f16_to_f32(*(const u16*)b);")
		w.Line("const u16* q = (const u16*)(b + 2);")
		w.For("i", "0", "8", "1", -1, func() {
			w.Line("const u32 s = q[i];")
			w.Line("v[2 * i] = d * iq4_value(s & 15u);")
			w.Line("v[2 * i + 1] = d * iq4_value((s >> 8) & 15u);")
			w.Line("v[2 * i + 16] = d * iq4_value((s >> 4) & 15u);")
			w.Line("v[2 * i + 17] = d * iq4_value(s >> 12);")
		})
	case dtype.IQ4_XS:
		// d, scales_h (2 high bits of each 6-bit scale), scales_l[4] (the low
		// nibbles), qs[128] (32-element sub-blocks coded as IQ4_NL's)
		w.Line("const u8* b = row + 136 * (u >> 3);")
		w.Line("const int j = u & 7;")
		w.Line("const float d = f16_to_f32(*(const u16*)b);")
		w.Line("const u32 sh = *(const u16*)(b + 2);")
		w.Line("const int ls = (int)(((b[4 + (j >> 1)] >> (4 * (j & 1))) & 15) | (((sh >> (2 * j)) & 3u) << 4));")
		w.Line("const float dl = d * (float)(ls - 32);")
		w.Line("const uint2* qp = (const uint2*)(b + 8 + 16 * j);")
		w.For("i", "0", "2", "1", -1, func() {
			w.Line("const uint2 q = qp[i];")
			w.Line("const u32 x[2] = {q.x, q.y};")
			w.For("k", "0", "8", "1", -1, func() {
				w.Line("const u32 c = x[k >> 2] >> (8 * (k & 3));")
				w.Line("v[8 * i + k] = dl * iq4_value(c & 15u);")
				w.Line("v[8 * i + k + 16] = dl * iq4_value((c >> 4) & 15u);")
			})
		})
	default:
		panic(fmt.Sprintf("BUG: emitDequantLowBit for %v", t))
	}
}
