//go:build amd64 && !purego

#include "textflag.h"

// The int8 configuration's attention and SwiGLU kernels (fastattn.go has
// their portable definitions): sixteen queries a vector, one per lane, in a
// zmm (AVX-512) or two ymm halves (AVX2).

// func attnScoresAVX512(qT *float32, k *float32, stride int, n int, d int, s *float32)
// s[16j + l] = Σ_d qT[16d + l]·k[j·stride + d], four keys at a time (four
// independent chains of fused multiply-adds), then one at a time. stride is
// in bytes.
TEXT ·attnScoresAVX512(SB), NOSPLIT, $0-48
	MOVQ qT+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ d+32(FP), R9
	MOVQ s+40(FP), R10
	CMPQ CX, $4
	JB   one

four:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ DI, BX
	LEAQ (DI)(R8*1), R11
	LEAQ (R11)(R8*1), R12
	LEAQ (R12)(R8*1), R13
	MOVQ SI, AX
	XORQ DX, DX

fourd:
	VMOVUPS (AX), Z4
	VFMADD231PS.BCST (BX)(DX*1), Z4, Z0
	VFMADD231PS.BCST (R11)(DX*1), Z4, Z1
	VFMADD231PS.BCST (R12)(DX*1), Z4, Z2
	VFMADD231PS.BCST (R13)(DX*1), Z4, Z3
	ADDQ $64, AX
	ADDQ $4, DX
	MOVQ DX, R14
	SHRQ $2, R14
	CMPQ R14, R9
	JB   fourd
	VMOVUPS Z0, (R10)
	VMOVUPS Z1, 64(R10)
	VMOVUPS Z2, 128(R10)
	VMOVUPS Z3, 192(R10)
	ADDQ $256, R10
	LEAQ (R13)(R8*1), DI
	SUBQ $4, CX
	CMPQ CX, $4
	JAE  four

one:
	TESTQ CX, CX
	JZ    done
	VPXORD Z0, Z0, Z0
	MOVQ SI, AX
	XORQ DX, DX

oned:
	VMOVUPS (AX), Z4
	VFMADD231PS.BCST (DI)(DX*1), Z4, Z0
	ADDQ $64, AX
	ADDQ $4, DX
	MOVQ DX, R14
	SHRQ $2, R14
	CMPQ R14, R9
	JB   oned
	VMOVUPS Z0, (R10)
	ADDQ $64, R10
	ADDQ R8, DI
	DECQ CX
	JMP  one

done:
	VZEROUPPER
	RET

// func attnSoftmaxAVX512(s *float32, n int, sum *float32)
// Each lane's largest score m, then s ← exp32(s − m) and sum ← Σ s, in key
// order.
TEXT ·attnSoftmaxAVX512(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ sum+16(FP), R10
	MOVL $0xff800000, AX // −∞
	VPBROADCASTD AX, Z0
	MOVQ SI, DI
	MOVQ CX, DX

max512:
	VMAXPS (DI), Z0, Z0
	ADDQ $64, DI
	DECQ DX
	JNZ  max512
	MOVL $0xc2ae999a, AX // −87.3
	VPBROADCASTD AX, Z20
	MOVL $0x3fb8aa3b, AX // log₂e
	VPBROADCASTD AX, Z21
	MOVL $0xbf318000, AX // −ln2 (high part)
	VPBROADCASTD AX, Z22
	MOVL $0x395e8083, AX // −ln2 (low part)
	VPBROADCASTD AX, Z23
	MOVL $0x3ab60b61, AX // 1/720
	VPBROADCASTD AX, Z24
	MOVL $0x3c088889, AX // 1/120
	VPBROADCASTD AX, Z25
	MOVL $0x3d2aaaab, AX // 1/24
	VPBROADCASTD AX, Z26
	MOVL $0x3e2aaaab, AX // 1/6
	VPBROADCASTD AX, Z27
	MOVL $0x3f000000, AX // 1/2
	VPBROADCASTD AX, Z28
	MOVL $0x3f800000, AX // 1
	VPBROADCASTD AX, Z29
	MOVL $127, AX
	VPBROADCASTD AX, Z30
	VPXORD Z1, Z1, Z1 // sums

exp512:
	VMOVUPS (SI), Z2
	VSUBPS Z0, Z2, Z2 // x = s − m
	VCMPPS $0x1e, Z20, Z2, K1   // x > −87.3, else 0
	VMULPS Z21, Z2, Z3
	VRNDSCALEPS $8, Z3, Z3       // n: nearest, ties to even
	VFMADD231PS Z22, Z3, Z2     // r = n·(−ln2 hi) + x
	VFMADD231PS Z23, Z3, Z2     // r = n·(−ln2 lo) + r
	VMOVAPS Z24, Z4
	VFMADD213PS Z25, Z2, Z4  // p = p·r + c5
	VFMADD213PS Z26, Z2, Z4
	VFMADD213PS Z27, Z2, Z4
	VFMADD213PS Z28, Z2, Z4
	VFMADD213PS Z29, Z2, Z4
	VFMADD213PS Z29, Z2, Z4
	VCVTPS2DQ Z3, Z5
	VPADDD Z30, Z5, Z5
	VPSLLD $23, Z5, Z5           // 2ⁿ
	VMULPS.Z Z5, Z4, K1, Z4
	VMOVUPS Z4, (SI)
	VADDPS Z4, Z1, Z1
	ADDQ $64, SI
	DECQ CX
	JNZ  exp512
	VMOVUPS Z1, (R10)
	VZEROUPPER
	RET

// func attnWeightedAVX512(p *float32, v *float32, stride int, n int, d int, accT *float32)
// accT[16d + l] += Σ_j p[16j + l]·v[j·stride + d], sixteen d at a time in
// registers, the keys in order. d is a multiple of 16; stride in bytes.
TEXT ·attnWeightedAVX512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ d+32(FP), R9
	MOVQ accT+40(FP), R10
	XORQ DX, DX // d offset in bytes of a value row

chunk:
	VMOVUPS (R10), Z0
	VMOVUPS 64(R10), Z1
	VMOVUPS 128(R10), Z2
	VMOVUPS 192(R10), Z3
	VMOVUPS 256(R10), Z4
	VMOVUPS 320(R10), Z5
	VMOVUPS 384(R10), Z6
	VMOVUPS 448(R10), Z7
	VMOVUPS 512(R10), Z8
	VMOVUPS 576(R10), Z9
	VMOVUPS 640(R10), Z10
	VMOVUPS 704(R10), Z11
	VMOVUPS 768(R10), Z12
	VMOVUPS 832(R10), Z13
	VMOVUPS 896(R10), Z14
	VMOVUPS 960(R10), Z15
	MOVQ SI, AX
	LEAQ (DI)(DX*1), BX
	MOVQ CX, R11

key:
	VMOVUPS (AX), Z16
	VFMADD231PS.BCST (BX), Z16, Z0
	VFMADD231PS.BCST 4(BX), Z16, Z1
	VFMADD231PS.BCST 8(BX), Z16, Z2
	VFMADD231PS.BCST 12(BX), Z16, Z3
	VFMADD231PS.BCST 16(BX), Z16, Z4
	VFMADD231PS.BCST 20(BX), Z16, Z5
	VFMADD231PS.BCST 24(BX), Z16, Z6
	VFMADD231PS.BCST 28(BX), Z16, Z7
	VFMADD231PS.BCST 32(BX), Z16, Z8
	VFMADD231PS.BCST 36(BX), Z16, Z9
	VFMADD231PS.BCST 40(BX), Z16, Z10
	VFMADD231PS.BCST 44(BX), Z16, Z11
	VFMADD231PS.BCST 48(BX), Z16, Z12
	VFMADD231PS.BCST 52(BX), Z16, Z13
	VFMADD231PS.BCST 56(BX), Z16, Z14
	VFMADD231PS.BCST 60(BX), Z16, Z15
	ADDQ $64, AX
	ADDQ R8, BX
	DECQ R11
	JNZ  key
	VMOVUPS Z0, (R10)
	VMOVUPS Z1, 64(R10)
	VMOVUPS Z2, 128(R10)
	VMOVUPS Z3, 192(R10)
	VMOVUPS Z4, 256(R10)
	VMOVUPS Z5, 320(R10)
	VMOVUPS Z6, 384(R10)
	VMOVUPS Z7, 448(R10)
	VMOVUPS Z8, 512(R10)
	VMOVUPS Z9, 576(R10)
	VMOVUPS Z10, 640(R10)
	VMOVUPS Z11, 704(R10)
	VMOVUPS Z12, 768(R10)
	VMOVUPS Z13, 832(R10)
	VMOVUPS Z14, 896(R10)
	VMOVUPS Z15, 960(R10)
	ADDQ $1024, R10
	ADDQ $64, DX
	SUBQ $16, R9
	JNZ  chunk
	VZEROUPPER
	RET

// func swigluAVX512(gate *float32, up *float32, y *float32, n int)
// y = silu(g)·u as swigluRef, sixteen at a time (n a multiple of 16).
TEXT ·swigluAVX512(SB), NOSPLIT, $0-32
	MOVQ gate+0(FP), SI
	MOVQ up+8(FP), DI
	MOVQ y+16(FP), R10
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	MOVL $0xc2ae999a, AX // −87.3
	VPBROADCASTD AX, Z20
	MOVL $0x3fb8aa3b, AX // log₂e
	VPBROADCASTD AX, Z21
	MOVL $0xbf318000, AX // −ln2 (high part)
	VPBROADCASTD AX, Z22
	MOVL $0x395e8083, AX // −ln2 (low part)
	VPBROADCASTD AX, Z23
	MOVL $0x3ab60b61, AX // 1/720
	VPBROADCASTD AX, Z24
	MOVL $0x3c088889, AX // 1/120
	VPBROADCASTD AX, Z25
	MOVL $0x3d2aaaab, AX // 1/24
	VPBROADCASTD AX, Z26
	MOVL $0x3e2aaaab, AX // 1/6
	VPBROADCASTD AX, Z27
	MOVL $0x3f000000, AX // 1/2
	VPBROADCASTD AX, Z28
	MOVL $0x3f800000, AX // 1
	VPBROADCASTD AX, Z29
	MOVL $127, AX
	VPBROADCASTD AX, Z30
	MOVL $0x80000000, AX // sign bit
	VPBROADCASTD AX, Z31
	VPXORD Z19, Z19, Z19

swiglu512:
	VMOVUPS (SI), Z0           // g
	VPORD Z31, Z0, Z2          // x = −|g|
	VCMPPS $0x1e, Z20, Z2, K1   // x > −87.3, else 0
	VMULPS Z21, Z2, Z3
	VRNDSCALEPS $8, Z3, Z3       // n: nearest, ties to even
	VFMADD231PS Z22, Z3, Z2     // r = n·(−ln2 hi) + x
	VFMADD231PS Z23, Z3, Z2     // r = n·(−ln2 lo) + r
	VMOVAPS Z24, Z4
	VFMADD213PS Z25, Z2, Z4  // p = p·r + c5
	VFMADD213PS Z26, Z2, Z4
	VFMADD213PS Z27, Z2, Z4
	VFMADD213PS Z28, Z2, Z4
	VFMADD213PS Z29, Z2, Z4
	VFMADD213PS Z29, Z2, Z4
	VCVTPS2DQ Z3, Z5
	VPADDD Z30, Z5, Z5
	VPSLLD $23, Z5, Z5           // 2ⁿ
	VMULPS.Z Z5, Z4, K1, Z4
	VCMPPS $1, Z19, Z0, K2     // g < 0
	VMOVAPS Z29, Z6
	VMOVAPS Z4, K2, Z6         // num: e where g < 0, else 1
	VADDPS Z29, Z4, Z7         // 1 + e
	VDIVPS Z7, Z6, Z6          // σ
	VMULPS Z6, Z0, Z6          // g·σ
	VMULPS (DI), Z6, Z6        // ·u
	VMOVUPS Z6, (R10)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R10
	DECQ CX
	JNZ  swiglu512
	VZEROUPPER
	RET

// func attnScoresAVX2(qT *float32, k *float32, stride int, n int, d int, s *float32)
// attnScoresAVX512 on ymm: each vector of 16 lanes in two halves, four keys
// at a time (eight chains), then one at a time.
TEXT ·attnScoresAVX2(SB), NOSPLIT, $0-48
	MOVQ qT+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ d+32(FP), R9
	MOVQ s+40(FP), R10
	CMPQ CX, $4
	JB   one2

four2:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ DI, BX
	LEAQ (DI)(R8*1), R11
	LEAQ (R11)(R8*1), R12
	LEAQ (R12)(R8*1), R13
	MOVQ SI, AX
	XORQ DX, DX

fourd2:
	VMOVUPS (AX), Y8
	VMOVUPS 32(AX), Y9
	VBROADCASTSS (BX)(DX*1), Y10
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y1
	VBROADCASTSS (R11)(DX*1), Y10
	VFMADD231PS Y10, Y8, Y2
	VFMADD231PS Y10, Y9, Y3
	VBROADCASTSS (R12)(DX*1), Y10
	VFMADD231PS Y10, Y8, Y4
	VFMADD231PS Y10, Y9, Y5
	VBROADCASTSS (R13)(DX*1), Y10
	VFMADD231PS Y10, Y8, Y6
	VFMADD231PS Y10, Y9, Y7
	ADDQ $64, AX
	ADDQ $4, DX
	MOVQ DX, R14
	SHRQ $2, R14
	CMPQ R14, R9
	JB   fourd2
	VMOVUPS Y0, (R10)
	VMOVUPS Y1, 32(R10)
	VMOVUPS Y2, 64(R10)
	VMOVUPS Y3, 96(R10)
	VMOVUPS Y4, 128(R10)
	VMOVUPS Y5, 160(R10)
	VMOVUPS Y6, 192(R10)
	VMOVUPS Y7, 224(R10)
	ADDQ $256, R10
	LEAQ (R13)(R8*1), DI
	SUBQ $4, CX
	CMPQ CX, $4
	JAE  four2

one2:
	TESTQ CX, CX
	JZ    done2
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ SI, AX
	XORQ DX, DX

oned2:
	VBROADCASTSS (DI)(DX*1), Y10
	VFMADD231PS (AX), Y10, Y0
	VFMADD231PS 32(AX), Y10, Y1
	ADDQ $64, AX
	ADDQ $4, DX
	MOVQ DX, R14
	SHRQ $2, R14
	CMPQ R14, R9
	JB   oned2
	VMOVUPS Y0, (R10)
	VMOVUPS Y1, 32(R10)
	ADDQ $64, R10
	ADDQ R8, DI
	DECQ CX
	JMP  one2

done2:
	VZEROUPPER
	RET

// func attnSoftmaxAVX2(s *float32, n int, sum *float32)
// attnSoftmaxAVX512 on ymm, one half of the lanes after the other.
TEXT ·attnSoftmaxAVX2(SB), NOSPLIT, $0-24
	MOVQ sum+16(FP), R10
	XORQ BX, BX // the half's byte offset: 0, then 32

half2:
	MOVQ s+0(FP), SI
	ADDQ BX, SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX // −∞
	VMOVD AX, X0
	VBROADCASTSS X0, Y0
	MOVQ SI, DI
	MOVQ CX, DX

max2:
	VMAXPS (DI), Y0, Y0
	ADDQ $64, DI
	DECQ DX
	JNZ  max2
	VXORPS Y1, Y1, Y1

exp2:
	VMOVUPS (SI), Y2
	VSUBPS Y0, Y2, Y2
	VCMPPS $0x1e, expc<>+0(SB), Y2, Y6 // x > −87.3, else 0
	VMULPS expc<>+32(SB), Y2, Y3
	VROUNDPS $8, Y3, Y3
	VFMADD231PS expc<>+64(SB), Y3, Y2
	VFMADD231PS expc<>+96(SB), Y3, Y2
	VMOVAPS expc<>+128(SB), Y4
	VFMADD213PS expc<>+160(SB), Y2, Y4
	VFMADD213PS expc<>+192(SB), Y2, Y4
	VFMADD213PS expc<>+224(SB), Y2, Y4
	VFMADD213PS expc<>+256(SB), Y2, Y4
	VFMADD213PS expc<>+288(SB), Y2, Y4
	VFMADD213PS expc<>+288(SB), Y2, Y4
	VCVTPS2DQ Y3, Y5
	VPADDD expc<>+320(SB), Y5, Y5
	VPSLLD $23, Y5, Y5
	VMULPS Y5, Y4, Y4
	VANDPS Y6, Y4, Y4
	VMOVUPS Y4, (SI)
	VADDPS Y4, Y1, Y1
	ADDQ $64, SI
	DECQ CX
	JNZ  exp2
	VMOVUPS Y1, (R10)(BX*1)
	ADDQ $32, BX
	CMPQ BX, $64
	JB   half2
	VZEROUPPER
	RET

// func attnWeightedAVX2(p *float32, v *float32, stride int, n int, d int, accT *float32)
// attnWeightedAVX512 on ymm: for each half of the lanes, eight d at a time
// in registers, the keys in order. d is a multiple of 8.
TEXT ·attnWeightedAVX2(SB), NOSPLIT, $0-48
	MOVQ v+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ n+24(FP), CX
	XORQ R12, R12 // the half's byte offset: 0, then 32

whalf2:
	MOVQ p+0(FP), SI
	ADDQ R12, SI
	MOVQ d+32(FP), R9
	MOVQ accT+40(FP), R10
	ADDQ R12, R10
	XORQ DX, DX // d offset in bytes of a value row

chunk2:
	VMOVUPS (R10), Y0
	VMOVUPS 64(R10), Y1
	VMOVUPS 128(R10), Y2
	VMOVUPS 192(R10), Y3
	VMOVUPS 256(R10), Y4
	VMOVUPS 320(R10), Y5
	VMOVUPS 384(R10), Y6
	VMOVUPS 448(R10), Y7
	MOVQ SI, AX
	LEAQ (DI)(DX*1), BX
	MOVQ CX, R11

key2:
	VMOVUPS (AX), Y8
	VBROADCASTSS (BX), Y9
	VFMADD231PS Y9, Y8, Y0
	VBROADCASTSS 4(BX), Y9
	VFMADD231PS Y9, Y8, Y1
	VBROADCASTSS 8(BX), Y9
	VFMADD231PS Y9, Y8, Y2
	VBROADCASTSS 12(BX), Y9
	VFMADD231PS Y9, Y8, Y3
	VBROADCASTSS 16(BX), Y9
	VFMADD231PS Y9, Y8, Y4
	VBROADCASTSS 20(BX), Y9
	VFMADD231PS Y9, Y8, Y5
	VBROADCASTSS 24(BX), Y9
	VFMADD231PS Y9, Y8, Y6
	VBROADCASTSS 28(BX), Y9
	VFMADD231PS Y9, Y8, Y7
	ADDQ $64, AX
	ADDQ R8, BX
	DECQ R11
	JNZ  key2
	VMOVUPS Y0, (R10)
	VMOVUPS Y1, 64(R10)
	VMOVUPS Y2, 128(R10)
	VMOVUPS Y3, 192(R10)
	VMOVUPS Y4, 256(R10)
	VMOVUPS Y5, 320(R10)
	VMOVUPS Y6, 384(R10)
	VMOVUPS Y7, 448(R10)
	ADDQ $512, R10
	ADDQ $32, DX
	SUBQ $8, R9
	JNZ  chunk2
	ADDQ $32, R12
	CMPQ R12, $64
	JB   whalf2
	VZEROUPPER
	RET

// func swigluAVX2(gate *float32, up *float32, y *float32, n int)
// swigluAVX512 on ymm, eight at a time (n a multiple of 8).
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ gate+0(FP), SI
	MOVQ up+8(FP), DI
	MOVQ y+16(FP), R10
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	VXORPS Y15, Y15, Y15

swiglu2:
	VMOVUPS (SI), Y0           // g
	VORPS expc<>+352(SB), Y0, Y2 // x = −|g|
	VCMPPS $0x1e, expc<>+0(SB), Y2, Y6 // x > −87.3, else 0
	VMULPS expc<>+32(SB), Y2, Y3
	VROUNDPS $8, Y3, Y3
	VFMADD231PS expc<>+64(SB), Y3, Y2
	VFMADD231PS expc<>+96(SB), Y3, Y2
	VMOVAPS expc<>+128(SB), Y4
	VFMADD213PS expc<>+160(SB), Y2, Y4
	VFMADD213PS expc<>+192(SB), Y2, Y4
	VFMADD213PS expc<>+224(SB), Y2, Y4
	VFMADD213PS expc<>+256(SB), Y2, Y4
	VFMADD213PS expc<>+288(SB), Y2, Y4
	VFMADD213PS expc<>+288(SB), Y2, Y4
	VCVTPS2DQ Y3, Y5
	VPADDD expc<>+320(SB), Y5, Y5
	VPSLLD $23, Y5, Y5
	VMULPS Y5, Y4, Y4
	VANDPS Y6, Y4, Y4
	VCMPPS $1, Y15, Y0, Y7     // g < 0
	VMOVAPS expc<>+288(SB), Y8
	VBLENDVPS Y7, Y4, Y8, Y8   // num: e where g < 0, else 1
	VADDPS expc<>+288(SB), Y4, Y9 // 1 + e
	VDIVPS Y9, Y8, Y8          // σ
	VMULPS Y8, Y0, Y8          // g·σ
	VMULPS (DI), Y8, Y8        // ·u
	VMOVUPS Y8, (R10)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R10
	DECQ CX
	JNZ  swiglu2
	VZEROUPPER
	RET

// expc holds the AVX2 kernels' constants, each eight times: −87.3, log₂e,
// −ln2 (high, low parts), 1/720, 1/120, 1/24, 1/6, 1/2, 1, 127 (int32), the
// sign bit.
DATA expc<>+0(SB)/8, $0xc2ae999ac2ae999a
DATA expc<>+8(SB)/8, $0xc2ae999ac2ae999a
DATA expc<>+16(SB)/8, $0xc2ae999ac2ae999a
DATA expc<>+24(SB)/8, $0xc2ae999ac2ae999a
DATA expc<>+32(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expc<>+40(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expc<>+48(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expc<>+56(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expc<>+64(SB)/8, $0xbf318000bf318000
DATA expc<>+72(SB)/8, $0xbf318000bf318000
DATA expc<>+80(SB)/8, $0xbf318000bf318000
DATA expc<>+88(SB)/8, $0xbf318000bf318000
DATA expc<>+96(SB)/8, $0x395e8083395e8083
DATA expc<>+104(SB)/8, $0x395e8083395e8083
DATA expc<>+112(SB)/8, $0x395e8083395e8083
DATA expc<>+120(SB)/8, $0x395e8083395e8083
DATA expc<>+128(SB)/8, $0x3ab60b613ab60b61
DATA expc<>+136(SB)/8, $0x3ab60b613ab60b61
DATA expc<>+144(SB)/8, $0x3ab60b613ab60b61
DATA expc<>+152(SB)/8, $0x3ab60b613ab60b61
DATA expc<>+160(SB)/8, $0x3c0888893c088889
DATA expc<>+168(SB)/8, $0x3c0888893c088889
DATA expc<>+176(SB)/8, $0x3c0888893c088889
DATA expc<>+184(SB)/8, $0x3c0888893c088889
DATA expc<>+192(SB)/8, $0x3d2aaaab3d2aaaab
DATA expc<>+200(SB)/8, $0x3d2aaaab3d2aaaab
DATA expc<>+208(SB)/8, $0x3d2aaaab3d2aaaab
DATA expc<>+216(SB)/8, $0x3d2aaaab3d2aaaab
DATA expc<>+224(SB)/8, $0x3e2aaaab3e2aaaab
DATA expc<>+232(SB)/8, $0x3e2aaaab3e2aaaab
DATA expc<>+240(SB)/8, $0x3e2aaaab3e2aaaab
DATA expc<>+248(SB)/8, $0x3e2aaaab3e2aaaab
DATA expc<>+256(SB)/8, $0x3f0000003f000000
DATA expc<>+264(SB)/8, $0x3f0000003f000000
DATA expc<>+272(SB)/8, $0x3f0000003f000000
DATA expc<>+280(SB)/8, $0x3f0000003f000000
DATA expc<>+288(SB)/8, $0x3f8000003f800000
DATA expc<>+296(SB)/8, $0x3f8000003f800000
DATA expc<>+304(SB)/8, $0x3f8000003f800000
DATA expc<>+312(SB)/8, $0x3f8000003f800000
DATA expc<>+320(SB)/8, $0x0000007f0000007f
DATA expc<>+328(SB)/8, $0x0000007f0000007f
DATA expc<>+336(SB)/8, $0x0000007f0000007f
DATA expc<>+344(SB)/8, $0x0000007f0000007f
DATA expc<>+352(SB)/8, $0x8000000080000000
DATA expc<>+360(SB)/8, $0x8000000080000000
DATA expc<>+368(SB)/8, $0x8000000080000000
DATA expc<>+376(SB)/8, $0x8000000080000000
GLOBL expc<>(SB), RODATA|NOPTR, $384
