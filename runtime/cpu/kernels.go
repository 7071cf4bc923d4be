package cpu

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// upperChunk is how many elements elementwise kernels process between calls
// of clearUpper (see gemm_simd.go): after a preemption has left the vector
// state dirty, at most this many run slowly.
const upperChunk = 256

// leaf ops hold values set by Step (tokens, positions) or at load (weights).
func leaf(*exec, *ir.Node) error { return nil }

func embed(e *exec, n *ir.Node) error {
	w, ids := e.weights[n.Args[0].ID], e.i32[n.Args[1].ID]
	y := e.out(n)
	E := w.cols
	for t, id := range ids {
		clearUpper()
		if id < 0 || int(id) >= w.rows {
			return fmt.Errorf("%w: token %d of the step is id %d, vocabulary has %d", ErrToken, t, id, w.rows)
		}
		if err := dtype.Dequantize(w.t, w.row(int(id)), y[t*E:(t+1)*E]); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
	}
	return nil
}

// reshape shares its operand's buffer: the elements do not move.
func reshape(e *exec, n *ir.Node) error {
	e.f32[n.ID] = e.in(n, 0)
	return nil
}

func lastTokens(e *exec, n *ir.Node) error {
	x, y := e.in(n, 0), e.out(n)
	E := int(n.Shape[1])
	for s, t := range e.step.last {
		copy(y[s*E:(s+1)*E], x[t*E:(t+1)*E])
	}
	return nil
}

func siluF(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func silu(e *exec, n *ir.Node) error {
	x, y := e.in(n, 0), e.out(n)
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = siluF(x[i])
		}
	}
	return nil
}

func add(e *exec, n *ir.Node) error {
	x, z, y := e.in(n, 0), e.in(n, 1), e.out(n)
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = x[i] + z[i]
		}
	}
	return nil
}

func mul(e *exec, n *ir.Node) error {
	x, z, y := e.in(n, 0), e.in(n, 1), e.out(n)
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = x[i] * z[i]
		}
	}
	return nil
}

func swiglu(e *exec, n *ir.Node) error {
	g, u, y := e.in(n, 0), e.in(n, 1), e.out(n)
	if e.fast {
		// the int8 configuration's SwiGLU, its exp in vector registers
		e.parallel(len(y), 16384, func(_, lo, hi int) { swigluFast(g[lo:hi], u[lo:hi], y[lo:hi]) })
		return nil
	}
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = siluF(g[i]) * u[i]
		}
	}
	return nil
}

func biasAdd(e *exec, n *ir.Node) error {
	x, b, y := e.in(n, 0), e.weights[n.Args[1].ID].vec, e.out(n)
	N := len(b)
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = x[i] + b[i%N]
		}
	}
	return nil
}

func rmsNorm(e *exec, n *ir.Node) error {
	x, w, y := e.in(n, 0), e.weights[n.Args[1].ID].vec, e.out(n)
	D, eps := len(w), n.Float("eps")
	// rows are independent: split them between the workers when many
	e.parallel(len(y)/D, max(1, 32768/D), func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			clearUpper()
			xr, yr := x[r*D:(r+1)*D], y[r*D:(r+1)*D]
			ss := 0.0
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			scale := float32(1 / math.Sqrt(ss/float64(D)+eps))
			for i, v := range xr {
				yr[i] = v * scale * w[i]
			}
		}
	})
	return nil
}

func rope(e *exec, n *ir.Node) error {
	x, y := e.in(n, 0), e.out(n)
	pos := e.i32[n.Args[1].ID]
	p := ir.RopeOf(n)
	th := e.thetas[n.ID]
	H, D := int(n.Shape[1]), int(n.Shape[2])
	copy(y, x)
	half := p.Dims / 2
	for t := range pos {
		clearUpper()
		angle0 := float64(pos[t]) * p.PositionScale()
		for i := 0; i < half; i++ {
			sin, cos := math.Sincos(angle0 * th[i])
			c, s := float32(cos), float32(sin)
			a, b := 2*i, 2*i+1
			if p.Style == ir.RopeHalf {
				a, b = i, i+half
			}
			for h := 0; h < H; h++ {
				row := y[(t*H+h)*D:]
				xa, xb := row[a], row[b]
				row[a] = xa*c - xb*s
				row[b] = xa*s + xb*c
			}
		}
	}
	return nil
}

func output(e *exec, n *ir.Node) error {
	copy(e.out(n), e.in(n, 0))
	return nil
}
