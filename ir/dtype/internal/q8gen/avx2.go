package main

import "fmt"

// The AVX2 bodies: one super-block of 8 rows (a pass of avx2Kernel) for T
// tokens. SI addresses the 64-byte vectors (this pass's 32 bytes at +0), R8
// the f16 arrays (this pass's 8 at +0), R9 the byte-per-row arrays. Y0..Y(T-1)
// are the float accumulators. vpmaddubsw multiplies unsigned by signed bytes
// and adds pairs into int16, saturating: unsigned codes of at most 4 bits can
// add eight vectors' pairs in int16 (8 · 2 · 15 · 127 < 2¹⁵); wider codes
// go to int32 at once by vpmaddwd with ones. Signed codes (Q8_0, the IQ4
// codebook) take their absolute value, and the activations their sign (the
// sign trick: |w| · sign(w)·x), so every pair stays below 2 · 128 · 127.

func y(i int) string { return fmt.Sprintf("Y%d", i) }

// ymask sets ymm register r to b in every byte (AX scratch: the AVX2
// kernels have at most 3 tokens, so AX is free).
func ymask(a *asm, r int, b byte) { ybroadcast(a, r, uint32(b)*0x01010101) }

// yones sets ymm register r to int16 ones (vpmaddwd's pair sums).
func yones(a *asm, r int) { ybroadcast(a, r, 0x00010001) }

// ybroadcast sets ymm register r to v in every dword (AX scratch).
func ybroadcast(a *asm, r int, v uint32) {
	a.f("MOVL $0x%08x, AX", v)
	a.f("VMOVD AX, X%d", r)
	a.f("VPBROADCASTD X%d, Y%d", r, r)
}

// foldAVX2 converts sums si and adds si·(ws·D) to token t's accumulator;
// tmp is scratch.
func foldAVX2(a *asm, t int, si, ws, tmp string, group int) {
	a.f("VCVTDQ2PS %s, %s", si, si)
	a.f("VBROADCASTSS %s, %s", grp(t, group, actD), tmp)
	a.f("VMULPS %s, %s, %s", tmp, ws, tmp)
	a.f("VFMADD231PS %s, %s, %s", tmp, si, y(t))
}

// signedDot adds to int32 sums acc the products of signed codes w (with
// |w| in aw) with token t's four bytes at element e broadcast: bx and p
// scratch, ones int16 ones.
func signedDot(a *asm, t, e int, w, aw, acc, bx, p, ones string) {
	a.f("VPBROADCASTD %s, %s", xq(t, e), bx)
	a.f("VPSIGNB %s, %s, %s", w, bx, bx)
	a.f("VPMADDUBSW %s, %s, %s", bx, aw, p)
	a.f("VPMADDWD %s, %s, %s", ones, p, p)
	a.f("VPADDD %s, %s, %s", p, acc, acc)
}

// avx2Q8_0: Y3+t sums, Y6 scales, Y7 codes (signed), Y8 |codes|, Y9 0x80,
// Y10 ones, Y11 broadcast codes, Y12 products, Y13 product scale.
var avx2Q8_0 = body{setup: func(a *asm) {
	ymask(a, 9, 0x80)
	yones(a, 10)
}, step: func(a *asm, T int) {
	a.f("VCVTPH2PS (R8), Y6")
	for t := range T {
		a.f("VPXOR %s, %s, %s", y(3+t), y(3+t), y(3+t))
	}
	for s := range 8 {
		a.f("VMOVDQU %d(SI), Y7", 32+64*s)
		a.f("VPXOR Y9, Y7, Y7")
		a.f("VPABSB Y7, Y8")
		for t := range T {
			signedDot(a, t, 4*s, "Y7", "Y8", y(3+t), "Y11", "Y12", "Y10")
		}
	}
	for t := range T {
		foldAVX2(a, t, y(3+t), "Y6", "Y13", 0)
	}
}}

// avx2Q4 (Q4_0, IQ4_NL): Y3+t sums, Y6 scales, Y7 code bytes, Y8/Y9
// low/high codes, Y10 ones, Y11 0x0F, Y12 broadcast codes, Y13 products,
// Y14 the signed codebook (IQ4_NL), Y15 |codes| (IQ4_NL). Q4_0 adds its
// block's int16 pairs and widens once, then adds −8·Σq.
func avx2Q4(iq bool) body {
	setup := func(a *asm) {
		yones(a, 10)
		ymask(a, 11, 0x0f)
		if iq {
			a.f("VBROADCASTI128 iq4s8<>(SB), Y14")
		}
	}
	return body{setup: setup, step: func(a *asm, T int) {
		a.f("VCVTPH2PS (R8), Y6")
		for t := range T {
			a.f("VPXOR %s, %s, %s", y(3+t), y(3+t), y(3+t))
		}
		for v := range 4 {
			a.f("VMOVDQU %d(SI), Y7", 32+64*v)
			a.f("VPAND Y11, Y7, Y8")
			a.f("VPSRLW $4, Y7, Y9")
			a.f("VPAND Y11, Y9, Y9")
			if !iq {
				for t := range T {
					for k, w := range []string{"Y8", "Y9"} {
						a.f("VPBROADCASTD %s, Y12", xq(t, 16*k+4*v))
						a.f("VPMADDUBSW Y12, %s, Y13", w)
						a.f("VPADDW Y13, %s, %s", y(3+t), y(3+t))
					}
				}
				continue
			}
			a.f("VPSHUFB Y8, Y14, Y8")
			a.f("VPSHUFB Y9, Y14, Y9")
			a.f("VPABSB Y8, Y15")
			a.f("VPABSB Y9, Y7")
			for t := range T {
				signedDot(a, t, 4*v, "Y8", "Y15", y(3+t), "Y12", "Y13", "Y10")
				signedDot(a, t, 16+4*v, "Y9", "Y7", y(3+t), "Y12", "Y13", "Y10")
			}
		}
		for t := range T {
			if !iq {
				a.f("VPMADDWD Y10, %s, %s", y(3+t), y(3+t))
				a.f("VPBROADCASTD %s, Y12", grp(t, 0, actN8))
				a.f("VPADDD Y12, %s, %s", y(3+t), y(3+t))
			}
			foldAVX2(a, t, y(3+t), "Y6", "Y13", 0)
		}
	}}
}

// avx2K (Q4_K, Q5_K), at most 2 tokens: Y2+t and Y4+t the sums of a chunk's
// two groups (int16 for Q4_K until the chunk ends, int32 for Q5_K), Y6
// 0x0F, Y7 ones, Y8 code bytes, Y9/Y10 low/high codes, Y11 broadcast codes,
// Y12 products, Y13 high bits (Q5_K), Y14 0x10 (Q5_K), Y15 scratch.
func avx2K(q5 bool) body {
	codes := 320
	if q5 {
		codes = 832
	}
	setup := func(a *asm) {
		ymask(a, 6, 0x0f)
		yones(a, 7)
		if q5 {
			ymask(a, 14, 0x10)
		}
	}
	return body{setup: setup, step: func(a *asm, T int) {
		for c := range 4 {
			for t := range T {
				a.f("VPXOR %s, %s, %s", y(2+t), y(2+t), y(2+t))
				a.f("VPXOR %s, %s, %s", y(4+t), y(4+t), y(4+t))
			}
			for s := range 8 {
				a.f("VMOVDQU %d(SI), Y8", codes+512*c+64*s)
				a.f("VPAND Y6, Y8, Y9")
				a.f("VPSRLW $4, Y8, Y10")
				a.f("VPAND Y6, Y10, Y10")
				if q5 {
					a.f("VMOVDQU %d(SI), Y13", 320+64*s)
					for k, r := range []string{"Y9", "Y10"} {
						shiftTo4(a, "VMOVDQA", "Y13", "Y15", 2*c+k)
						a.f("VPAND Y14, Y15, Y15")
						a.f("VPOR Y15, %s, %s", r, r)
					}
				}
				for t := range T {
					for k, w := range []string{"Y9", "Y10"} {
						acc := y(2 + 2*k + t)
						a.f("VPBROADCASTD %s, Y11", xq(t, 64*c+32*k+4*s))
						a.f("VPMADDUBSW Y11, %s, Y12", w)
						if q5 {
							a.f("VPMADDWD Y7, Y12, Y12")
							a.f("VPADDD Y12, %s, %s", acc, acc)
						} else {
							a.f("VPADDW Y12, %s, %s", acc, acc)
						}
					}
				}
			}
			for t := range T {
				for k := range 2 {
					g := 2*c + k
					acc := y(2 + 2*k + t)
					if !q5 {
						a.f("VPMADDWD Y7, %s, %s", acc, acc)
					}
					// ws = d·sc into Y15, then acc += P·(ws·D)
					a.f("VPMOVZXBD %d(R9), Y15", 64+16*g)
					a.f("VCVTDQ2PS Y15, Y15")
					a.f("VCVTPH2PS (R8), Y12")
					a.f("VMULPS Y12, Y15, Y15")
					foldAVX2(a, t, acc, "Y15", "Y12", g)
					// wm = dmin·m, then acc −= wm·SD
					a.f("VPMOVZXBD %d(R9), Y15", 192+16*g)
					a.f("VCVTDQ2PS Y15, Y15")
					a.f("VCVTPH2PS 32(R8), Y12")
					a.f("VMULPS Y12, Y15, Y15")
					a.f("VBROADCASTSS %s, Y12", grp(t, g, actSD))
					a.f("VFNMADD231PS Y12, Y15, %s", y(t))
				}
			}
		}
	}}
}

// avx2Q6K, at most 2 tokens, the four groups of a half in two passes of
// two: Y2+2k+t the sums of the pass's group k, Y6 0x0F, Y7 0x30, Y8 ones,
// Y9 low-bit bytes, Y10 high bits, Y11 codes, Y12 broadcast codes, Y13
// products, Y14/Y15 scratch.
var avx2Q6K = body{setup: func(a *asm) {
	ymask(a, 6, 0x0f)
	ymask(a, 7, 0x30)
	yones(a, 8)
}, step: func(a *asm, T int) {
	for h := range 2 {
		for u := range 2 {
			for pass := range 2 {
				for k := range 2 {
					g := 2*pass + k
					for t := range T {
						a.f("VPBROADCASTD %s, %s", grp(t, 4*h+g, actN32+4*u), y(2+2*k+t))
					}
				}
				for s := 4 * u; s < 4*u+4; s++ {
					a.f("VMOVDQU %d(SI), Y10", 2336+512*h+64*s)
					for k := range 2 {
						g := 2*pass + k
						a.f("VMOVDQU %d(SI), Y9", 288+1024*h+512*(g&1)+64*s)
						if g >= 2 {
							a.f("VPSRLW $4, Y9, Y9")
						}
						a.f("VPAND Y6, Y9, Y11")
						// bits 2g..2g+1 of the high-bit byte to bits 4-5
						shiftTo4(a, "VMOVDQA", "Y10", "Y14", 2*g)
						a.f("VPAND Y7, Y14, Y14")
						a.f("VPOR Y14, Y11, Y11")
						for t := range T {
							acc := y(2 + 2*k + t)
							a.f("VPBROADCASTD %s, Y12", xq(t, 128*h+32*g+4*s))
							a.f("VPMADDUBSW Y12, Y11, Y13")
							a.f("VPMADDWD Y8, Y13, Y13")
							a.f("VPADDD Y13, %s, %s", acc, acc)
						}
					}
				}
				for k := range 2 {
					g := 2*pass + k
					a.f("VPMOVSXBD %d(R9), Y15", 32+16*(8*h+2*g+u))
					a.f("VCVTDQ2PS Y15, Y15")
					a.f("VCVTPH2PS (R8), Y14")
					a.f("VMULPS Y14, Y15, Y15")
					for t := range T {
						foldAVX2(a, t, y(2+2*k+t), "Y15", "Y14", 4*h+g)
					}
				}
			}
		}
	}
}}

// avx2IQ4XS: Y3+t sums, Y6 d·ls, Y7 code bytes then |high codes|, Y8/Y9
// low/high codes, Y10 ones, Y11 0x0F, Y12 broadcast codes, Y13 products,
// Y14 the signed codebook, Y15 |low codes|.
var avx2IQ4XS = body{setup: func(a *asm) {
	yones(a, 10)
	ymask(a, 11, 0x0f)
	a.f("VBROADCASTI128 iq4s8<>(SB), Y14")
}, step: func(a *asm, T int) {
	for g := range 8 {
		for t := range T {
			a.f("VPXOR %s, %s, %s", y(3+t), y(3+t), y(3+t))
		}
		for v := range 4 {
			a.f("VMOVDQU %d(SI), Y7", 160+256*g+64*v)
			a.f("VPAND Y11, Y7, Y8")
			a.f("VPSRLW $4, Y7, Y9")
			a.f("VPAND Y11, Y9, Y9")
			a.f("VPSHUFB Y8, Y14, Y8")
			a.f("VPSHUFB Y9, Y14, Y9")
			a.f("VPABSB Y8, Y15")
			a.f("VPABSB Y9, Y7")
			for t := range T {
				signedDot(a, t, 32*g+4*v, "Y8", "Y15", y(3+t), "Y12", "Y13", "Y10")
				signedDot(a, t, 32*g+16+4*v, "Y9", "Y7", y(3+t), "Y12", "Y13", "Y10")
			}
		}
		a.f("VPMOVSXBD %d(R9), Y6", 32+16*g)
		a.f("VCVTDQ2PS Y6, Y6")
		a.f("VCVTPH2PS (R8), Y13")
		a.f("VMULPS Y13, Y6, Y6")
		for t := range T {
			foldAVX2(a, t, y(3+t), "Y6", "Y13", g)
		}
	}
}}
