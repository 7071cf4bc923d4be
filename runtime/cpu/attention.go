package cpu

import (
	"math"

	"github.com/memra-ai/memra/ir"
)

// kvWrite stores each token's k and v rows at its position in its
// sequence's pages of the node's layer (the page tables cover the step's
// positions, see plan).
func kvWrite(e *exec, n *ir.Node) error {
	k, v := e.in(n, 0), e.in(n, 1)
	l := n.Int("layer")
	R := e.kvRow[l]
	for t, s := range e.step.seqOf {
		kr, vr := e.kv.row(l, e.step.tables[s], int(e.step.pos[t]))
		copy(kr, k[t*R:(t+1)*R])
		copy(vr, v[t*R:(t+1)*R])
	}
	return nil
}

// attnBlockTokens is how many consecutive tokens of one sequence one
// attention work item serves: their queries of all the heads sharing a KV
// head read each cached K and V row once.
const attnBlockTokens = 8

// attention is softmax(scale·q·Kᵀ)·V per token and head over the token's
// sequence cache, with float64 scores and sums. Work is blocked by
// sequence, KV head and runs of attnBlockTokens tokens: each cached K and V
// row (contiguous D elements) is converted once and used for every query
// of the block. Every query's sums run in the same order as a plain
// per-query loop, so the blocking changes no bit of the result.
func attention(e *exec, n *ir.Node) error {
	a, Hkv := attnShapeOf(n)
	if e.fast && a.softcap == 0 && a.window == 0 {
		// the fast kernels compute plain causal attention: a soft cap or a
		// sliding window (Gemma) takes this path in every class
		return attentionFast(e, n, a, Hkv)
	}
	q, y := e.in(n, 0), e.out(n)
	st := &e.step

	// Work item i is KV head i%Hkv of the tokens [b·B, b·B+B), b = i/Hkv,
	// split where a sequence ends (tokens of one sequence are consecutive
	// in a step, see plan).
	B := attnBlockTokens
	e.parallel((st.T+B-1)/B*Hkv, 1, func(w, lo, hi int) {
		for i := lo; i < hi; i++ {
			b, g := i/Hkv, i%Hkv
			end := min(b*B+B, st.T)
			for t0 := b * B; t0 < end; {
				t1 := t0 + 1
				for t1 < end && st.seqOf[t1] == st.seqOf[t0] {
					t1++
				}
				e.attendRun(q, y, t0, t1, g, w, a)
				t0 = t1
			}
		}
	})
	return nil
}

// attnShapeOf is attention node n's shape, and its KV heads.
func attnShapeOf(n *ir.Node) (attnShape, int) {
	H, D := int(n.Shape[1]), int(n.Shape[2])
	Hkv := int(n.Args[1].Args[0].Shape[1])
	return attnShape{l: n.Args[1].Int("layer"), H: H, D: D, G: H / Hkv, R: Hkv * D, scale: n.Float("scale"), causal: n.Bool("causal"),
		softcap: ir.AttnSoftcap(n), window: ir.AttnWindow(n)}, Hkv
}

// attnShape is what attendRun needs to know of an attention node.
type attnShape struct {
	l, H, D, G, R int
	scale         float64
	causal        bool
	softcap       float64 // scores become softcap·tanh(s/softcap) when positive
	window        int     // a token at p reads only keys j > p − window when positive
}

// attendRun computes the outputs of tokens [t0, t1) of one sequence (at
// most attnBlockTokens) for the query heads of KV head g, on worker w's
// scratch.
func (e *exec) attendRun(q, y []float32, t0, t1, g, w int, a attnShape) {
	st := &e.step
	D, G, H := a.D, a.G, a.H
	s := st.seqOf[t0]
	pt := st.tables[s]
	nq := (t1 - t0) * G
	// Query i is head g·G + i%G of token t0 + i/G; it sees the cached
	// positions [tlo[i/G], tspan[i/G]): from 0, or within its window.
	var tspan, tlo [attnBlockTokens]int
	span, base := 0, math.MaxInt
	for t := t0; t < t1; t++ {
		tspan[t-t0] = st.length[s]
		if a.causal {
			tspan[t-t0] = int(st.pos[t]) + 1
		}
		if a.window > 0 {
			tlo[t-t0] = max(0, tspan[t-t0]-a.window)
		}
		span = max(span, tspan[t-t0])
		base = min(base, tlo[t-t0])
	}
	spanQ := func(i int) int { return tspan[i/G] }
	loQ := func(i int) int { return tlo[i/G] }
	// Scores of keys [base, span) are held; key j of query i at
	// sc[i·wd + j − base].
	wd := span - base

	// Scratch: queries (nq·D), four K or V rows (4·D), scores (nq·wd),
	// accumulators (nq·D), softmax sums (nq).
	need := nq*D + 4*D + nq*wd + nq*D + nq
	if cap(e.scratch[w]) < need {
		e.scratch[w] = make([]float64, need+need/2)
	}
	buf := e.scratch[w][:need]
	qs, buf := buf[:nq*D], buf[nq*D:]
	rows, buf := buf[:4*D], buf[4*D:]
	sc, buf := buf[:nq*wd], buf[nq*wd:]
	acc, sums := buf[:nq*D], buf[nq*D:]
	for i := range nq {
		t, h := t0+i/G, g*G+i%G
		dst := qs[i*D : (i+1)*D]
		for k, v := range q[(t*H+h)*D : (t*H+h+1)*D] {
			dst[k] = float64(v)
		}
	}
	off := g * D

	// Scores: each cached K row converted once for all queries, four rows
	// at a time (four independent sums, each in element order).
	for j0 := base; j0 < span; j0 += 4 {
		clearUpper()
		nj := min(4, span-j0)
		for jj := range nj {
			kr, _ := e.kv.row(a.l, pt, j0+jj)
			for k, v := range kr[off : off+D] {
				rows[jj*D+k] = float64(v)
			}
		}
		r0, r1, r2, r3 := rows[:D], rows[D:2*D], rows[2*D:3*D], rows[3*D:]
		for i := range nq {
			start, end := max(j0, loQ(i)), min(j0+4, spanQ(i))
			if end <= start {
				continue
			}
			qi := qs[i*D : (i+1)*D]
			out := sc[i*wd+start-base : i*wd+end-base]
			if start == j0 && len(out) == 4 {
				var d0, d1, d2, d3 float64
				for k, qv := range qi {
					d0 += qv * r0[k]
					d1 += qv * r1[k]
					d2 += qv * r2[k]
					d3 += qv * r3[k]
				}
				out[0], out[1], out[2], out[3] = d0*a.scale, d1*a.scale, d2*a.scale, d3*a.scale
				continue
			}
			for jj := range out {
				r := rows[(start-j0+jj)*D : (start-j0+jj+1)*D]
				dot := 0.0
				for k, qv := range qi {
					dot += qv * r[k]
				}
				out[jj] = dot * a.scale
			}
		}
	}
	// Softmax per query, after the soft cap.
	for i := range nq {
		clearUpper()
		p := sc[i*wd+loQ(i)-base : i*wd+spanQ(i)-base]
		if a.softcap > 0 {
			for j, v := range p {
				p[j] = softcapF(v, a.softcap)
			}
		}
		mx := math.Inf(-1)
		for _, v := range p {
			mx = max(mx, v)
		}
		sum := 0.0
		for j := range p {
			p[j] = math.Exp(p[j] - mx)
			sum += p[j]
		}
		sums[i] = sum
	}
	// Weighted values: each cached V row once for all queries, four rows
	// at a time; every accumulator still adds its terms in row order.
	clear(acc)
	for j0 := base; j0 < span; j0 += 4 {
		clearUpper()
		nj := min(4, span-j0)
		for jj := range nj {
			_, vr := e.kv.row(a.l, pt, j0+jj)
			for k, v := range vr[off : off+D] {
				rows[jj*D+k] = float64(v)
			}
		}
		r0, r1, r2, r3 := rows[:D], rows[D:2*D], rows[2*D:3*D], rows[3*D:]
		for i := range nq {
			start, end := max(j0, loQ(i)), min(j0+4, spanQ(i))
			if end <= start {
				continue
			}
			ai := acc[i*D : (i+1)*D]
			p := sc[i*wd+start-base : i*wd+end-base]
			if start == j0 && len(p) >= 4 {
				p0, p1, p2, p3 := p[0], p[1], p[2], p[3]
				for k, a := range ai {
					a += p0 * r0[k]
					a += p1 * r1[k]
					a += p2 * r2[k]
					a += p3 * r3[k]
					ai[k] = a
				}
				continue
			}
			for jj, pj := range p {
				r := rows[(start-j0+jj)*D : (start-j0+jj+1)*D]
				for k, vv := range r {
					ai[k] += pj * vv
				}
			}
		}
	}
	for i := range nq {
		t, h := t0+i/G, g*G+i%G
		yh := y[(t*H+h)*D : (t*H+h+1)*D]
		ai := acc[i*D : (i+1)*D]
		for k := range yh {
			yh[k] = float32(ai[k] / sums[i])
		}
	}
}
