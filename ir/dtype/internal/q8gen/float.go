package main

import "fmt"

// The float products (F32, F16, BF16 weights, float32 activations), in the
// same tiles of 16 rows: element k of the 16 rows is one vector of 16
// weights. Each token keeps four sums, element k going to sum k mod 4 by a
// fused multiply-add; the result is (s0 + s1) + (s2 + s3).

// floatFormat is one float type's kernels.
type floatFormat struct {
	typ      string
	vb       int // bytes of one element of the 16 rows
	vnniMaxT int
	avx2MaxT int
}

var floatFormats = []floatFormat{
	{typ: "F32", vb: 64, vnniMaxT: 6, avx2MaxT: 2},
	{typ: "F16", vb: 32, vnniMaxT: 6, avx2MaxT: 2},
	{typ: "BF16", vb: 32, vnniMaxT: 6, avx2MaxT: 2},
}

// floatPrologue loads the arguments: SI the tile, CX the steps of four
// elements, the token pointers (stride bytes apart), R10 the output.
func floatPrologue(a *asm, k kernel) {
	fmt.Fprintf(&a.b, "// func %s(tile *byte, steps int, x *float32, stride int, out *float32, ldo int)\n", k.name)
	fmt.Fprintf(&a.b, "TEXT ·%s(SB), NOSPLIT, $0-48\n", k.name)
	a.f("MOVQ tile+0(FP), SI")
	a.f("MOVQ steps+8(FP), CX")
	a.f("MOVQ x+16(FP), DI")
	a.f("MOVQ stride+24(FP), R9")
	a.f("MOVQ out+32(FP), R10")
	for t := 1; t < k.t; t++ {
		a.f("LEAQ (%s)(R9*1), %s", tokRegs[t-1], tokRegs[t])
	}
}

// floatLoad loads element j of the step's four into register w (zmm or
// ymm) as float32.
func floatLoad(a *asm, f floatFormat, j int, w string) {
	switch f.typ {
	case "F32":
		a.f("VMOVUPS %d(SI), %s", f.vb*j, w)
	case "F16":
		a.f("VCVTPH2PS %d(SI), %s", f.vb*j, w)
	case "BF16":
		a.f("VPMOVZXWD %d(SI), %s", f.vb*j, w)
		a.f("VPSLLD $16, %s, %s", w, w)
	}
}

// floatVNNI writes one AVX-512 float kernel: sums Z(4t+j), weights
// Z24..Z27.
func floatVNNI(a *asm, k kernel, f floatFormat) {
	floatPrologue(a, k)
	for r := range 4 * k.t {
		a.f("VPXORD Z%d, Z%d, Z%d", r, r, r)
	}
	loop := k.name + "_loop"
	a.label(loop)
	for j := range 4 {
		w := z(24 + j)
		floatLoad(a, f, j, w)
		for t := range k.t {
			a.f("VFMADD231PS.BCST %d(%s), %s, Z%d", 4*j, tokRegs[t], w, 4*t+j)
		}
	}
	a.f("ADDQ $%d, SI", 4*f.vb)
	for t := range k.t {
		a.f("ADDQ $16, %s", tokRegs[t])
	}
	a.f("DECQ CX")
	a.f("JNZ %s", loop)
	a.f("MOVQ ldo+40(FP), CX")
	for t := range k.t {
		a.f("VADDPS Z%d, Z%d, Z%d", 4*t+1, 4*t, 4*t)
		a.f("VADDPS Z%d, Z%d, Z%d", 4*t+3, 4*t+2, 4*t+2)
		a.f("VADDPS Z%d, Z%d, Z%d", 4*t+2, 4*t, 4*t)
		a.f("VMOVUPS Z%d, (R10)", 4*t)
		if t+1 < k.t {
			a.f("ADDQ CX, R10")
		}
	}
	a.f("VZEROUPPER")
	a.f("RET")
	a.raw("\n")
}

// floatAVX2 writes one AVX2 float kernel: two passes of 8 rows (BX 0 then
// 16: the byte offset of the pass in a vector of 16-bit weights), sums
// Y(4t+j), weights Y12..Y15 in turn with broadcast activations in Y(8+t).
func floatAVX2(a *asm, k kernel, f floatFormat) {
	floatPrologue(a, k)
	a.f("XORQ BX, BX")
	half := k.name + "_half"
	a.label(half)
	a.f("MOVQ tile+0(FP), SI")
	a.f("ADDQ BX, SI")
	if f.typ == "F32" {
		a.f("ADDQ BX, SI") // 32 bytes in for the second pass
	}
	a.f("MOVQ steps+8(FP), CX")
	a.f("MOVQ x+16(FP), DI")
	for t := 1; t < k.t; t++ {
		a.f("LEAQ (%s)(R9*1), %s", tokRegs[t-1], tokRegs[t])
	}
	for r := range 4 * k.t {
		a.f("VXORPS Y%d, Y%d, Y%d", r, r, r)
	}
	loop := k.name + "_loop"
	a.label(loop)
	for j := range 4 {
		w := y(12 + j%2)
		floatLoad(a, f, j, w)
		for t := range k.t {
			a.f("VBROADCASTSS %d(%s), Y%d", 4*j, tokRegs[t], 8+t)
			a.f("VFMADD231PS Y%d, %s, Y%d", 8+t, w, 4*t+j)
		}
	}
	a.f("ADDQ $%d, SI", 4*f.vb)
	for t := range k.t {
		a.f("ADDQ $16, %s", tokRegs[t])
	}
	a.f("DECQ CX")
	a.f("JNZ %s", loop)
	a.f("LEAQ (R10)(BX*2), AX") // out + 32·pass
	a.f("MOVQ ldo+40(FP), CX")
	for t := range k.t {
		a.f("VADDPS Y%d, Y%d, Y%d", 4*t+1, 4*t, 4*t)
		a.f("VADDPS Y%d, Y%d, Y%d", 4*t+3, 4*t+2, 4*t+2)
		a.f("VADDPS Y%d, Y%d, Y%d", 4*t+2, 4*t, 4*t)
		a.f("VMOVUPS Y%d, (AX)", 4*t)
		if t+1 < k.t {
			a.f("ADDQ CX, AX")
		}
	}
	a.f("ADDQ $16, BX")
	a.f("CMPQ BX, $32")
	a.f("JB %s", half)
	a.f("VZEROUPPER")
	a.f("RET")
	a.raw("\n")
}
