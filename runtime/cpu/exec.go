package cpu

import (
	"fmt"
	"math"
	"runtime"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// kernel runs one node: it reads its operands' values and writes its own.
type kernel func(e *exec, n *ir.Node) error

// kernels is the executor's op table: the implementation of every op,
// indexed by op. A missing entry is a bug (see TestKernelTable).
var kernels [ir.NumOps]kernel

func init() {
	kernels = [ir.NumOps]kernel{
		ir.OpTokens:     leaf,
		ir.OpPositions:  leaf,
		ir.OpWeight:     leaf,
		ir.OpEmbed:      embed,
		ir.OpReshape:    reshape,
		ir.OpLastTokens: lastTokens,
		ir.OpSiLU:       silu,
		ir.OpScale:      scale,
		ir.OpSoftcap:    softcap,
		ir.OpGeGLU:      geglu,
		ir.OpAdd:        add,
		ir.OpMul:        mul,
		ir.OpSwiGLU:     swiglu,
		ir.OpBiasAdd:    biasAdd,
		ir.OpRMSNorm:    rmsNorm,
		ir.OpMatmul:     matmul,
		ir.OpRope:       rope,
		ir.OpKVWrite:    kvWrite,
		ir.OpAttention:  attention,
		ir.OpOutput:     output,
		ir.OpHiddenIn:   leaf, // set by the stage's step (stage.go)
		ir.OpHiddenOut:  output,
		ir.OpTopK:       topK,
		ir.OpMoEWeights: moeWeights,
		ir.OpMoEMatmul:  moeMatmul,
		ir.OpMoESum:     moeSum,
	}
}

// weight is a model tensor as the executor reads it.
type weight struct {
	name     string
	t        dtype.Type
	data     []byte        // stored bytes, rows of rowBytes
	rows     int           // outer elements (1 for a vector)
	cols     int           // elements per row (ne[0])
	rowBytes int           // bytes per row
	vec      []float32     // the dequantised tensor, for 1-D weights only
	packed   *dtype.Packed // the int8 products' copy (ProductsInt8), else nil
	tiles    Tiles         // the blocking of its int8 product
}

// row returns stored row r.
func (w *weight) row(r int) []byte { return w.data[r*w.rowBytes : (r+1)*w.rowBytes] }

// layout describes the tokens and sequences of the running step.
type layout struct {
	T, S   int
	seqOf  []int   // per token: index of its sequence in the step
	pos    []int32 // per token: its position in its sequence
	last   []int   // per sequence: index of its last token
	length []int   // per sequence: cached positions after this step
	tables [][]int32
}

// pagedCache is the float32 KV cache of every sequence: per layer and
// page, pageSize rows of Hkv·D elements, one per position. Pages are
// allocated on first write, so a large pool costs only what is used.
type pagedCache struct {
	pageSize int
	rows     []int         // per layer: Hkv·D (0 for a layer another stage holds)
	k, v     [][][]float32 // [layer][page]
}

func newPagedCache(rows []int, pages, pageSize int) *pagedCache {
	c := &pagedCache{pageSize: pageSize, rows: rows, k: make([][][]float32, len(rows)), v: make([][][]float32, len(rows))}
	for l, R := range rows {
		if R > 0 {
			c.k[l], c.v[l] = make([][]float32, pages), make([][]float32, pages)
		}
	}
	return c
}

// row returns the key and value rows of position j of the sequence whose
// page table is pt, in layer l, allocating its page on first use (kvWrite
// runs on one goroutine; attention reads only pages written before, which
// plan checks).
func (c *pagedCache) row(l int, pt []int32, j int) (k, v []float32) {
	id, R := pt[j/c.pageSize], c.rows[l]
	if c.k[l][id] == nil {
		c.k[l][id], c.v[l][id] = make([]float32, c.pageSize*R), make([]float32, c.pageSize*R)
	}
	off := (j % c.pageSize) * R
	return c.k[l][id][off : off+R : off+R], c.v[l][id][off : off+R : off+R]
}

// written reports whether every layer of page id has been written to.
func (c *pagedCache) written(id int32) bool {
	for l, R := range c.rows {
		if R > 0 && c.k[l][id] == nil {
			return false
		}
	}
	return true
}

// poison fills the given pages of every layer with NaN, where allocated.
func (c *pagedCache) poison(pages []int32) {
	nan := float32(math.NaN())
	for l := range c.rows {
		for _, id := range pages {
			for _, pg := range [][]float32{c.k[l][id], c.v[l][id]} {
				for i := range pg {
					pg[i] = nan
				}
			}
		}
	}
}

// exec holds the values of one graph's nodes and runs them.
type exec struct {
	g       *ir.Graph
	threads int
	weights []*weight   // by node ID; nil for non-weights
	f32     [][]float32 // F32 values by node ID
	i32     [][]int32   // I32 values by node ID
	thetas  [][]float64 // rope θ per rope node ID
	kvRow   []int       // per layer: Hkv·D
	kv      *pagedCache
	step    layout
	scratch [][]float64              // per worker
	team    *team                    // the workers of parallel, started on first use
	q8      q8State                  // the int8 products' activations
	fast    bool                     // the int8 configuration (Options.Products)
	tilesOf TilesFunc                // the int8 products' blocking (Options.Tiles)
	fattn   []fastAttnScratch        // per worker, its attention's buffers
	routes  func(ids []int32, k int) // Options.Routes
}

// numel returns the element count of shape s in the running step.
func (e *exec) numel(s ir.Shape) int {
	n := 1
	for _, d := range s {
		switch d {
		case ir.T:
			n *= e.step.T
		case ir.S:
			n *= e.step.S
		default:
			n *= int(d)
		}
	}
	return n
}

// out returns n's F32 buffer sized for the running step, reusing memory.
func (e *exec) out(n *ir.Node) []float32 {
	size := e.numel(n.Shape)
	if cap(e.f32[n.ID]) < size {
		e.f32[n.ID] = make([]float32, size, size+size/4)
	}
	e.f32[n.ID] = e.f32[n.ID][:size]
	return e.f32[n.ID]
}

// in returns the F32 value of operand i of n.
func (e *exec) in(n *ir.Node, i int) []float32 { return e.f32[n.Args[i].ID] }

// run executes every node of the graph in order.
func (e *exec) run(check func() error) error {
	e.q8.step++
	for _, n := range e.g.Nodes {
		if err := kernels[n.Op](e, n); err != nil {
			return fmt.Errorf("%%%d %v: %w", n.ID, n.Op, err)
		}
		if check != nil && n.Op.Group() == ir.GroupModel {
			if err := check(); err != nil {
				return err
			}
		}
	}
	return nil
}

// parallel calls f(worker, lo, hi) over [0,n) in chunks of at least grain,
// on up to e.threads workers (the caller and the team's goroutines); each
// worker index runs on one goroutine. A memory fault in a worker (a weight
// whose file shrank) is raised again in the calling goroutine once every
// worker is done, for guarded.
func (e *exec) parallel(n, grain int, f func(w, lo, hi int)) {
	if grain < 1 {
		grain = 1
	}
	workers := min(e.threads, (n+grain-1)/grain)
	if workers <= 1 {
		f(0, 0, n)
		return
	}
	// Several chunks per worker balance uneven cores; chunks are taken in
	// order so neighbouring rows stay on one core.
	chunk := max(grain, (n+4*workers-1)/(4*workers))
	e.workers().run(n, chunk, f)
}

// workers returns the executor's team, started on first use.
func (e *exec) workers() *team {
	if e.team == nil {
		e.team = newTeam(e.threads - 1)
		runtime.AddCleanup(e, func(t *team) { t.stop() }, e.team)
	}
	return e.team
}

// newExec prepares an executor for g with the given weights (by node ID).
func newExec(g *ir.Graph, weights []*weight, threads int) *exec {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	e := &exec{g: g, threads: threads, weights: weights,
		f32: make([][]float32, len(g.Nodes)), i32: make([][]int32, len(g.Nodes)),
		thetas: make([][]float64, len(g.Nodes)), scratch: make([][]float64, threads)}
	for _, n := range g.Nodes {
		switch n.Op {
		case ir.OpRope:
			var factors []float32
			if f := n.Arg(2); f != nil {
				factors = weights[f.ID].vec
			}
			e.thetas[n.ID] = ir.RopeOf(n).Thetas(factors)
		case ir.OpKVWrite:
			l := n.Int("layer")
			for len(e.kvRow) <= l {
				e.kvRow = append(e.kvRow, 0)
			}
			e.kvRow[l] = int(n.Args[0].Shape[1] * n.Args[0].Shape[2])
		}
	}
	return e
}
