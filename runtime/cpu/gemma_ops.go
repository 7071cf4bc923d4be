package cpu

import (
	"math"

	"github.com/memra-ai/memra/ir"
)

// The elementwise ops Gemma brought: the GELU-tanh gated feed-forward, a
// constant scale (the embeddings times √dim) and soft-capping (the final
// logits). Each value is computed in float64 and rounded once.

// geluTanh is GELU's tanh approximation, g/2 · (1 + tanh(√(2/π)·(g + 0.044715·g³))).
func geluTanh(g float64) float64 {
	return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g)))
}

func geglu(e *exec, n *ir.Node) error {
	g, u, y := e.in(n, 0), e.in(n, 1), e.out(n)
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = float32(geluTanh(float64(g[i]))) * u[i]
		}
	}
	return nil
}

func scale(e *exec, n *ir.Node) error {
	x, y := e.in(n, 0), e.out(n)
	f := float32(n.Float("factor"))
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = x[i] * f
		}
	}
	return nil
}

// softcapF is c·tanh(x/c).
func softcapF(x, c float64) float64 { return c * math.Tanh(x/c) }

func softcap(e *exec, n *ir.Node) error {
	x, y := e.in(n, 0), e.out(n)
	c := n.Float("cap")
	for i0 := 0; i0 < len(y); i0 += upperChunk {
		clearUpper()
		for i := i0; i < min(i0+upperChunk, len(y)); i++ {
			y[i] = float32(softcapF(float64(x[i]), c))
		}
	}
	return nil
}
