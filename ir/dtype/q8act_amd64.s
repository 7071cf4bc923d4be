//go:build amd64 && !purego

#include "textflag.h"

// The activation quantiser (quantizeGroup) over n groups of 32: the same
// float32 operations, so the same codes and groups to the bit.
//
// Per group: amax as the largest of the elements' bits less the sign (the
// order of non-negative floats is their bits' order, and a NaN or an
// infinity is at least 0x7f800000); d = amax/127, id = 127/amax; the codes
// are x·id converted with rounding to nearest even (MXCSR's default),
// clamped to ±127; then the sums of each half and the group's fields.

// groupFields writes the fields of group DX from d (X4) and the code sums
// of the halves (AX, BX). Clobbers R8, R9, X6.
#define groupFields \
	VMOVSS X4, (DX) \
	MOVL AX, R8 \
	ADDL BX, R8 \
	VCVTSI2SSL R8, X6, X6 \
	VMULSS X4, X6, X6 \
	VMOVSS X6, 4(DX) \
	IMUL3L $-8, R8, R9 \
	MOVL R9, 8(DX) \
	IMUL3L $-128, R8, R9 \
	MOVL R9, 12(DX) \
	IMUL3L $-32, AX, R9 \
	MOVL R9, 16(DX) \
	IMUL3L $-32, BX, R9 \
	MOVL R9, 20(DX) \
	IMUL3L $-16, R8, R9 \
	MOVL R9, 24(DX) \
	MOVL $0, 28(DX)

// emptyGroup writes zero codes and a group of scale R8 (bits): NaN for a
// group with a NaN or an infinity, 0 for a tiny one.
#define emptyGroup \
	MOVQ $0, (DI) \
	MOVQ $0, 8(DI) \
	MOVQ $0, 16(DI) \
	MOVQ $0, 24(DI) \
	MOVL R8, (DX) \
	MOVL R8, 4(DX) \
	MOVQ $0, 8(DX) \
	MOVQ $0, 16(DX) \
	MOVQ $0, 24(DX)

// func quantizeActsAVX512(x *float32, q *int8, groups *ActGroup, n int)
TEXT ·quantizeActsAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ groups+16(FP), DX
	MOVQ n+24(FP), CX
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	MOVL $127, AX
	VPBROADCASTD AX, Z30
	MOVL $-127, AX
	VPBROADCASTD AX, Z29
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X14

avx512loop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z31, Z0, Z2
	VPANDD Z31, Z1, Z3
	VPMAXUD Z3, Z2, Z2
	VEXTRACTI64X4 $1, Z2, Y3
	VPMAXUD Y3, Y2, Y2
	VEXTRACTI128 $1, Y2, X3
	VPMAXUD X3, X2, X2
	VPSHUFD $0x4e, X2, X3
	VPMAXUD X3, X2, X2
	VPSHUFD $0xb1, X2, X3
	VPMAXUD X3, X2, X2
	VMOVD X2, AX
	CMPL AX, $0x7f800000
	JAE avx512nan
	CMPL AX, $0x0d800000
	JB avx512tiny
	VDIVSS X14, X2, X4 // d = amax/127
	VDIVSS X2, X14, X5 // id = 127/amax
	VBROADCASTSS X5, Z5
	VMULPS Z5, Z0, Z0
	VMULPS Z5, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMINSD Z30, Z0, Z0
	VPMAXSD Z29, Z0, Z0
	VPMINSD Z30, Z1, Z1
	VPMAXSD Z29, Z1, Z1
	VPMOVDB Z0, (DI)
	VPMOVDB Z1, 16(DI)
	VEXTRACTI64X4 $1, Z0, Y6
	VPADDD Y6, Y0, Y6
	VEXTRACTI128 $1, Y6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0x4e, X6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0xb1, X6, X7
	VPADDD X7, X6, X6
	VMOVD X6, AX
	VEXTRACTI64X4 $1, Z1, Y6
	VPADDD Y6, Y1, Y6
	VEXTRACTI128 $1, Y6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0x4e, X6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0xb1, X6, X7
	VPADDD X7, X6, X6
	VMOVD X6, BX
	groupFields

avx512next:
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ avx512loop
	VZEROUPPER
	RET

avx512nan:
	MOVL $0x7fc00000, R8
	emptyGroup
	JMP avx512next

avx512tiny:
	MOVL $0, R8
	emptyGroup
	JMP avx512next

// func quantizeActsAVX2(x *float32, q *int8, groups *ActGroup, n int)
TEXT ·quantizeActsAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ groups+16(FP), DX
	MOVQ n+24(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $127, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $-127, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X14
	VMOVDQU avx2perm<>(SB), Y11

avx2loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VPAND Y15, Y0, Y4
	VPAND Y15, Y1, Y5
	VPMAXUD Y5, Y4, Y4
	VPAND Y15, Y2, Y5
	VPMAXUD Y5, Y4, Y4
	VPAND Y15, Y3, Y5
	VPMAXUD Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPMAXUD X5, X4, X4
	VPSHUFD $0x4e, X4, X5
	VPMAXUD X5, X4, X4
	VPSHUFD $0xb1, X4, X5
	VPMAXUD X5, X4, X2
	VMOVD X2, AX
	CMPL AX, $0x7f800000
	JAE avx2nan
	CMPL AX, $0x0d800000
	JB avx2tiny
	VDIVSS X14, X2, X4 // d = amax/127
	VDIVSS X2, X14, X5 // id = 127/amax
	VBROADCASTSS X5, Y5
	VMOVUPS 64(SI), Y2 // reload: X2 held amax
	VMULPS Y5, Y0, Y0
	VMULPS Y5, Y1, Y1
	VMULPS Y5, Y2, Y2
	VMULPS Y5, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPMINSD Y13, Y0, Y0
	VPMAXSD Y12, Y0, Y0
	VPMINSD Y13, Y1, Y1
	VPMAXSD Y12, Y1, Y1
	VPMINSD Y13, Y2, Y2
	VPMAXSD Y12, Y2, Y2
	VPMINSD Y13, Y3, Y3
	VPMAXSD Y12, Y3, Y3
	// codes: pack to bytes, then put the dwords back in element order
	VPACKSSDW Y1, Y0, Y6
	VPACKSSDW Y3, Y2, Y7
	VPACKSSWB Y7, Y6, Y6
	VPERMD Y6, Y11, Y6
	VMOVDQU Y6, (DI)
	// sums of the halves
	VPADDD Y1, Y0, Y6
	VEXTRACTI128 $1, Y6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0x4e, X6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0xb1, X6, X7
	VPADDD X7, X6, X6
	VMOVD X6, AX
	VPADDD Y3, Y2, Y6
	VEXTRACTI128 $1, Y6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0x4e, X6, X7
	VPADDD X7, X6, X6
	VPSHUFD $0xb1, X6, X7
	VPADDD X7, X6, X6
	VMOVD X6, BX
	groupFields

avx2next:
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ avx2loop
	VZEROUPPER
	RET

avx2nan:
	MOVL $0x7fc00000, R8
	emptyGroup
	JMP avx2next

avx2tiny:
	MOVL $0, R8
	emptyGroup
	JMP avx2next

// avx2perm puts the dwords of vpacksswb's result (lanes of four codes,
// interleaved by the packs) back in element order.
DATA avx2perm<>+0(SB)/4, $0
DATA avx2perm<>+4(SB)/4, $4
DATA avx2perm<>+8(SB)/4, $1
DATA avx2perm<>+12(SB)/4, $5
DATA avx2perm<>+16(SB)/4, $2
DATA avx2perm<>+20(SB)/4, $6
DATA avx2perm<>+24(SB)/4, $3
DATA avx2perm<>+28(SB)/4, $7
GLOBL avx2perm<>(SB), RODATA|NOPTR, $32
