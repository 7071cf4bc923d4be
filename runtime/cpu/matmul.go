package cpu

import (
	"sync"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// Blocking of the matrix product. Up to dotPathMaxTokens tokens (set per
// build: 1 with vector kernels, 3 without, measured) read W's stored rows
// with the fused dtype.Dot; more tokens decode a tile of rows once into
// float32 (with dtype.Dequantize, so the weights used are exactly the
// reference values) and run a register-blocked float32 kernel over
// tokens × rows.
const (
	tileRows   = 8  // weight rows decoded per tile (a multiple of 4)
	tileTokens = 64 // tokens one work item covers
)

// tilePool holds per-worker tile buffers: each work chunk takes one and
// gives it back, so steady-state products allocate nothing.
var tilePool = sync.Pool{New: func() any { return new([]float32) }}

// matmul computes y = x·Wᵀ, x being M rows of K (tokens or sequences), W
// N stored rows of K. Output columns (W's rows) are split among the workers,
// and tokens too when there are many.
func matmul(e *exec, n *ir.Node) error {
	x, w := e.in(n, 0), e.weights[n.Args[1].ID]
	M := len(x) / w.cols
	if w.packed != nil {
		matmulQ8(e, n, w, x, M)
		return nil
	}
	product(e, w, x, e.out(n), M)
	return nil
}

// matmulDot reads each stored row once per token with the fused dot product.
func matmulDot(e *exec, w *weight, x, y []float32, M int) {
	K, N := w.cols, w.rows
	// Aim for ~64k multiply-adds per chunk so small products stay on one core.
	grain := max(1, 65536/(K*max(M, 1)))
	e.parallel(N, grain, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			clearUpper()
			row := w.row(r)
			for m := 0; m < M; m++ {
				y[m*N+r] = dtype.Dot(w.t, row, x[m*K:(m+1)*K])
			}
		}
	})
}

// matmulTiled decodes tiles of tileRows weight rows and applies each to a
// block of up to tileTokens tokens. Work items run row tile by row tile, the
// token blocks of one tile consecutively, so a worker decodes a tile once
// for all the token blocks of its chunk.
func matmulTiled(e *exec, w *weight, x, y []float32, M int) {
	K, N := w.cols, w.rows
	rowTiles := (N + tileRows - 1) / tileRows
	tokBlocks := (M + tileTokens - 1) / tileTokens
	grain := max(1, 65536/(K*min(M, tileTokens)*tileRows))
	e.parallel(rowTiles*tokBlocks, grain, func(_, lo, hi int) {
		buf := tilePool.Get().(*[]float32)
		if cap(*buf) < tileRows*K {
			*buf = make([]float32, tileRows*K)
		}
		wt := (*buf)[:tileRows*K]
		decoded := -1
		for it := lo; it < hi; it++ {
			clearUpper()
			rt, tb := it/tokBlocks, it%tokBlocks
			r0 := rt * tileRows
			r1 := min(r0+tileRows, N)
			if rt != decoded {
				for r := r0; r < r1; r++ {
					if err := dtype.Dequantize(w.t, w.row(r), wt[(r-r0)*K:(r-r0+1)*K]); err != nil {
						panic("BUG: cpu: weight checked at load no longer decodes: " + err.Error())
					}
				}
				decoded = rt
			}
			t0 := tb * tileTokens
			t1 := min(t0+tileTokens, M)
			gemmTile(wt[:(r1-r0)*K], r1-r0, x[t0*K:t1*K], t1-t0, K, y[t0*N+r0:], N)
		}
		tilePool.Put(buf)
	})
}

// gemmTile sets y[t·ldy + r] = Σₖ w[r·K+k]·x[t·K+k] for r < rows, t < tokens.
func gemmTile(w []float32, rows int, x []float32, tokens, K int, y []float32, ldy int) {
	var o [8]float32
	for t := 0; t < tokens; t += 2 {
		x0 := x[t*K : (t+1)*K]
		x1, two := x0, t+1 < tokens
		if two {
			x1 = x[(t+1)*K : (t+2)*K]
		}
		r := 0
		for ; r+4 <= rows; r += 4 {
			dot4x2(w[r*K:(r+4)*K], x0, x1, &o)
			yt := y[t*ldy+r : t*ldy+r+4]
			yt[0], yt[1], yt[2], yt[3] = o[0], o[2], o[4], o[6]
			if two {
				yt = y[(t+1)*ldy+r : (t+1)*ldy+r+4]
				yt[0], yt[1], yt[2], yt[3] = o[1], o[3], o[5], o[7]
			}
		}
		for ; r < rows; r++ {
			wr := w[r*K : (r+1)*K]
			y[t*ldy+r] = dotF32(wr, x0)
			if two {
				y[(t+1)*ldy+r] = dotF32(wr, x1)
			}
		}
	}
}

// dot4x2Scalar is dot4x2 in plain Go: o[2i+j] = w row i · x_j, w holding
// four rows of len(x0).
func dot4x2Scalar(w, x0, x1 []float32, o *[8]float32) {
	K := len(x0)
	w0, w1, w2, w3 := w[:K], w[K:2*K], w[2*K:3*K], w[3*K:4*K]
	x1 = x1[:K]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for k, u := range x0 {
		v := x1[k]
		a0 += w0[k] * u
		b0 += w0[k] * v
		a1 += w1[k] * u
		b1 += w1[k] * v
		a2 += w2[k] * u
		b2 += w2[k] * v
		a3 += w3[k] * u
		b3 += w3[k] * v
	}
	*o = [8]float32{a0, b0, a1, b1, a2, b2, a3, b3}
}

// dotF32Scalar is the float32 dot product of two equal-length vectors.
func dotF32Scalar(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(a); k += 4 {
		s0 += a[k] * b[k]
		s1 += a[k+1] * b[k+1]
		s2 += a[k+2] * b[k+2]
		s3 += a[k+3] * b[k+3]
	}
	for ; k < len(a); k++ {
		s0 += a[k] * b[k]
	}
	return (s0 + s1) + (s2 + s3)
}
