package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

// TestMatmulPaths checks both product paths (fused Dot for a few tokens,
// decoded tiles for more) on ragged shapes against the float64 reference:
// N not a multiple of the tile or of the 4-row micro-kernel, M odd and
// beyond one token block, K with a tail for the float32 kernels.
func TestMatmulPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	cases := []struct {
		typ     dtype.Type
		M, K, N int
	}{
		{dtype.F32, 1, 20, 5},
		{dtype.F32, 3, 21, 13},
		{dtype.F32, tileTokens + 3, 37, tileRows + 1},
		{dtype.F16, 5, 256, 33},
		{dtype.Q8_0, 2, 96, 9},
		{dtype.Q8_0, 3, 96, 9},
		{dtype.Q8_0, 2*tileTokens + 1, 256, 2*tileRows + 3},
		{dtype.Q4_K, 1, 512, 7},
		{dtype.Q4_K, tileTokens - 1, 512, 19},
		{dtype.Q6_K, 9, 256, 4},
	}
	for _, c := range cases {
		for _, threads := range []int{1, 3} {
			name := fmt.Sprintf("%v/M=%d/K=%d/N=%d/threads=%d", c.typ, c.M, c.K, c.N, threads)
			h := newHarness(threads)
			w, wr := mkWeight(t, c.typ, c.N, c.K, randVec(r, c.N*c.K, 1))
			xv := randVec(r, c.M*c.K, 2)
			x := h.f32(ir.Shape{ir.T, ir.Dim(c.K)}, xv)
			n := h.node(ir.OpMatmul, ir.Shape{ir.T, ir.Dim(c.N)}, dtype.F32, nil, x, h.weight(w))
			h.e.step.T = c.M
			ref := make([]float64, c.M*c.N)
			for m := 0; m < c.M; m++ {
				for o := 0; o < c.N; o++ {
					for k := 0; k < c.K; k++ {
						ref[m*c.N+o] += float64(xv[m*c.K+k]) * wr[o*c.K+k]
					}
				}
			}
			tol := relTol[c.typ]
			if c.typ == dtype.F32 {
				tol = 1e-6
			}
			requireClose(t, ref, h.run(t, n), tol, name)
		}
	}
}

// TestGemmKernels checks the float32 micro-kernels, vector and scalar, on
// every length up to a few vectors (all tails) against float64 sums.
func TestGemmKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for K := 1; K <= 67; K++ {
		w, x0, x1 := randVec(r, 4*K, 1), randVec(r, K, 1), randVec(r, K, 1)
		var ref [8]float64
		var mag float64
		for i := range 4 {
			for k := 0; k < K; k++ {
				ref[2*i] += float64(w[i*K+k]) * float64(x0[k])
				ref[2*i+1] += float64(w[i*K+k]) * float64(x1[k])
				mag += abs64(float64(w[i*K+k]) * float64(x0[k]))
			}
		}
		for _, f := range []struct {
			name string
			fn   func(w, x0, x1 []float32, o *[8]float32)
		}{{"dot4x2", dot4x2}, {"dot4x2Scalar", dot4x2Scalar}} {
			var o [8]float32
			f.fn(w, x0, x1, &o)
			for i := range o {
				require.InDelta(t, ref[i], float64(o[i]), 1e-6*mag, "%s K=%d out %d", f.name, K, i)
			}
		}
		for _, f := range []func(a, b []float32) float32{dotF32, dotF32Scalar} {
			require.InDelta(t, ref[0], float64(f(w[:K], x0)), 1e-6*mag, "dotF32 K=%d", K)
		}
	}
}

func abs64(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// TestMatmulAllocatesLittle: after a first call has sized the buffers, the
// tiled product allocates only the work closure it hands to exec.parallel
// (tile buffers are reused).
func TestMatmulAllocatesLittle(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	h := newHarness(1)
	const M, K, N = 40, 256, 24
	w, _ := mkWeight(t, dtype.Q8_0, N, K, randVec(r, N*K, 1))
	x := h.f32(ir.Shape{ir.T, K}, randVec(r, M*K, 1))
	n := h.node(ir.OpMatmul, ir.Shape{ir.T, N}, dtype.F32, nil, x, h.weight(w))
	h.e.step.T = M
	h.run(t, n)
	require.LessOrEqual(t, testing.AllocsPerRun(5, func() { h.run(t, n) }), 1.0)
}

// TestDecodeBatch checks that S sequences decoding one token each in one
// step get the logits each gets alone (the product reads each weight row
// once for all S).
func TestDecodeBatch(t *testing.T) {
	for _, typ := range []dtype.Type{dtype.Q8_0, dtype.Q4_K} {
		b, err := NewFromSource(smallQwen2, randomModel(t, smallQwen2, typ, 5), Options{Threads: 2})
		require.NoError(t, err)
		ctx := context.Background()
		prompts := [][]int32{{1, 5, 9}, {2, 44}, {7}, {8, 8, 8, 8}}
		var alone [][]float32
		for s, p := range prompts {
			res, err := b.Step(ctx, []runtime.SeqStep{{Seq: runtime.SeqID(s), Tokens: p}})
			require.NoError(t, err)
			_ = res
			res, err = b.Step(ctx, []runtime.SeqStep{{Seq: runtime.SeqID(s), Pos: len(p), Tokens: []int32{11}, Logits: true}})
			require.NoError(t, err)
			alone = append(alone, append([]float32(nil), res[0]...))
		}
		for S := 2; S <= len(prompts); S++ {
			var batch []runtime.SeqStep
			for s, p := range prompts[:S] {
				batch = append(batch, runtime.SeqStep{Seq: runtime.SeqID(s), Pos: len(p), Tokens: []int32{11}, Logits: true})
			}
			res, err := b.Step(ctx, batch)
			require.NoError(t, err)
			for s := range S {
				requireRel(t, alone[s], res[s], 1e-5, fmt.Sprintf("%v S=%d seq %d", typ, S, s))
			}
		}
	}
}
