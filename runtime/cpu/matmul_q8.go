package cpu

import (
	"fmt"
	"os"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// Products chooses the numerical class of the executor's matrix products.
type Products int

const (
	// ProductsExact, the default, multiplies the stored weight rows with the
	// float32 activations (dtype.Dot, decoded float32 tiles): the reference
	// every parity test and kernel-check compares against.
	ProductsExact Products = iota
	// ProductsInt8 quantises each product's activations to int8 per 32
	// elements and takes integer dot products with weights repacked at load
	// (dtype.Packed): several times faster, a relative error of a few 1e-3.
	// F32, F16 and BF16 weights take float products in the same tiles
	// (float32 activations, fused multiply-adds); the types with neither
	// (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, …) keep the exact products. Attention
	// and SwiGLU are the fast class's too (fastattn.go).
	ProductsInt8
)

// String names the class as the bench reports it.
func (p Products) String() string {
	if p == ProductsInt8 {
		return "int8"
	}
	return "exact"
}

// q8Ring is how many quantised inputs the executor keeps: products that
// share an input (Q, K and V; gate and up) follow one another, and each
// quantises it once.
const q8Ring = 4

// q8State holds the int8 products' quantised activations: a ring of the
// last inputs quantised this step, by node ID.
type q8State struct {
	step uint64 // the executor's step count (run increments it)
	acts [q8Ring]dtype.Acts
	node [q8Ring]int
	when [q8Ring]uint64
	next int
}

// quantized returns x, the value of node in, quantised in rows of k,
// quantising it on the first product of the step that reads it.
func (e *exec) quantized(in *ir.Node, x []float32, k int) *dtype.Acts {
	q := &e.q8
	for i := range q8Ring {
		if q.node[i] == in.ID && q.when[i] == q.step && q.acts[i].K == k {
			return &q.acts[i]
		}
	}
	i := q.next
	q.next = (q.next + 1) % q8Ring
	q.node[i], q.when[i] = in.ID, q.step
	a := &q.acts[i]
	M := len(x) / k
	a.Reset(M, k)
	e.parallel(M, max(1, 16384/k), func(_, lo, hi int) { a.QuantizeRows(x, lo, hi) })
	return a
}

// matmulQ8 is matmul over a packed weight: tiles of 16 rows are split
// between the workers, each tile applied to all M tokens while it is in
// cache.
func matmulQ8(e *exec, n *ir.Node, w *weight, x, y []float32, M int) {
	p := w.packed
	var a *dtype.Acts
	if !p.Float() {
		a = e.quantized(n.Args[0], x, w.cols)
	}
	block, tt := w.tiles.TokenBlock, w.tiles.TokenTile
	if tt <= 0 {
		tt = M
	}
	// Tokens in tiles of tt: each tile's activations stay in cache while
	// every weight tile passes over them once. ~256k multiply-adds a chunk
	// at least, so small products stay on one core.
	for m0 := 0; m0 < M; m0 += tt {
		m1 := min(m0+tt, M)
		grain := max(1, 262144/(dtype.PackRows*w.cols*(m1-m0)))
		e.parallel(p.Tiles, grain, func(_, lo, hi int) {
			if a == nil {
				// F32, F16, BF16: float products in the same tiles
				p.ProductFloat(x, lo, hi, m0, m1, block, y, w.rows)
			} else {
				p.Product(a, lo, hi, m0, m1, block, y, w.rows)
			}
		})
	}
}

// Tiles is the blocking of one int8 product: an arm of the CPU autotuner
// (the tunedb's cpu_product family).
type Tiles struct {
	// TokenBlock is the tokens of one kernel call (0: the kernel's most):
	// the weight tile's codes are unpacked once for that many tokens.
	TokenBlock int
	// TokenTile is the tokens whose activations the weight tiles sweep at a
	// time (0: all of the step's): a tile small enough keeps them in cache
	// for a long prompt, at the cost of reading the weights once a tile.
	TokenTile int
}

// TilesFunc chooses the blocking of the product of a weight of type t, n
// rows of k elements (Options.Tiles).
type TilesFunc func(t dtype.Type, n, k int) Tiles

// packWeights repacks every weight a matmul reads whose type has an int8
// product, the tiles split between the workers.
func (e *exec) packWeights() {
	for _, n := range e.g.Nodes {
		if n.Op != ir.OpMatmul {
			continue
		}
		w := e.weights[n.Args[1].ID]
		if w == nil || w.packed != nil || !dtype.Packable(w.t, w.cols) {
			continue
		}
		if e.tilesOf != nil {
			w.tiles = e.tilesOf(w.t, w.rows, w.cols)
		}
		p, err := dtype.NewPacked(w.t, w.rows, w.cols)
		if err != nil {
			panic("BUG: cpu: packable weight refused: " + err.Error())
		}
		e.parallel(p.Tiles, 1, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				p.PackTile(i, w.data)
			}
		})
		w.packed = p
	}
}

// ServingProducts is the class the memra commands serve and bench with on
// the CPU: int8, unless the environment variable MEMRA_CPU_PRODUCTS says
// "exact" (the reference's products, for comparing outputs).
func ServingProducts() (Products, error) {
	switch v := os.Getenv("MEMRA_CPU_PRODUCTS"); v {
	case "", "int8":
		return ProductsInt8, nil
	case "exact":
		return ProductsExact, nil
	default:
		return 0, fmt.Errorf("%w: MEMRA_CPU_PRODUCTS=%q: want int8 or exact", ErrOptions, v)
	}
}
