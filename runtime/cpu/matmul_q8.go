package cpu

import (
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
	// groups holds, by the node of the first product of each input, the
	// products that read it; follows, the others (groupProducts).
	groups  map[int]*q8Group
	follows map[int]bool
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
// cache. The products that read the same input (Q, K and V; gate and up)
// run as one: the first of them in the graph computes all (one parallel
// section over all their tiles, one stream of weights), the others find
// their output written.
func matmulQ8(e *exec, n *ir.Node, w *weight, x []float32, M int) {
	if e.q8.follows[n.ID] {
		return // computed with the first product of its input
	}
	g := e.q8.groups[n.ID]
	if g == nil {
		g = &q8Group{members: []*ir.Node{n}, weights: []*weight{w}, start: []int{0}, tiles: w.packed.Tiles}
	}
	var a *dtype.Acts
	if !w.packed.Float() {
		a = e.quantized(n.Args[0], x, w.cols)
	}
	outs := make([][]float32, len(g.members))
	for i, m := range g.members {
		outs[i] = e.out(m)
	}
	tt := w.tiles.TokenTile
	if tt <= 0 {
		tt = M
	}
	// Tokens in tiles of tt: each tile's activations stay in cache while
	// every weight tile passes over them once. ~256k multiply-adds a chunk
	// at least, so small products stay on one core.
	for m0 := 0; m0 < M; m0 += tt {
		m1 := min(m0+tt, M)
		grain := max(1, 262144/(dtype.PackRows*w.cols*(m1-m0)))
		e.parallel(g.tiles, grain, func(_, lo, hi int) {
			for i, mw := range g.weights {
				// the member's tiles are [start, start+Tiles) of the group's
				start := g.start[i]
				l, h := max(lo, start)-start, min(hi, start+mw.packed.Tiles)-start
				if l >= h {
					continue
				}
				if a == nil {
					// F32, F16, BF16: float products in the same tiles
					mw.packed.ProductFloat(x, l, h, m0, m1, mw.tiles.TokenBlock, outs[i], mw.rows)
				} else {
					mw.packed.Product(a, l, h, m0, m1, mw.tiles.TokenBlock, outs[i], mw.rows)
				}
			}
		})
	}
}

// q8Group is the packed products that read one input, in graph order.
type q8Group struct {
	members []*ir.Node
	weights []*weight
	start   []int // each member's first tile in the group's numbering
	tiles   int
}

// groupProducts finds the packed products of each input: the first one's
// entry in e.q8.groups holds them all, the others' none.
func (e *exec) groupProducts() {
	e.q8.groups, e.q8.follows = map[int]*q8Group{}, map[int]bool{}
	lead := map[int]*q8Group{} // by input node
	for _, n := range e.g.Nodes {
		if n.Op != ir.OpMatmul {
			continue
		}
		w := e.weights[n.Args[1].ID]
		if w == nil || w.packed == nil {
			continue
		}
		g := lead[n.Args[0].ID]
		if g == nil || g.weights[0].packed.Float() != w.packed.Float() || g.weights[0].cols != w.cols {
			g = &q8Group{}
			lead[n.Args[0].ID] = g
			e.q8.groups[n.ID] = g
		} else {
			e.q8.follows[n.ID] = true
		}
		g.members = append(g.members, n)
		g.weights = append(g.weights, w)
		g.start = append(g.start, g.tiles)
		g.tiles += w.packed.Tiles
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
// product, the tiles split between the workers; a weight share (another
// executor of the same model, or nil) packed already is taken from it.
func (e *exec) packWeights(share *exec) {
	packs := map[string]*dtype.Packed{}
	if share != nil {
		for _, w := range share.weights {
			if w != nil && w.packed != nil {
				packs[w.name] = w.packed
			}
		}
	}
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
		if p := packs[w.name]; p != nil {
			w.packed = p // another executor of the same model packed it
			continue
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
	e.groupProducts()
}
