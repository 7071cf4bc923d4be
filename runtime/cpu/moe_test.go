package cpu

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// i32 adds an I32 value node.
func (h *harness) i32(shape ir.Shape, v []int32) *ir.Node {
	n := h.node(ir.OpTokens, shape, dtype.I32, nil)
	h.e.i32[n.ID] = v
	return n
}

// refTopK ranks a row's indices by value (NaN as −∞), ties by index, with
// a plain sort: the order topk's doc states.
func refTopK(row []float32, k int) []int32 {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) float64 {
		if math.IsNaN(float64(row[i])) {
			return math.Inf(-1)
		}
		return float64(row[i])
	}
	sort.SliceStable(idx, func(a, b int) bool { return key(idx[a]) > key(idx[b]) })
	out := make([]int32, k)
	for j := range out {
		out[j] = int32(idx[j])
	}
	return out
}

func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		N, k int
		rows [][]float32
	}{
		{8, 2, [][]float32{{1, 5, 5, 2, -1, 5, 0, 3}, {nan, 0, -inf, nan, 1, 1, 0, -inf}, {0, 0, 0, 0, 0, 0, 0, 0}}},
		{4, 4, [][]float32{{nan, 2, inf, 2}, {-inf, nan, 0, -inf}}},
		{128, 8, nil},
		{60, 1, nil},
	} {
		rows := c.rows
		for range 5 {
			rows = append(rows, randVec(r, c.N, 3))
		}
		rows[len(rows)-1][c.N-1] = rows[len(rows)-1][0] // a tie among random values
		h := newHarness(1)
		var xv []float32
		for _, row := range rows {
			xv = append(xv, row...)
		}
		x := h.f32(ir.Shape{ir.T, ir.Dim(c.N)}, xv)
		n := h.node(ir.OpTopK, ir.Shape{ir.T, ir.Dim(c.k)}, dtype.I32, ir.Attrs{"k": c.k}, x)
		h.e.step.T = len(rows)
		require.NoError(t, kernels[n.Op](h.e, n))
		for i, row := range rows {
			require.Equal(t, refTopK(row, c.k), h.e.i32[n.ID][i*c.k:(i+1)*c.k], "N %d k %d row %d", c.N, c.k, i)
		}
	}
}

func TestMoEWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, norm := range []bool{false, true} {
		const T, N, k = 5, 16, 3
		h := newHarness(1)
		xv := randVec(r, T*N, 8)
		var ids []int32
		for tk := 0; tk < T; tk++ {
			ids = append(ids, refTopK(xv[tk*N:(tk+1)*N], k)...)
		}
		ids[2] = 0 // any chosen expert is weighted, not only the largest
		x := h.f32(ir.Shape{ir.T, N}, xv)
		in := h.i32(ir.Shape{ir.T, k}, ids)
		n := h.node(ir.OpMoEWeights, ir.Shape{ir.T, k}, dtype.F32, ir.Attrs{"norm": norm}, x, in)
		h.e.step.T = T
		ref := make([]float64, T*k)
		for tk := 0; tk < T; tk++ {
			row := xv[tk*N : (tk+1)*N]
			den, chosen := 0.0, 0.0
			for _, v := range row {
				den += math.Exp(float64(v))
			}
			for j := 0; j < k; j++ {
				ref[tk*k+j] = math.Exp(float64(row[ids[tk*k+j]])) / den
				chosen += ref[tk*k+j]
			}
			for j := 0; norm && j < k; j++ {
				ref[tk*k+j] /= chosen
			}
		}
		requireClose(t, ref, h.run(t, n), 1e-6, "moe_weights")
		if norm {
			// a softmax over the chosen logits alone (Mixtral's order) is the same
			for tk := 0; tk < T; tk++ {
				den := 0.0
				for j := 0; j < k; j++ {
					den += math.Exp(float64(xv[tk*N+int(ids[tk*k+j])]))
				}
				for j := 0; j < k; j++ {
					require.InDelta(t, math.Exp(float64(xv[tk*N+int(ids[tk*k+j])]))/den, h.e.f32[n.ID][tk*k+j], 1e-6)
				}
			}
		}
		h.e.i32[in.ID][4] = N
		require.ErrorIs(t, kernels[n.Op](h.e, n), ErrExpert)
	}
}

func TestMoEMatmul(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, typ := range []dtype.Type{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0, dtype.Q4_K, dtype.Q6_K} {
		for _, sh := range []struct{ T, E, k, N, K int }{{1, 8, 2, 33, 256}, {3, 5, 2, 64, 512}, {9, 16, 4, 40, 256}} {
			for _, perSlot := range []bool{false, true} {
				for _, threads := range []int{1, 3} {
					h := newHarness(threads)
					w, wr := mkWeight(t, typ, sh.E*sh.N, sh.K, randVec(r, sh.E*sh.N*sh.K, 1))
					rows := sh.T
					xs := ir.Shape{ir.T, ir.Dim(sh.K)}
					if perSlot {
						rows = sh.T * sh.k
						xs = ir.Shape{ir.T, ir.Dim(sh.k), ir.Dim(sh.K)}
					}
					xv := randVec(r, rows*sh.K, 2)
					ids := make([]int32, sh.T*sh.k)
					for tk := 0; tk < sh.T; tk++ {
						for j, e := range r.Perm(sh.E)[:sh.k] {
							ids[tk*sh.k+j] = int32(e)
						}
					}
					x := h.f32(xs, xv)
					wn := h.weight(w)
					wn.Shape = ir.Shape{ir.Dim(sh.E), ir.Dim(sh.N), ir.Dim(sh.K)}
					in := h.i32(ir.Shape{ir.T, ir.Dim(sh.k)}, ids)
					n := h.node(ir.OpMoEMatmul, ir.Shape{ir.T, ir.Dim(sh.k), ir.Dim(sh.N)}, dtype.F32, nil, x, wn, in)
					h.e.step.T = sh.T
					ref := make([]float64, sh.T*sh.k*sh.N)
					for s, e := range ids {
						xr := xv[(s/sh.k)*sh.K:]
						if perSlot {
							xr = xv[s*sh.K:]
						}
						for o := 0; o < sh.N; o++ {
							for c := 0; c < sh.K; c++ {
								ref[s*sh.N+o] += float64(xr[c]) * wr[(int(e)*sh.N+o)*sh.K+c]
							}
						}
					}
					requireClose(t, ref, h.run(t, n), relTol[typ], typ.String())
					h.e.i32[in.ID][len(ids)-1] = int32(sh.E)
					require.ErrorIs(t, kernels[n.Op](h.e, n), ErrExpert)
				}
			}
		}
	}
}

func TestMoESum(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const T, k, N = 4, 3, 40
	h := newHarness(1)
	xv, wv := randVec(r, T*k*N, 2), randVec(r, T*k, 1)
	x := h.f32(ir.Shape{ir.T, k, N}, xv)
	w := h.f32(ir.Shape{ir.T, k}, wv)
	n := h.node(ir.OpMoESum, ir.Shape{ir.T, N}, dtype.F32, nil, x, w)
	h.e.step.T = T
	ref := make([]float64, T*N)
	for tk := 0; tk < T; tk++ {
		for j := 0; j < k; j++ {
			for i := 0; i < N; i++ {
				ref[tk*N+i] += float64(wv[tk*k+j]) * float64(xv[(tk*k+j)*N+i])
			}
		}
	}
	requireClose(t, ref, h.run(t, n), 1e-6, "moe_sum")
}
