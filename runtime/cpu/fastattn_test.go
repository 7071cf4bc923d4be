package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestExp32 bounds the fast class's exp against math.Exp over its range
// (relative error ≤ 4e-7 down to e⁻⁸⁷, where float32 turns subnormal) and
// checks its ends: exp32(0) = 1, masked scores give 0.
func TestExp32(t *testing.T) {
	for x := float32(-87); x <= 0; x += 0.001 {
		want := math.Exp(float64(x))
		require.InDelta(t, want, float64(exp32(x)), 4e-7*want, "exp32(%g)", x)
	}
	require.Equal(t, float32(1), exp32(0))
	require.Equal(t, float32(0), exp32(float32(math.Inf(-1))))
	require.Equal(t, float32(0), exp32(-200))
}

// TestFastAttnKernelsNoDiff holds the attention kernels to their portable
// definitions bit for bit: key counts below, at and past a block of four,
// head sizes the kernels take and ones they leave to the portable code,
// strides wider than a head, scores with masked (−∞) entries and a wide
// range, accumulators that do not start at zero.
func TestFastAttnKernelsNoDiff(t *testing.T) {
	if len(fastKernelSets) == 0 {
		t.Skip("no vector kernels on this CPU: the portable definitions run")
	}
	saved := fastActive
	defer func() { fastActive = saved }()
	for i := range fastKernelSets {
		fastActive = &fastKernelSets[i]
		t.Run(fastActive.name, testFastAttnKernels)
	}
}

func testFastAttnKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	vec := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		return v
	}
	for _, D := range []int{16, 64, 128, 40, 8} {
		for _, n := range []int{1, 3, 4, 5, 8, 17, 37} {
			stride := 3*D + 5
			qT, k := vec(attnLanes*D, 1), vec(n*stride, 1)
			want, got := make([]float32, attnLanes*n), make([]float32, attnLanes*n)
			scoresRef(qT, k, stride, n, D, want)
			attnScores(qT, k, stride, n, D, got)
			requireBits(t, want, got, "scores D=%d n=%d", D, n)

			s := vec(attnLanes*n, 30)
			for i := range s {
				if r.IntN(5) == 0 && i >= attnLanes {
					s[i] = float32(math.Inf(-1))
				}
			}
			s2 := append([]float32(nil), s...)
			wsum, gsum := softmaxRef(s, n), attnSoftmax(s2, n)
			requireBits(t, s, s2, "softmax D=%d n=%d", D, n)
			requireBits(t, wsum[:], gsum[:], "softmax sums D=%d n=%d", D, n)

			v, acc := vec(n*stride, 1), vec(attnLanes*D, 1)
			acc2 := append([]float32(nil), acc...)
			weightedRef(s, v, stride, n, D, acc)
			attnWeighted(s, v, stride, n, D, acc2)
			requireBits(t, acc, acc2, "weighted D=%d n=%d", D, n)
		}
	}
}

// TestAttentionFast checks the int8 configuration's attention against the
// plain float64 loop (relative error ≤ 1e-5 of the output's largest value)
// on the shapes of TestAttentionBlocked, and that its outputs do not depend
// on the number of workers or the kernel set (each vector set, the portable
// definitions).
func TestAttentionFast(t *testing.T) {
	saved := fastActive
	defer func() { fastActive = saved }()
	sets := []*fastKernels{nil}
	for i := range fastKernelSets {
		sets = append(sets, &fastKernelSets[i])
	}
	for _, sh := range []struct{ H, Hkv, D int }{{6, 2, 8}, {7, 1, 16}, {4, 4, 4}, {32, 8, 64}, {14, 2, 64}} {
		for _, causal := range []bool{true, false} {
			var first []float32
			for run := range 2 * len(sets) {
				threads := []int{1, 3}[run%2]
				fastActive = sets[run/2]
				name := fmt.Sprintf("H=%d Hkv=%d D=%d causal=%v threads=%d kernels %v", sh.H, sh.Hkv, sh.D, causal, threads, fastActive)
				r := rand.New(rand.NewPCG(uint64(sh.H), uint64(sh.D)))
				h := newHarness(threads)
				h.e.fast = true
				h.e.kvRow = []int{sh.Hkv * sh.D}
				counts, start := []int{attnBlockTokens + 5, 1, 3}, []int{2, 9, 0}
				h.setSeqs(counts, start)
				R := sh.Hkv * sh.D
				for s := range counts {
					h.setHistory(0, s, randVec(r, start[s]*R, 1), randVec(r, start[s]*R, 1))
				}
				T := h.e.step.T
				kv := ir.Shape{ir.T, ir.Dim(sh.Hkv), ir.Dim(sh.D)}
				k, v := h.f32(kv, randVec(r, T*R, 1)), h.f32(kv, randVec(r, T*R, 1))
				c := h.node(ir.OpKVWrite, ir.Shape{}, dtype.F32, ir.Attrs{"layer": 0}, k, v)
				qs := ir.Shape{ir.T, ir.Dim(sh.H), ir.Dim(sh.D)}
				qv := randVec(r, T*sh.H*sh.D, 2)
				scale := 1 / math.Sqrt(float64(sh.D))
				n := h.node(ir.OpAttention, qs, dtype.F32, ir.Attrs{"scale": scale, "causal": causal}, h.f32(qs, qv), c)
				require.NoError(t, kernels[ir.OpKVWrite](h.e, c))
				want := attentionPlain(h.e, qv, 0, sh.H, sh.Hkv, sh.D, scale, causal)
				got := h.run(t, n)
				requireRel(t, want, got, 1e-5, name)
				if first == nil {
					first = got
				} else {
					requireBits(t, first, got, "%s", name)
				}
			}
		}
	}
}

// TestSwiGLUFast holds each SwiGLU kernel to swigluRef bit for bit
// (lengths with and without a tail, negative, positive, large and zero
// inputs) and swigluRef to silu(g)·u in float64 within 1e-6 relative.
func TestSwiGLUFast(t *testing.T) {
	saved := fastActive
	defer func() { fastActive = saved }()
	sets := []*fastKernels{nil}
	for i := range fastKernelSets {
		sets = append(sets, &fastKernelSets[i])
	}
	for _, ks := range sets {
		fastActive = ks
		testSwiGLU(t)
	}
}

func testSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	for _, n := range []int{1, 15, 16, 33, 1000} {
		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(12)-4))
			u[i] = float32(r.NormFloat64())
		}
		g[0] = 0
		if n > 3 {
			g[1], g[2], g[3] = 120, -120, float32(math.Copysign(0, -1))
		}
		want, got := make([]float32, n), make([]float32, n)
		swigluRef(g, u, want)
		swigluFast(g, u, got)
		requireBits(t, want, got, "n=%d kernels %v", n, fastActive)
		for i := range g {
			x := float64(g[i])
			ref := x / (1 + math.Exp(-x)) * float64(u[i])
			require.InDelta(t, ref, float64(want[i]), 1e-6*math.Abs(ref)+1e-30, "g=%g u=%g", g[i], u[i])
		}
	}
}

// The int8 configuration's attention keeps a soft cap and a sliding
// window (Gemma): with either, it computes what the reference path does,
// bit for bit; without, the fast kernels run (a different sum order).
func TestAttentionFastKeepsCapAndWindow(t *testing.T) {
	const H, Hkv, D = 4, 2, 16
	run := func(fast bool, attrs ir.Attrs) []float32 {
		r := rand.New(rand.NewPCG(5, 6))
		h := newHarness(2)
		h.e.fast = fast
		h.e.kvRow = []int{Hkv * D}
		counts, start := []int{attnBlockTokens + 5, 3}, []int{40, 0}
		h.setSeqs(counts, start)
		R := Hkv * D
		for s := range counts {
			h.setHistory(0, s, randVec(r, start[s]*R, 1), randVec(r, start[s]*R, 1))
		}
		T := h.e.step.T
		kv := ir.Shape{ir.T, ir.Dim(Hkv), ir.Dim(D)}
		k, v := h.f32(kv, randVec(r, T*R, 1)), h.f32(kv, randVec(r, T*R, 1))
		c := h.node(ir.OpKVWrite, ir.Shape{}, dtype.F32, ir.Attrs{"layer": 0}, k, v)
		qs := ir.Shape{ir.T, ir.Dim(H), ir.Dim(D)}
		a := ir.Attrs{"scale": 1 / math.Sqrt(D), "causal": true}
		for key, val := range attrs {
			a[key] = val
		}
		n := h.node(ir.OpAttention, qs, dtype.F32, a, h.f32(qs, randVec(r, T*H*D, 3)), c)
		require.NoError(t, kernels[ir.OpKVWrite](h.e, c))
		return h.run(t, n)
	}
	for name, attrs := range map[string]ir.Attrs{"softcap": {"softcap": 2.0}, "window": {"window": 8}, "both": {"softcap": 2.0, "window": 8}} {
		requireBits(t, run(false, attrs), run(true, attrs), "%s", name)
		require.NotEqual(t, run(false, nil), run(false, attrs), "%s changes the output", name)
	}
	requireRel(t, run(false, nil), run(true, nil), 1e-5, "plain")
}
