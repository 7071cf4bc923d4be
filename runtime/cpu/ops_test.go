package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestKernelTable fails when an op has no CPU implementation.
func TestKernelTable(t *testing.T) {
	for o := ir.Op(1); o < ir.NumOps; o++ {
		require.NotNil(t, kernels[o], "op %v has no entry in the CPU kernel table", o)
	}
}

// Tolerances of the no-diff tests: the relative error ‖out−ref‖/‖ref‖ the
// float32 kernels may show against the float64 references, per weight dtype
// (quantised rows are dequantised exactly by the reference, so the only error
// is float32 accumulation order).
var relTol = map[dtype.Type]float64{
	dtype.F32: 1e-6, dtype.F16: 1e-6, dtype.BF16: 1e-6, dtype.Q8_0: 1e-5, dtype.Q4_K: 1e-5, dtype.Q6_K: 1e-5,
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((r.Float64()*2 - 1) * scale)
		if v[i] == 0 {
			v[i] = 1e-3
		}
	}
	return v
}

// mkWeight stores vals ([rows][cols]) as type t; ref is the exact
// dequantised values the reference computes with.
func mkWeight(t *testing.T, typ dtype.Type, rows, cols int, vals []float32) (w *weight, ref []float64) {
	data, err := dtype.Quantize(typ, vals)
	require.NoError(t, err)
	rb, err := typ.RowBytes(cols)
	require.NoError(t, err)
	deq := make([]float32, len(vals))
	require.NoError(t, dtype.Dequantize(typ, data, deq))
	ref = make([]float64, len(deq))
	for i, v := range deq {
		ref[i] = float64(v)
	}
	w = &weight{name: "w", t: typ, data: data, rows: rows, cols: cols, rowBytes: rb}
	if rows == 1 {
		w.vec = deq
	}
	return w, ref
}

// harness is an exec over hand-made nodes: node i is args[i], the node under
// test is last.
type harness struct {
	e     *exec
	nodes []*ir.Node
}

func newHarness(threads int) *harness {
	return &harness{e: &exec{threads: threads, scratch: make([][]float64, threads)}}
}

func (h *harness) node(op ir.Op, shape ir.Shape, typ dtype.Type, attrs ir.Attrs, args ...*ir.Node) *ir.Node {
	n := &ir.Node{ID: len(h.nodes), Op: op, Shape: shape, Type: typ, Attrs: attrs, Args: args}
	h.nodes = append(h.nodes, n)
	h.e.f32 = append(h.e.f32, nil)
	h.e.i32 = append(h.e.i32, nil)
	h.e.weights = append(h.e.weights, nil)
	h.e.thetas = append(h.e.thetas, nil)
	return n
}

func (h *harness) f32(shape ir.Shape, v []float32) *ir.Node {
	n := h.node(ir.OpAdd, shape, dtype.F32, nil)
	h.e.f32[n.ID] = v
	return n
}

func (h *harness) weight(w *weight) *ir.Node {
	n := h.node(ir.OpWeight, nil, w.t, nil)
	h.e.weights[n.ID] = w
	return n
}

// harnessPage is the KV page of the harness: small, so that a sequence
// spans several pages.
const harnessPage = 4

// setSeqs lays out a step of sequences with the given token counts, each
// starting at position start[i], their caches in pages of kvRow's layers
// scattered over a pool (neither consecutive nor in order).
func (h *harness) setSeqs(counts, start []int) {
	st := &h.e.step
	*st = layout{}
	need := 0
	for s, c := range counts {
		need += (start[s] + c + harnessPage - 1) / harnessPage
	}
	perm := rand.New(rand.NewPCG(uint64(need), 7)).Perm(need + 5)
	h.e.kv = newPagedCache(h.e.kvRow, need+5, harnessPage)
	for s, c := range counts {
		for i := 0; i < c; i++ {
			st.seqOf = append(st.seqOf, s)
			st.pos = append(st.pos, int32(start[s]+i))
		}
		st.last = append(st.last, len(st.seqOf)-1)
		st.length = append(st.length, start[s]+c)
		var pt []int32
		for range (start[s] + c + harnessPage - 1) / harnessPage {
			pt = append(pt, int32(perm[0]))
			perm = perm[1:]
		}
		st.tables = append(st.tables, pt)
	}
	st.T, st.S = len(st.seqOf), len(counts)
}

// setHistory writes rows k and v (positions 0, 1, … of kvRow[l] floats
// each) into layer l of sequence s's pages.
func (h *harness) setHistory(l, s int, k, v []float32) {
	R := h.e.kvRow[l]
	for j := 0; j*R < len(k); j++ {
		kr, vr := h.e.kv.row(l, h.e.step.tables[s], j)
		copy(kr, k[j*R:(j+1)*R])
		copy(vr, v[j*R:(j+1)*R])
	}
}

func (h *harness) run(t *testing.T, n *ir.Node) []float32 {
	require.NoError(t, kernels[n.Op](h.e, n))
	return h.e.f32[n.ID]
}

func requireClose(t *testing.T, ref []float64, got []float32, tol float64, msg string) {
	require.Equal(t, len(ref), len(got), msg)
	num, den := 0.0, 0.0
	for i := range ref {
		d := float64(got[i]) - ref[i]
		num += d * d
		den += ref[i] * ref[i]
	}
	require.Greater(t, den, 0.0, "%s: reference is all zeros", msg)
	require.LessOrEqual(t, math.Sqrt(num/den), tol, "%s: relative error", msg)
}

func TestMatmul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []dtype.Type{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0, dtype.Q4_K, dtype.Q6_K} {
		for _, sh := range []struct{ M, K, N int }{{1, 256, 8}, {3, 256, 33}, {7, 512, 64}, {2, 768, 300}} {
			for _, threads := range []int{1, 3} {
				h := newHarness(threads)
				w, wr := mkWeight(t, typ, sh.N, sh.K, randVec(r, sh.N*sh.K, 1))
				xv := randVec(r, sh.M*sh.K, 2)
				x := h.f32(ir.Shape{ir.T, ir.Dim(sh.K)}, xv)
				n := h.node(ir.OpMatmul, ir.Shape{ir.T, ir.Dim(sh.N)}, dtype.F32, nil, x, h.weight(w))
				h.e.step.T = sh.M
				ref := make([]float64, sh.M*sh.N)
				for m := 0; m < sh.M; m++ {
					for o := 0; o < sh.N; o++ {
						for k := 0; k < sh.K; k++ {
							ref[m*sh.N+o] += float64(xv[m*sh.K+k]) * wr[o*sh.K+k]
						}
					}
				}
				requireClose(t, ref, h.run(t, n), relTol[typ], typ.String())
			}
		}
	}
}

func TestEmbed(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []dtype.Type{dtype.F32, dtype.F16, dtype.Q8_0, dtype.Q4_K} {
		V, E := 11, 256
		h := newHarness(1)
		w, wr := mkWeight(t, typ, V, E, randVec(r, V*E, 1))
		ids := []int32{3, 0, 10, 3}
		idn := h.node(ir.OpTokens, ir.Shape{ir.T}, dtype.I32, nil)
		h.e.i32[idn.ID] = ids
		n := h.node(ir.OpEmbed, ir.Shape{ir.T, ir.Dim(E)}, dtype.F32, nil, h.weight(w), idn)
		h.e.step.T = len(ids)
		var ref []float64
		for _, id := range ids {
			ref = append(ref, wr[int(id)*E:(int(id)+1)*E]...)
		}
		requireClose(t, ref, h.run(t, n), 0, typ.String())

		h.e.i32[idn.ID] = []int32{1, int32(V)}
		h.e.step.T = 2
		require.ErrorIs(t, kernels[ir.OpEmbed](h.e, n), ErrToken)
	}
}

func TestElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	silu := func(x float64) float64 { return x / (1 + math.Exp(-x)) }
	cases := []struct {
		op  ir.Op
		ref func(x, y float64) float64
	}{
		{ir.OpSiLU, func(x, _ float64) float64 { return silu(x) }},
		{ir.OpAdd, func(x, y float64) float64 { return x + y }},
		{ir.OpMul, func(x, y float64) float64 { return x * y }},
		{ir.OpSwiGLU, func(x, y float64) float64 { return silu(x) * y }},
	}
	for _, c := range cases {
		for _, shape := range []ir.Shape{{ir.T, 7}, {ir.T, 64}, {ir.T, 4, 16}} {
			h := newHarness(1)
			h.e.step.T = 5
			size := h.e.numel(shape)
			xv, yv := randVec(r, size, 6), randVec(r, size, 3)
			args := []*ir.Node{h.f32(shape, xv)}
			if c.op != ir.OpSiLU {
				args = append(args, h.f32(shape, yv))
			}
			n := h.node(c.op, shape, dtype.F32, nil, args...)
			ref := make([]float64, size)
			for i := range ref {
				ref[i] = c.ref(float64(xv[i]), float64(yv[i]))
			}
			requireClose(t, ref, h.run(t, n), 1e-6, c.op.String())
		}
	}
}

func TestBiasAddAndNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []dtype.Type{dtype.F32, dtype.F16, dtype.BF16} {
		for _, shape := range []ir.Shape{{ir.T, 32}, {ir.T, 4, 8}, {ir.S, 96}} {
			h := newHarness(1)
			h.e.step.T, h.e.step.S = 3, 2
			D := int(shape.Last())
			size := h.e.numel(shape)
			xv := randVec(r, size, 4)
			w, wr := mkWeight(t, typ, 1, D, randVec(r, D, 2))
			x := h.f32(shape, xv)
			wn := h.weight(w)
			norm := h.node(ir.OpRMSNorm, shape, dtype.F32, ir.Attrs{"eps": 1e-5}, x, wn)
			ref := make([]float64, size)
			for row := 0; row < size/D; row++ {
				ss := 0.0
				for i := 0; i < D; i++ {
					ss += float64(xv[row*D+i]) * float64(xv[row*D+i])
				}
				s := 1 / math.Sqrt(ss/float64(D)+1e-5)
				for i := 0; i < D; i++ {
					ref[row*D+i] = float64(xv[row*D+i]) * s * wr[i]
				}
			}
			requireClose(t, ref, h.run(t, norm), 1e-6, "rms_norm "+typ.String())
			if len(shape) != 2 {
				continue
			}
			bias := h.node(ir.OpBiasAdd, shape, dtype.F32, nil, x, wn)
			for i := range ref {
				ref[i] = float64(xv[i]) + wr[i%D]
			}
			requireClose(t, ref, h.run(t, bias), 1e-7, "bias_add "+typ.String())
		}
	}
}

func TestRope(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	base := ir.Attrs{"style": "interleaved", "dims": 16, "base": 10000.0, "scaling": "none", "factor": 1.0, "orig_ctx": 0, "low_freq": 0.0, "high_freq": 0.0}
	with := func(kv ...any) ir.Attrs {
		a := ir.Attrs{}
		for k, v := range base {
			a[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			a[kv[i].(string)] = kv[i+1]
		}
		return a
	}
	cases := []struct {
		name    string
		attrs   ir.Attrs
		factors []float32
	}{
		{"interleaved", with(), nil},
		{"half", with("style", "half"), nil},
		{"partial half", with("style", "half", "dims", 8), nil},
		{"linear", with("scaling", "linear", "factor", 4.0), nil},
		{"llama3", with("scaling", "llama3", "factor", 8.0, "orig_ctx", 64, "low_freq", 1.0, "high_freq", 4.0, "base", 500000.0), nil},
		{"yarn", with("style", "half", "scaling", "yarn", "factor", 4.0, "orig_ctx", 4096, "low_freq", 1.0, "high_freq", 32.0), nil},
		{"freq factors", with("style", "half"), randVec(r, 8, 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			H, D := 3, 16
			pos := []int32{0, 1, 7, 300, 4095}
			h := newHarness(1)
			h.e.step.T = len(pos)
			xv := randVec(r, len(pos)*H*D, 1)
			x := h.f32(ir.Shape{ir.T, ir.Dim(H), ir.Dim(D)}, xv)
			pn := h.node(ir.OpPositions, ir.Shape{ir.T}, dtype.I32, nil)
			h.e.i32[pn.ID] = pos
			n := h.node(ir.OpRope, x.Shape, dtype.F32, c.attrs, x, pn)
			for i := range c.factors {
				c.factors[i] = 1 + float32(i)
			}
			h.e.thetas[n.ID] = ir.RopeOf(n).Thetas(c.factors)

			// Reference: plainly from the op's definition.
			dims := c.attrs["dims"].(int)
			ref := make([]float64, len(xv))
			for i, v := range xv {
				ref[i] = float64(v)
			}
			for ti, p := range pos {
				for hh := 0; hh < H; hh++ {
					row := ref[(ti*H+hh)*D : (ti*H+hh+1)*D]
					for i := 0; i < dims/2; i++ {
						theta := math.Pow(c.attrs["base"].(float64), -2*float64(i)/float64(dims))
						if c.factors != nil {
							theta /= float64(c.factors[i])
						}
						if c.attrs["scaling"] == "llama3" {
							wl := 2 * math.Pi / theta
							lo, hi := 64/1.0, 64/4.0
							switch {
							case wl < hi:
							case wl > lo:
								theta /= 8
							default:
								s := (64/wl - 1) / 3
								theta = (1-s)*theta/8 + s*theta
							}
						}
						if c.attrs["scaling"] == "yarn" {
							// pairs 0–2 turn over 32 times in 4096 positions, pairs
							// from 6 on less than once: a ramp from 2 to 6
							ramp := math.Max(0, math.Min(1, (float64(i)-2)/4))
							theta = ramp*theta/4 + (1-ramp)*theta
						}
						angle := float64(p) * theta
						if c.attrs["scaling"] == "linear" {
							angle = float64(p) / 4 * theta
						}
						a, b := 2*i, 2*i+1
						if c.attrs["style"] == "half" {
							a, b = i, i+dims/2
						}
						xa, xb := row[a], row[b]
						row[a] = xa*math.Cos(angle) - xb*math.Sin(angle)
						row[b] = xa*math.Sin(angle) + xb*math.Cos(angle)
					}
				}
			}
			requireClose(t, ref, h.run(t, n), 1e-6, c.name)
		})
	}
}

// TestAttention checks kv_write and attention over two sequences with
// earlier cached positions, GQA, causal masking.
func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, sh := range []struct{ H, Hkv, D int }{{4, 2, 8}, {4, 4, 16}, {8, 1, 4}} {
		for _, threads := range []int{1, 4} {
			h := newHarness(threads)
			h.e.kvRow = []int{0, sh.Hkv * sh.D}
			counts, start := []int{3, 2}, []int{0, 4}
			h.setSeqs(counts, start)
			T := h.e.step.T
			// Cached history of sequence 1 (positions 0..3).
			hist := 4 * sh.Hkv * sh.D
			hk, hv := randVec(r, hist, 1), randVec(r, hist, 1)
			h.setHistory(1, 1, hk, hv)
			kv := ir.Shape{ir.T, ir.Dim(sh.Hkv), ir.Dim(sh.D)}
			kvals, vvals := randVec(r, T*sh.Hkv*sh.D, 1), randVec(r, T*sh.Hkv*sh.D, 1)
			k, v := h.f32(kv, kvals), h.f32(kv, vvals)
			c := h.node(ir.OpKVWrite, ir.Shape{}, dtype.F32, ir.Attrs{"layer": 1}, k, v)
			qs := ir.Shape{ir.T, ir.Dim(sh.H), ir.Dim(sh.D)}
			qv := randVec(r, T*sh.H*sh.D, 2)
			q := h.f32(qs, qv)
			scale := 1 / math.Sqrt(float64(sh.D))
			n := h.node(ir.OpAttention, qs, dtype.F32, ir.Attrs{"scale": scale, "causal": true}, q, c)
			require.NoError(t, kernels[ir.OpKVWrite](h.e, c))

			// Reference: gather each sequence's full K/V history plainly.
			R := sh.Hkv * sh.D
			seqK := [][]float32{kvals[:3*R], append(append([]float32{}, hk...), kvals[3*R:]...)}
			seqV := [][]float32{vvals[:3*R], append(append([]float32{}, hv...), vvals[3*R:]...)}
			ref := make([]float64, T*sh.H*sh.D)
			for ti := 0; ti < T; ti++ {
				s, p := h.e.step.seqOf[ti], int(h.e.step.pos[ti])
				for hh := 0; hh < sh.H; hh++ {
					g := hh / (sh.H / sh.Hkv)
					scores := make([]float64, p+1)
					mx := math.Inf(-1)
					for j := 0; j <= p; j++ {
						for i := 0; i < sh.D; i++ {
							scores[j] += float64(qv[(ti*sh.H+hh)*sh.D+i]) * float64(seqK[s][j*R+g*sh.D+i])
						}
						scores[j] *= scale
						mx = math.Max(mx, scores[j])
					}
					sum := 0.0
					for j := range scores {
						scores[j] = math.Exp(scores[j] - mx)
						sum += scores[j]
					}
					for j := range scores {
						for i := 0; i < sh.D; i++ {
							ref[(ti*sh.H+hh)*sh.D+i] += scores[j] / sum * float64(seqV[s][j*R+g*sh.D+i])
						}
					}
				}
			}
			requireClose(t, ref, h.run(t, n), 1e-6, "attention")
		}
	}
}

func TestMovement(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	h := newHarness(1)
	h.setSeqs([]int{2, 1, 3}, []int{0, 5, 1})
	E := 12
	xv := randVec(r, h.e.step.T*E, 1)
	x := h.f32(ir.Shape{ir.T, ir.Dim(E)}, xv)
	rs := h.node(ir.OpReshape, ir.Shape{ir.T, 3, 4}, dtype.F32, ir.Attrs{"dims": []int{3, 4}}, x)
	require.Equal(t, xv, h.run(t, rs))
	lt := h.node(ir.OpLastTokens, ir.Shape{ir.S, ir.Dim(E)}, dtype.F32, nil, x)
	var ref []float64
	for _, tok := range []int{1, 2, 5} {
		for _, v := range xv[tok*E : (tok+1)*E] {
			ref = append(ref, float64(v))
		}
	}
	requireClose(t, ref, h.run(t, lt), 0, "last_tokens")
	out := h.node(ir.OpOutput, lt.Shape, dtype.F32, nil, lt)
	requireClose(t, ref, h.run(t, out), 0, "output")
}

func runtimeThreads() int { return newExec(ir.NewGraph("", ""), nil, 0).threads }
