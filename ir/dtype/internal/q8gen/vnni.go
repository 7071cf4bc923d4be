package main

import "fmt"

// The AVX-512 VNNI bodies: one super-block of 16 rows for T tokens. Z0..Z(T-1)
// are the tokens' float accumulators; each body documents its registers.

// formats lists the packed types with their bodies, in table order.
var formats = []format16{
	{typ: "Q8_0", sb: 32, sbBytes: 544, vnniMaxT: 8, avx2MaxT: 3, vnniBody: body{step: vnniQ8_0}, avx2Body: avx2Q8_0},
	{typ: "Q4_0", sb: 32, sbBytes: 288, vnniMaxT: 8, avx2MaxT: 3, vnniBody: vnniQ4(false), avx2Body: avx2Q4(false)},
	{typ: "IQ4_NL", sb: 32, sbBytes: 288, vnniMaxT: 8, avx2MaxT: 3, vnniBody: vnniQ4(true), avx2Body: avx2Q4(true)},
	{typ: "Q4_K", sb: 256, sbBytes: 2368, vnniMaxT: 6, avx2MaxT: 2, vnniBody: vnniK(false), avx2Body: avx2K(false)},
	{typ: "Q5_K", sb: 256, sbBytes: 2880, vnniMaxT: 6, avx2MaxT: 2, vnniBody: vnniK(true), avx2Body: avx2K(true)},
	{typ: "Q6_K", sb: 256, sbBytes: 3360, vnniMaxT: 4, avx2MaxT: 2, vnniBody: vnniQ6K, avx2Body: avx2Q6K},
	{typ: "IQ4_XS", sb: 256, sbBytes: 2208, vnniMaxT: 8, avx2MaxT: 3, vnniBody: vnniIQ4XS, avx2Body: avx2IQ4XS},
}

func z(i int) string { return fmt.Sprintf("Z%d", i) }

// mask sets zmm register r to b in every byte (R9 scratch: the stride is
// no longer needed once the token pointers are set).
func mask(as *asm, r string, b byte) {
	as.f("MOVL $0x%02x%02x%02x%02x, R9", b, b, b, b)
	as.f("VPBROADCASTD R9, %s", r)
}

// foldVNNI converts token t's int32 sums si, multiplies the row scales ws by
// the group's activation scale and adds the product to the float sum:
// acc = fma(P, ws·D, acc).
func foldVNNI(as *asm, t int, si, ws, tmp string, group int) {
	as.f("VCVTDQ2PS %s, %s", si, si)
	as.f("VMULPS.BCST %s, %s, %s", grp(t, group, actD), ws, tmp)
	as.f("VFMADD231PS %s, %s, %s", tmp, si, z(t))
}

// chains is how many independent sums a token keeps per group: with few
// tokens a chain of dependent vpdpbusd (5 cycles each) would bound the
// kernel, so the slabs of a group are spread over several sums, added
// (exactly, in int32) when the group ends.
func chains(T, most int) int {
	switch {
	case T == 1:
		return min(4, most)
	case T == 2:
		return min(2, most)
	}
	return 1
}

// accs allocates int32 sums: reg(t, g, c) for token t, group g (of
// groups), chain c, from register first up.
type accs struct{ first, T, groups, chains int }

func (a accs) reg(t, g, c int) string { return z(a.first + (t*a.groups+g)*a.chains + c) }
func (a accs) end() int               { return a.first + a.T*a.groups*a.chains }

// start sets chain 0 of every token's sums of group g to its correction
// (field off of activation group ag, or zero when off < 0) and the other
// chains to zero.
func (a accs) start(as *asm, g, ag, off int) {
	for t := range a.T {
		for c := range a.chains {
			r := a.reg(t, g, c)
			if c == 0 && off >= 0 {
				as.f("VPBROADCASTD %s, %s", grp(t, ag, off), r)
			} else {
				as.f("VPXORD %s, %s, %s", r, r, r)
			}
		}
	}
}

// reduce adds the chains of token t's sums of group g into chain 0.
func (a accs) reduce(as *asm, t, g int) {
	for c := 1; c < a.chains; c++ {
		as.f("VPADDD %s, %s, %s", a.reg(t, g, c), a.reg(t, g, 0), a.reg(t, g, 0))
	}
}

// vnniQ8_0: sums from Z8 (tokens × chains), Z28 scales, Z29/Z30 codes, Z31
// product scale. The codes are stored plus 128; the sums start at −128·Σq.
func vnniQ8_0(as *asm, T int) {
	a := accs{first: 8, T: T, groups: 1, chains: chains(T, 4)}
	as.f("VCVTPH2PS (SI), Z28")
	a.start(as, 0, 0, actN128)
	for s := range 8 {
		w := z(29 + s%2)
		as.f("VMOVDQU32 %d(SI), %s", 32+64*s, w)
		for t := range T {
			as.f("VPDPBUSD.BCST %s, %s, %s", xq(t, 4*s), w, a.reg(t, 0, s%a.chains))
		}
	}
	for t := range T {
		a.reduce(as, t, 0)
		foldVNNI(as, t, a.reg(t, 0, 0), "Z28", "Z31", 0)
	}
}

// vnniQ4 (Q4_0, IQ4_NL): sums from Z8, Z25 scales, Z26 code bytes, Z27/Z28
// low/high nibbles, Z29 0x0F, Z30 the codebook (IQ4_NL), Z31 product scale.
// Q4_0 sums start at −8·Σq, IQ4_NL's (codebook plus 128) at −128·Σq.
func vnniQ4(iq bool) body {
	setup := func(as *asm) {
		mask(as, "Z29", 0x0f)
		if iq {
			as.f("VBROADCASTI32X4 iq4u8<>(SB), Z30")
		}
	}
	return body{setup: setup, step: func(as *asm, T int) {
		a := accs{first: 8, T: T, groups: 1, chains: chains(T, 4)}
		as.f("VCVTPH2PS (SI), Z25")
		init := actN8
		if iq {
			init = actN128
		}
		a.start(as, 0, 0, init)
		for v := range 4 {
			as.f("VMOVDQU32 %d(SI), Z26", 32+64*v)
			as.f("VPANDD Z29, Z26, Z27")
			as.f("VPSRLW $4, Z26, Z28")
			as.f("VPANDD Z29, Z28, Z28")
			if iq {
				as.f("VPSHUFB Z27, Z30, Z27")
				as.f("VPSHUFB Z28, Z30, Z28")
			}
			for t := range T {
				as.f("VPDPBUSD.BCST %s, Z27, %s", xq(t, 4*v), a.reg(t, 0, (2*v)%a.chains))
				as.f("VPDPBUSD.BCST %s, Z28, %s", xq(t, 16+4*v), a.reg(t, 0, (2*v+1)%a.chains))
			}
		}
		for t := range T {
			a.reduce(as, t, 0)
			foldVNNI(as, t, a.reg(t, 0, 0), "Z25", "Z31", 0)
		}
	}}
}

// vnniK (Q4_K, Q5_K), at most 6 tokens: sums from Z6 (tokens × the chunk's
// two groups × chains), Z18 d, Z19 dmin, Z20/Z21 the groups' d·sc, Z22/Z23
// dmin·m, Z24 0x0F, Z25 code bytes, Z26/Z27 low/high codes, Z28 high bits
// (Q5_K), Z29 0x10 (Q5_K), Z30 scratch, Z31 product scale.
func vnniK(q5 bool) body {
	codes := 320
	if q5 {
		codes = 832
	}
	setup := func(as *asm) {
		mask(as, "Z24", 0x0f)
		if q5 {
			mask(as, "Z29", 0x10)
		}
	}
	return body{setup: setup, step: func(as *asm, T int) {
		a := accs{first: T, T: T, groups: 2, chains: chains(T, 4)}
		for a.end() > 18 {
			a.chains--
		}
		as.f("VCVTPH2PS (SI), Z18")
		as.f("VCVTPH2PS 32(SI), Z19")
		for c := range 4 {
			for k := range 2 {
				g := 2*c + k
				ws, wm := z(20+k), z(22+k)
				as.f("VPMOVZXBD %d(SI), %s", 64+16*g, ws)
				as.f("VCVTDQ2PS %s, %s", ws, ws)
				as.f("VMULPS Z18, %s, %s", ws, ws)
				as.f("VPMOVZXBD %d(SI), %s", 192+16*g, wm)
				as.f("VCVTDQ2PS %s, %s", wm, wm)
				as.f("VMULPS Z19, %s, %s", wm, wm)
			}
			a.start(as, 0, 0, -1)
			a.start(as, 1, 0, -1)
			for s := range 8 {
				as.f("VMOVDQU32 %d(SI), Z25", codes+512*c+64*s)
				as.f("VPANDD Z24, Z25, Z26")
				as.f("VPSRLW $4, Z25, Z27")
				as.f("VPANDD Z24, Z27, Z27")
				if q5 {
					as.f("VMOVDQU32 %d(SI), Z28", 320+64*s)
					// bit 2c to bit 4 for the low codes, 2c+1 for the high
					shiftTo4(as, "VMOVDQA64", "Z28", "Z30", 2*c)
					as.f("VPTERNLOGD $0x%02x, Z29, Z30, Z26", orAnd)
					shiftTo4(as, "VMOVDQA64", "Z28", "Z30", 2*c+1)
					as.f("VPTERNLOGD $0x%02x, Z29, Z30, Z27", orAnd)
				}
				for t := range T {
					as.f("VPDPBUSD.BCST %s, Z26, %s", xq(t, 64*c+4*s), a.reg(t, 0, s%a.chains))
					as.f("VPDPBUSD.BCST %s, Z27, %s", xq(t, 64*c+32+4*s), a.reg(t, 1, s%a.chains))
				}
			}
			for t := range T {
				for k := range 2 {
					a.reduce(as, t, k)
					foldVNNI(as, t, a.reg(t, k, 0), z(20+k), "Z31", 2*c+k)
					as.f("VFNMADD231PS.BCST %s, %s, %s", grp(t, 2*c+k, actSD), z(22+k), z(t))
				}
			}
		}
	}}
}

// shiftTo4 sets dst to src shifted (as words) so that bit b of each byte
// lands at bit 4; mov copies a register of the kernel's width (VMOVDQA64
// for zmm, VMOVDQA for ymm) where no shift is needed.
func shiftTo4(as *asm, mov, src, dst string, b int) {
	switch {
	case b < 4:
		as.f("VPSLLW $%d, %s, %s", 4-b, src, dst)
	case b > 4:
		as.f("VPSRLW $%d, %s, %s", b-4, src, dst)
	default:
		as.f("%s %s, %s", mov, src, dst)
	}
}

// vnniQ6K, at most 4 tokens: sums from Z4 (tokens × the half's four groups
// × chains), Z20 d, Z21 0x0F, Z22 0x30, Z23/Z24 low-bit vectors a=0/1, Z25
// high bits, Z26..Z29 the four groups' codes, Z30/Z31 scratch. The sums
// start at −32·Σq of their 16 elements.
var vnniQ6K = body{setup: func(as *asm) {
	mask(as, "Z21", 0x0f)
	mask(as, "Z22", 0x30)
}, step: vnniQ6KStep}

func vnniQ6KStep(as *asm, T int) {
	a := accs{first: T, T: T, groups: 4, chains: chains(T, 4)}
	for a.end() > 20 {
		a.chains--
	}
	as.f("VCVTPH2PS (SI), Z20")
	for h := range 2 {
		for u := range 2 {
			for g := range 4 {
				a.start(as, g, 4*h+g, actN32+4*u)
			}
			for s := 4 * u; s < 4*u+4; s++ {
				as.f("VMOVDQU32 %d(SI), Z23", 288+1024*h+64*s)
				as.f("VMOVDQU32 %d(SI), Z24", 288+1024*h+512+64*s)
				as.f("VMOVDQU32 %d(SI), Z25", 2336+512*h+64*s)
				// group 0: low nibbles of a=0, bits 0-1
				as.f("VPSLLW $4, Z25, Z26")
				as.f("VPANDD Z22, Z26, Z26")
				as.f("VPTERNLOGD $0x%02x, Z23, Z21, Z26", orAnd)
				// group 1: low nibbles of a=1, bits 2-3
				as.f("VPSLLW $2, Z25, Z27")
				as.f("VPANDD Z22, Z27, Z27")
				as.f("VPTERNLOGD $0x%02x, Z24, Z21, Z27", orAnd)
				// group 2: high nibbles of a=0, bits 4-5
				as.f("VPANDD Z22, Z25, Z28")
				as.f("VPSRLW $4, Z23, Z30")
				as.f("VPTERNLOGD $0x%02x, Z30, Z21, Z28", orAnd)
				// group 3: high nibbles of a=1, bits 6-7
				as.f("VPSRLW $2, Z25, Z29")
				as.f("VPANDD Z22, Z29, Z29")
				as.f("VPSRLW $4, Z24, Z31")
				as.f("VPTERNLOGD $0x%02x, Z31, Z21, Z29", orAnd)
				for g := range 4 {
					for t := range T {
						as.f("VPDPBUSD.BCST %s, %s, %s", xq(t, 128*h+32*g+4*s), z(26+g), a.reg(t, g, s%a.chains))
					}
				}
			}
			for g := range 4 {
				as.f("VPMOVSXBD %d(SI), Z30", 32+16*(8*h+2*g+u))
				as.f("VCVTDQ2PS Z30, Z30")
				as.f("VMULPS Z20, Z30, Z30")
				for t := range T {
					a.reduce(as, t, g)
					foldVNNI(as, t, a.reg(t, g, 0), "Z30", "Z31", 4*h+g)
				}
			}
		}
	}
}

// vnniIQ4XS: sums from Z8, Z24 d, Z25 d·ls, Z26 code bytes, Z27/Z28 codes,
// Z29 0x0F, Z30 the codebook plus 128, Z31 product scale. The sums start
// at −128·Σq.
var vnniIQ4XS = body{setup: func(as *asm) {
	mask(as, "Z29", 0x0f)
	as.f("VBROADCASTI32X4 iq4u8<>(SB), Z30")
}, step: vnniIQ4XSStep}

func vnniIQ4XSStep(as *asm, T int) {
	a := accs{first: 8, T: T, groups: 1, chains: chains(T, 4)}
	as.f("VCVTPH2PS (SI), Z24")
	for g := range 8 {
		a.start(as, 0, g, actN128)
		for v := range 4 {
			as.f("VMOVDQU32 %d(SI), Z26", 160+256*g+64*v)
			as.f("VPANDD Z29, Z26, Z27")
			as.f("VPSRLW $4, Z26, Z28")
			as.f("VPANDD Z29, Z28, Z28")
			as.f("VPSHUFB Z27, Z30, Z27")
			as.f("VPSHUFB Z28, Z30, Z28")
			for t := range T {
				as.f("VPDPBUSD.BCST %s, Z27, %s", xq(t, 32*g+4*v), a.reg(t, 0, (2*v)%a.chains))
				as.f("VPDPBUSD.BCST %s, Z28, %s", xq(t, 32*g+16+4*v), a.reg(t, 0, (2*v+1)%a.chains))
			}
		}
		as.f("VPMOVSXBD %d(SI), Z25", 32+16*g)
		as.f("VCVTDQ2PS Z25, Z25")
		as.f("VMULPS Z24, Z25, Z25")
		for t := range T {
			a.reduce(as, t, 0)
			foldVNNI(as, t, a.reg(t, 0, 0), "Z25", "Z31", g)
		}
	}
}
