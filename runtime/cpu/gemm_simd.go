//go:build goexperiment.simd && amd64

package cpu

import "simd/archsimd"

// simdKernels reports whether the float32 kernels use vector instructions
// (AVX2 with FMA, checked at start-up).
var simdKernels = archsimd.X86.AVX2() && archsimd.X86.FMA()

// dotPathMaxTokens: products of at most this many tokens use the fused Dot
// (vector decoding of a tile plus the 4×2 kernel wins from two tokens on).
const dotPathMaxTokens = 1

// clearUpper clears the upper halves of the vector registers (VZEROUPPER).
// Go's scalar float code is SSE, which runs up to ~100× slower while the
// upper state is dirty (measured here: math.Exp 6 ns → 900 ns). Besides our
// vector kernels, Go 1.26's asynchronous preemption leaves it dirty in
// GOEXPERIMENT=simd builds on AVX-512 CPUs (it restores full ZMM registers),
// even in goroutines that never ran vector code; so scalar loops of the
// executor call this every few hundred elements (cost: one instruction).
func clearUpper() {
	if hasAVX {
		archsimd.ClearAVXUpperBits()
	}
}

// hasAVX guards VZEROUPPER, which CPUs without AVX lack.
var hasAVX = archsimd.X86.AVX()

// dot4x2 sets o[2i+j] to the dot product of row i of w (four rows of
// len(x0)) with x_j.
func dot4x2(w, x0, x1 []float32, o *[8]float32) {
	if !simdKernels {
		dot4x2Scalar(w, x0, x1, o)
		return
	}
	K := len(x0)
	w0, w1, w2, w3 := w[:K], w[K:2*K], w[2*K:3*K], w[3*K:4*K]
	x1 = x1[:K]
	var a0, a1, a2, a3, b0, b1, b2, b3 archsimd.Float32x8
	k := 0
	for ; k+8 <= K; k += 8 {
		u := archsimd.LoadFloat32x8((*[8]float32)(x0[k : k+8]))
		v := archsimd.LoadFloat32x8((*[8]float32)(x1[k : k+8]))
		c := archsimd.LoadFloat32x8((*[8]float32)(w0[k : k+8]))
		a0 = c.MulAdd(u, a0)
		b0 = c.MulAdd(v, b0)
		c = archsimd.LoadFloat32x8((*[8]float32)(w1[k : k+8]))
		a1 = c.MulAdd(u, a1)
		b1 = c.MulAdd(v, b1)
		c = archsimd.LoadFloat32x8((*[8]float32)(w2[k : k+8]))
		a2 = c.MulAdd(u, a2)
		b2 = c.MulAdd(v, b2)
		c = archsimd.LoadFloat32x8((*[8]float32)(w3[k : k+8]))
		a3 = c.MulAdd(u, a3)
		b3 = c.MulAdd(v, b3)
	}
	u0, u1 := x0[k:], x1[k:]
	w0, w1, w2, w3 = w0[k:], w1[k:], w2[k:], w3[k:]
	// Reduce the eight accumulators into one vector laid out as o.
	r0 := a0.AddPairsGrouped(b0).AddPairsGrouped(a1.AddPairsGrouped(b1))
	r1 := a2.AddPairsGrouped(b2).AddPairsGrouped(a3.AddPairsGrouped(b3))
	r0.Select128FromPair(0, 2, r1).Add(r0.Select128FromPair(1, 3, r1)).Store(o)
	// Scalar SSE code after dirty AVX state is slow on some CPUs.
	archsimd.ClearAVXUpperBits()
	for k, u := range u0 {
		v := u1[k]
		o[0] += w0[k] * u
		o[1] += w0[k] * v
		o[2] += w1[k] * u
		o[3] += w1[k] * v
		o[4] += w2[k] * u
		o[5] += w2[k] * v
		o[6] += w3[k] * u
		o[7] += w3[k] * v
	}
}

// dotF32 is the float32 dot product of two equal-length vectors.
func dotF32(a, b []float32) float32 {
	if !simdKernels {
		return dotF32Scalar(a, b)
	}
	b = b[:len(a)]
	var s0, s1 archsimd.Float32x8
	k := 0
	for ; k+16 <= len(a); k += 16 {
		s0 = archsimd.LoadFloat32x8((*[8]float32)(a[k:k+8])).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(b[k:k+8])), s0)
		s1 = archsimd.LoadFloat32x8((*[8]float32)(a[k+8:k+16])).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(b[k+8:k+16])), s1)
	}
	s := hsum(s0.Add(s1))
	archsimd.ClearAVXUpperBits()
	for ; k < len(a); k++ {
		s += a[k] * b[k]
	}
	return s
}

// hsum adds the eight lanes of v.
func hsum(v archsimd.Float32x8) float32 {
	h := v.GetLo().Add(v.GetHi())
	h = h.AddPairs(h)
	return h.AddPairs(h).GetElem(0)
}
