//go:build !goexperiment.simd || !amd64

package cpu

// simdKernels reports whether the float32 kernels use vector instructions.
const simdKernels = false

// dotPathMaxTokens: products of at most this many tokens use the fused Dot
// (scalar decoding costs about three scalar dot products).
const dotPathMaxTokens = 3

// dot4x2 sets o[2i+j] to the dot product of row i of w (four rows of
// len(x0)) with x_j.
func dot4x2(w, x0, x1 []float32, o *[8]float32) { dot4x2Scalar(w, x0, x1, o) }

// dotF32 is the float32 dot product of two equal-length vectors.
func dotF32(a, b []float32) float32 { return dotF32Scalar(a, b) }

// clearUpper is a no-op without vector kernels.
func clearUpper() {}
