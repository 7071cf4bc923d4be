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

// attentionPlain is the attention op written per (token, head), the loop
// the blocked kernel must reproduce bit for bit.
func attentionPlain(e *exec, q []float32, l, H, Hkv, D int, scale float64, causal bool) []float32 {
	st := &e.step
	y := make([]float32, st.T*H*D)
	for t := 0; t < st.T; t++ {
		s := st.seqOf[t]
		span := st.length[s]
		if causal {
			span = int(st.pos[t]) + 1
		}
		for h := 0; h < H; h++ {
			off := (h / (H / Hkv)) * D
			qh := q[(t*H+h)*D : (t*H+h+1)*D]
			sc := make([]float64, span)
			mx := math.Inf(-1)
			for j := range sc {
				dot := 0.0
				kr, _ := e.kv.row(l, st.tables[s], j)
				for i, qv := range qh {
					dot += float64(qv) * float64(kr[off+i])
				}
				sc[j] = dot * scale
				mx = max(mx, sc[j])
			}
			sum := 0.0
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			acc := make([]float64, D)
			for j, p := range sc {
				_, vr := e.kv.row(l, st.tables[s], j)
				for i := range acc {
					acc[i] += p * float64(vr[off+i])
				}
			}
			for i := range acc {
				y[(t*H+h)*D+i] = float32(acc[i] / sum)
			}
		}
	}
	return y
}

// TestAttentionBlocked checks the blocked attention against the plain loop,
// bit for bit: runs longer than a block, a block shared by two sequences,
// groups of heads that are not a multiple of four, cached history, causal
// and not, one and several workers.
func TestAttentionBlocked(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	for _, sh := range []struct{ H, Hkv, D int }{{6, 2, 8}, {7, 1, 16}, {4, 4, 4}} {
		for _, causal := range []bool{true, false} {
			for _, threads := range []int{1, 3} {
				name := fmt.Sprintf("H=%d Hkv=%d D=%d causal=%v threads=%d", sh.H, sh.Hkv, sh.D, causal, threads)
				h := newHarness(threads)
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
				require.Equal(t, want, h.run(t, n), name)
			}
		}
	}
}

// BenchmarkAttention measures attention at qwen2.5-0.5b's head shape (14
// query heads, 2 KV heads, D = 64): a 128-token prefill, and decode steps of
// 1 and 4 sequences with 1024 cached positions.
func BenchmarkAttention(b *testing.B) {
	r := rand.New(rand.NewPCG(53, 54))
	const H, Hkv, D = 14, 2, 64
	for _, c := range []struct {
		name          string
		counts, start []int
	}{
		{"prefill/T=128", []int{128}, []int{0}},
		{"decode/S=1/ctx=1024", []int{1}, []int{1023}},
		{"decode/S=4/ctx=1024", []int{1, 1, 1, 1}, []int{1023, 1023, 1023, 1023}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := newHarness(runtimeThreads())
			h.e.kvRow = []int{Hkv * D}
			h.setSeqs(c.counts, c.start)
			for s := range c.counts {
				n := c.start[s] * Hkv * D
				h.setHistory(0, s, randVec(r, n, 1), randVec(r, n, 1))
			}
			T := h.e.step.T
			kv := ir.Shape{ir.T, Hkv, D}
			k, v := h.f32(kv, randVec(r, T*Hkv*D, 1)), h.f32(kv, randVec(r, T*Hkv*D, 1))
			cn := h.node(ir.OpKVWrite, ir.Shape{}, dtype.F32, ir.Attrs{"layer": 0}, k, v)
			qs := ir.Shape{ir.T, H, D}
			n := h.node(ir.OpAttention, qs, dtype.F32, ir.Attrs{"scale": 0.125, "causal": true}, h.f32(qs, randVec(r, T*H*D, 1)), cn)
			require.NoError(b, kernels[ir.OpKVWrite](h.e, cn))
			for b.Loop() {
				if err := kernels[ir.OpAttention](h.e, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
