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

// TestGemmaElementwise checks geglu, scale and softcap against their
// definitions in float64.
func TestGemmaElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	gelu := func(g float64) float64 {
		return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*math.Pow(g, 3))))
	}
	cases := []struct {
		name  string
		op    ir.Op
		attrs ir.Attrs
		ref   func(x, y float64) float64
	}{
		{"geglu", ir.OpGeGLU, nil, func(x, y float64) float64 { return gelu(x) * y }},
		{"scale √3584", ir.OpScale, ir.Attrs{"factor": float64(float32(math.Sqrt(3584)))}, func(x, _ float64) float64 { return x * float64(float32(math.Sqrt(3584))) }},
		{"scale -0.5", ir.OpScale, ir.Attrs{"factor": -0.5}, func(x, _ float64) float64 { return -0.5 * x }},
		{"softcap 30", ir.OpSoftcap, ir.Attrs{"cap": 30.0}, func(x, _ float64) float64 { return 30 * math.Tanh(x/30) }},
		{"softcap 2", ir.OpSoftcap, ir.Attrs{"cap": 2.0}, func(x, _ float64) float64 { return 2 * math.Tanh(x/2) }},
	}
	for _, c := range cases {
		for _, shape := range []ir.Shape{{ir.T, 7}, {ir.T, 300}, {ir.S, 4, 16}} {
			h := newHarness(1)
			h.e.step.T, h.e.step.S = 5, 3
			size := h.e.numel(shape)
			// wide inputs: GELU's negative tail and tanh's saturation both show
			xv, yv := randVec(r, size, 8), randVec(r, size, 3)
			args := []*ir.Node{h.f32(shape, xv)}
			if c.op == ir.OpGeGLU {
				args = append(args, h.f32(shape, yv))
			}
			n := h.node(c.op, shape, dtype.F32, c.attrs, args...)
			ref := make([]float64, size)
			for i := range ref {
				ref[i] = c.ref(float64(xv[i]), float64(yv[i]))
			}
			requireClose(t, ref, h.run(t, n), 1e-6, c.name)
		}
	}
}

// attnCase is an attention step over two sequences, the second with
// cached history: the harness, the node and the values the reference needs.
type attnCase struct {
	h          *harness
	n          *ir.Node
	q          []float32
	seqK, seqV [][]float32
}

// newAttnCase lays out counts tokens per sequence starting at start, with
// random history, for an attention node of attrs.
func newAttnCase(t *testing.T, r *rand.Rand, H, Hkv, D, threads int, counts, start []int, attrs ir.Attrs) *attnCase {
	h := newHarness(threads)
	h.e.kvRow = []int{0, Hkv * D}
	h.setSeqs(counts, start)
	T, R := h.e.step.T, Hkv*D
	c := &attnCase{h: h}
	var hist [][2][]float32
	for s := range counts {
		hk, hv := randVec(r, start[s]*R, 1), randVec(r, start[s]*R, 1)
		h.setHistory(1, s, hk, hv)
		hist = append(hist, [2][]float32{hk, hv})
	}
	kv := ir.Shape{ir.T, ir.Dim(Hkv), ir.Dim(D)}
	kvals, vvals := randVec(r, T*R, 1), randVec(r, T*R, 1)
	k, v := h.f32(kv, kvals), h.f32(kv, vvals)
	cn := h.node(ir.OpKVWrite, ir.Shape{}, dtype.F32, ir.Attrs{"layer": 1}, k, v)
	require.NoError(t, kernels[ir.OpKVWrite](h.e, cn))
	qs := ir.Shape{ir.T, ir.Dim(H), ir.Dim(D)}
	c.q = randVec(r, T*H*D, 3)
	c.n = h.node(ir.OpAttention, qs, dtype.F32, attrs, h.f32(qs, c.q), cn)
	t0 := 0
	for s, n := range counts {
		c.seqK = append(c.seqK, append(append([]float32{}, hist[s][0]...), kvals[t0*R:(t0+n)*R]...))
		c.seqV = append(c.seqV, append(append([]float32{}, hist[s][1]...), vvals[t0*R:(t0+n)*R]...))
		t0 += n
	}
	return c
}

// ref is the attention node's definition in float64: causal, with the
// node's window and soft cap.
func (c *attnCase) ref(H, Hkv, D int) []float64 {
	st := &c.h.e.step
	scale, cap, win := c.n.Float("scale"), ir.AttnSoftcap(c.n), ir.AttnWindow(c.n)
	R := Hkv * D
	out := make([]float64, st.T*H*D)
	for ti := 0; ti < st.T; ti++ {
		s, p := st.seqOf[ti], int(st.pos[ti])
		lo := 0
		if win > 0 {
			lo = max(0, p-win+1)
		}
		for hh := 0; hh < H; hh++ {
			g := hh / (H / Hkv)
			sc := make([]float64, p+1-lo)
			mx := math.Inf(-1)
			for j := lo; j <= p; j++ {
				a := 0.0
				for i := 0; i < D; i++ {
					a += float64(c.q[(ti*H+hh)*D+i]) * float64(c.seqK[s][j*R+g*D+i])
				}
				a *= scale
				if cap > 0 {
					a = cap * math.Tanh(a/cap)
				}
				sc[j-lo] = a
				mx = math.Max(mx, a)
			}
			sum := 0.0
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			for j := range sc {
				for i := 0; i < D; i++ {
					out[(ti*H+hh)*D+i] += sc[j] / sum * float64(c.seqV[s][(j+lo)*R+g*D+i])
				}
			}
		}
	}
	return out
}

// TestAttentionWindowSoftcap checks attention with a sliding window and a
// soft cap against the definition, over two sequences (one with 19 cached
// positions), GQA, prefill runs longer than a work item and single tokens.
func TestAttentionWindowSoftcap(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for _, sh := range []struct{ H, Hkv, D int }{{4, 2, 8}, {8, 1, 16}, {3, 3, 4}} {
		for _, attrs := range []ir.Attrs{
			{"softcap": 1.5},
			{"window": 1},
			{"window": 5},
			{"window": 5, "softcap": 50.0},
			{"window": 13, "softcap": 0.75},
		} {
			for _, threads := range []int{1, 3} {
				a := ir.Attrs{"scale": 1 / math.Sqrt(float64(sh.D)), "causal": true}
				for k, v := range attrs {
					a[k] = v
				}
				name := fmt.Sprintf("H=%d/%d D=%d %v threads=%d", sh.H, sh.Hkv, sh.D, attrs, threads)
				c := newAttnCase(t, r, sh.H, sh.Hkv, sh.D, threads, []int{11, 1}, []int{0, 19}, a)
				requireClose(t, c.ref(sh.H, sh.Hkv, sh.D), c.h.run(t, c.n), 1e-6, name)
			}
		}
	}
}

// A window no shorter than the sequence is full attention, bit for bit;
// one that is shorter changes the output of the tokens past it, and only
// theirs.
func TestAttentionWindowEqualsFullWithin(t *testing.T) {
	const H, Hkv, D = 4, 2, 16
	counts, start := []int{9, 2}, []int{0, 6}
	run := func(win int) []float32 {
		r := rand.New(rand.NewPCG(35, 36)) // the same inputs each time
		a := ir.Attrs{"scale": 0.25, "causal": true}
		if win > 0 {
			a["window"] = win
		}
		c := newAttnCase(t, r, H, Hkv, D, 2, counts, start, a)
		return append([]float32(nil), c.h.run(t, c.n)...)
	}
	full := run(0)
	require.Equal(t, full, run(9), "window = the longest sequence")
	require.Equal(t, full, run(4096), "window past the sequences")
	short := run(4)
	// token ti sits at position pos; past the window (pos ≥ 4) it differs
	pos := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 6, 7}
	for ti, p := range pos {
		a, b := full[ti*H*D:(ti+1)*H*D], short[ti*H*D:(ti+1)*H*D]
		if p < 4 {
			require.Equal(t, a, b, "token %d at %d sees all its keys", ti, p)
		} else {
			require.NotEqual(t, a, b, "token %d at %d sees only its last 4 keys", ti, p)
		}
	}
}
