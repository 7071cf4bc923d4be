package cpu

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/memra-ai/memra/ir"
)

// The mixture-of-experts ops: the router's choice (topk), its weights
// (moe_weights), the chosen experts' products (moe_matmul) and their
// weighted sum (moe_sum).

// ErrExpert: a router chose an expert the weight does not have.
var ErrExpert = errors.New("cpu: expert id out of range")

// outI32 returns n's I32 buffer sized for the running step, reusing memory.
func (e *exec) outI32(n *ir.Node) []int32 {
	size := e.numel(n.Shape)
	if cap(e.i32[n.ID]) < size {
		e.i32[n.ID] = make([]int32, size, size+size/4)
	}
	e.i32[n.ID] = e.i32[n.ID][:size]
	return e.i32[n.ID]
}

// above reports whether a ranks before b in topk's order: the larger value
// first (a NaN counting as −∞), equal values by the lower index.
func above(a float32, ia int, b float32, ib int) bool {
	ninf := float32(math.Inf(-1))
	if a != a {
		a = ninf
	}
	if b != b {
		b = ninf
	}
	if a != b {
		return a > b
	}
	return ia < ib
}

func topK(e *exec, n *ir.Node) error {
	x, y := e.in(n, 0), e.outI32(n)
	N, k := int(n.Args[0].Shape[1]), n.Int("k")
	for t := 0; t < len(y)/k; t++ {
		row, ids := x[t*N:(t+1)*N], y[t*k:(t+1)*k]
		// insertion into the k best so far: k is small (2 to 8)
		m := 0
		for i, v := range row {
			if m == k && !above(v, i, row[ids[k-1]], int(ids[k-1])) {
				continue
			}
			j := min(m, k-1)
			for j > 0 && above(v, i, row[ids[j-1]], int(ids[j-1])) {
				ids[j] = ids[j-1]
				j--
			}
			ids[j] = int32(i)
			m = min(m+1, k)
		}
	}
	if e.routes != nil {
		e.routes(slices.Clone(y), k)
	}
	return nil
}

func moeWeights(e *exec, n *ir.Node) error {
	x, ids, y := e.in(n, 0), e.i32[n.Args[1].ID], e.out(n)
	N, k := int(n.Args[0].Shape[1]), int(n.Shape[1])
	norm := n.Bool("norm")
	p := make([]float64, k)
	for t := 0; t < len(y)/k; t++ {
		row := x[t*N : (t+1)*N]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		chosen := 0.0
		for j, id := range ids[t*k : (t+1)*k] {
			if id < 0 || int(id) >= N {
				return fmt.Errorf("%w: token %d chose expert %d of %d", ErrExpert, t, id, N)
			}
			p[j] = math.Exp(float64(row[id])-mx) / sum
			chosen += p[j]
		}
		for j := range p {
			if norm {
				p[j] /= chosen
			}
			y[t*k+j] = float32(p[j])
		}
	}
	return nil
}

// expert returns the rows of expert x of a [E,N,K] weight as a matrix of
// N rows.
func (w *weight) expert(x, N int) *weight {
	return &weight{name: w.name, t: w.t, data: w.data[x*N*w.rowBytes : (x+1)*N*w.rowBytes], rows: N, cols: w.cols, rowBytes: w.rowBytes}
}

// product sets y = x·Wᵀ for M rows of x, as matmul does.
func product(e *exec, w *weight, x, y []float32, M int) {
	if M <= dotPathMaxTokens {
		matmulDot(e, w, x, y, M)
	} else {
		matmulTiled(e, w, x, y, M)
	}
	clearUpper()
}

// moeMatmul runs expert by expert: the rows of the slots (token, choice)
// that chose an expert are gathered and multiplied by its matrix at once,
// so each chosen expert's weights are read once a step.
func moeMatmul(e *exec, n *ir.Node) error {
	x, w, ids, y := e.in(n, 0), e.weights[n.Args[1].ID], e.i32[n.Args[2].ID], e.out(n)
	E, N, K := int(n.Args[1].Shape[0]), int(n.Args[1].Shape[1]), w.cols
	k := int(n.Shape[1])
	perSlot := len(n.Args[0].Shape) == 3
	slots := make([][]int, E)
	for s, id := range ids {
		if id < 0 || int(id) >= E {
			return fmt.Errorf("%w: token %d chose expert %d of %d (%s)", ErrExpert, s/k, id, E, w.name)
		}
		slots[id] = append(slots[id], s)
	}
	var xg, yg []float32
	for x0, ss := range slots {
		if len(ss) == 0 {
			continue
		}
		xg, yg = xg[:0], yg[:0]
		for _, s := range ss {
			r := s / k
			if perSlot {
				r = s
			}
			xg = append(xg, x[r*K:(r+1)*K]...)
		}
		yg = slices.Grow(yg, len(ss)*N)[:len(ss)*N]
		clear(yg)
		product(e, w.expert(x0, N), xg, yg, len(ss))
		for i, s := range ss {
			copy(y[s*N:(s+1)*N], yg[i*N:(i+1)*N])
		}
	}
	return nil
}

func moeSum(e *exec, n *ir.Node) error {
	x, w, y := e.in(n, 0), e.in(n, 1), e.out(n)
	k, N := int(n.Args[0].Shape[1]), int(n.Shape[1])
	for t := 0; t < len(y)/N; t++ {
		clearUpper()
		yr := y[t*N : (t+1)*N]
		for i := range yr {
			yr[i] = 0
		}
		for j := 0; j < k; j++ {
			wj, xr := w[t*k+j], x[(t*k+j)*N:(t*k+j+1)*N]
			for i, v := range xr {
				yr[i] += wj * v
			}
		}
	}
	return nil
}
