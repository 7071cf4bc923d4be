package cpu

import (
	"math"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// The int8 configuration's attention: float32 products tiled over a block
// of queries, where the reference (attention.go) sums every query alone in
// float64. Sixteen queries share a vector, one per lane: the queries of the
// heads that share a KV head, for up to attnBlockTokens tokens of one
// sequence. Their scores against the cached keys are a product of the
// block's transposed queries (D × 16) with the keys, each key row read once
// for all sixteen; the softmax runs lane-wise down the keys; the weighted
// values are a product of the weights (keys × 16) with the value rows.
//
// The portable functions below define the arithmetic to the bit (float32
// multiply-adds rounded once, in the order written); the AVX-512 kernels
// (fastattn_amd64.s) must equal them (TestFastAttnKernelsNoDiff).

// attnLanes is the number of queries of one vector.
const attnLanes = 16

// expLo bounds exp's argument from below: e^x for x ≤ −87.3 (below
// float32's least normal number) is 0, as is a masked score (−∞), so 2ⁿ
// below is always a normal float32.
const expLo = -87.3

// Coefficients of exp on [−ln2/2, ln2/2] (Taylor to degree 6; relative
// error below 2e-7) and ln 2 split for the range reduction.
const (
	expLog2e = 1.44269504
	expLn2Hi = 0.693359375
	expLn2Lo = -2.12194440e-4
	expC2    = 1.0 / 2
	expC3    = 1.0 / 6
	expC4    = 1.0 / 24
	expC5    = 1.0 / 120
	expC6    = 1.0 / 720
)

// exp32 is the fast class's e^x for x ≤ 0: 0 unless x > expLo (also for
// −∞ and NaN); else n = round(x·log₂e) (ties to even, −126 ≤ n ≤ 0),
// r = x − n·ln2 in two fused steps, a degree-6 polynomial in r by Horner's
// rule with fused steps, times 2ⁿ (one float32 multiply).
func exp32(x float32) float32 {
	if !(x > expLo) {
		return 0
	}
	n := float32(math.RoundToEven(float64(float32(x * expLog2e))))
	r := fma32(n, -expLn2Hi, x)
	r = fma32(n, -expLn2Lo, r)
	p := fma32(expC6, r, expC5)
	p = fma32(p, r, expC4)
	p = fma32(p, r, expC3)
	p = fma32(p, r, expC2)
	p = fma32(p, r, 1)
	p = fma32(p, r, 1)
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// fma32 is a·b + c rounded once to float32.
func fma32(a, b, c float32) float32 { return dtype.FMA32(a, b, c) }

// scoresRef sets s[16j + l] = Σ_d qT[16d + l]·k[j·stride + d] for keys j < n,
// summed over d in order with fused multiply-adds from zero.
func scoresRef(qT, k []float32, stride, n, D int, s []float32) {
	for j := range n {
		kj := k[j*stride : j*stride+D]
		for l := range attnLanes {
			var acc float32
			for d, kv := range kj {
				acc = fma32(qT[attnLanes*d+l], kv, acc)
			}
			s[attnLanes*j+l] = acc
		}
	}
}

// softmaxRef replaces the n score rows of s (lanes are queries) by
// exp32(s − m), m each lane's largest score (max(m, s) as VMAXPS takes it:
// m if m > s, else s), and returns each lane's sum of the weights, added
// in key order.
func softmaxRef(s []float32, n int) (sum [attnLanes]float32) {
	var m [attnLanes]float32
	for l := range m {
		m[l] = float32(math.Inf(-1))
	}
	for j := range n {
		for l := range attnLanes {
			if v := s[attnLanes*j+l]; !(m[l] > v) {
				m[l] = v
			}
		}
	}
	for j := range n {
		for l := range attnLanes {
			p := exp32(s[attnLanes*j+l] - m[l])
			s[attnLanes*j+l] = p
			sum[l] += p
		}
	}
	return sum
}

// weightedRef adds Σ_j p[16j + l]·v[j·stride + d] to accT[16d + l] for d <
// D, one fused multiply-add per key in order.
func weightedRef(p, v []float32, stride, n, D int, accT []float32) {
	for d := range D {
		for l := range attnLanes {
			acc := accT[attnLanes*d+l]
			for j := range n {
				acc = fma32(p[attnLanes*j+l], v[j*stride+d], acc)
			}
			accT[attnLanes*d+l] = acc
		}
	}
}

// attentionFast is the attention op in the int8 configuration: work items
// as the reference's (runs of up to attnBlockTokens tokens of one sequence
// and one KV head), each query vector of the item in turn.
func attentionFast(e *exec, n *ir.Node, a attnShape, Hkv int) error {
	q, y := e.in(n, 0), e.out(n)
	st := &e.step
	B := attnBlockTokens
	if len(e.fattn) < e.threads {
		e.fattn = make([]fastAttnScratch, e.threads)
	}
	// Attention over a cache of a few positions is a few microseconds of
	// work: not worth waking the workers. From about 32 positions of a 1B
	// model it is (decode of llama3.2-1b at 64–96 positions, back to back:
	// 26.4–26.9 tok/s on one worker, 28.0–28.7 split).
	work := 0
	for t := range st.T {
		work += int(st.pos[t]) + 1
	}
	items := (st.T + B - 1) / B * Hkv
	grain := 1
	if work*a.H*a.D < 1<<16 {
		grain = items
	}
	e.parallel(items, grain, func(w, lo, hi int) {
		for i := lo; i < hi; i++ {
			b, g := i/Hkv, i%Hkv
			end := min(b*B+B, st.T)
			for t0 := b * B; t0 < end; {
				t1 := t0 + 1
				for t1 < end && st.seqOf[t1] == st.seqOf[t0] {
					t1++
				}
				e.attendFast(q, y, t0, t1, g, &e.fattn[w], a)
				t0 = t1
			}
		}
	})
	return nil
}

// fastAttnScratch is one worker's buffers.
type fastAttnScratch struct {
	qT, s, accT []float32
}

// attendFast computes tokens [t0, t1) of one sequence for the query heads
// of KV head g.
func (e *exec) attendFast(q, y []float32, t0, t1, g int, sc *fastAttnScratch, a attnShape) {
	st := &e.step
	D, G, H := a.D, a.G, a.H
	s := st.seqOf[t0]
	pt := st.tables[s]
	nq := (t1 - t0) * G
	span := func(t int) int {
		if a.causal {
			return int(st.pos[t]) + 1
		}
		return st.length[s]
	}
	scale := float32(a.scale)
	off := g * D
	ps := e.kv.pageSize
	k, v := e.kv.k[a.l], e.kv.v[a.l]
	for v0 := 0; v0 < nq; v0 += attnLanes {
		lanes := min(attnLanes, nq-v0)
		var spans [attnLanes]int
		most := 0
		for l := range lanes {
			spans[l] = span(t0 + (v0+l)/G)
			most = max(most, spans[l])
		}
		sc.qT = grow(sc.qT, D*attnLanes)
		sc.s = grow(sc.s, most*attnLanes)
		sc.accT = grow(sc.accT, D*attnLanes)
		clear(sc.qT)
		for l := range lanes {
			i := v0 + l
			t, h := t0+i/G, g*G+i%G
			for d, x := range q[(t*H+h)*D : (t*H+h+1)*D] {
				sc.qT[attnLanes*d+l] = x * scale
			}
		}
		for j := 0; j < most; {
			id, r := pt[j/ps], j%ps
			cnt := min(ps-r, most-j)
			attnScores(sc.qT, k[id][r*a.R+off:], a.R, cnt, D, sc.s[attnLanes*j:])
			j += cnt
		}
		// mask the keys past each query's span (the block's later tokens)
		inf := float32(math.Inf(-1))
		for l := range lanes {
			for j := spans[l]; j < most; j++ {
				sc.s[attnLanes*j+l] = inf
			}
		}
		sum := attnSoftmax(sc.s, most)
		clear(sc.accT)
		for j := 0; j < most; {
			id, r := pt[j/ps], j%ps
			cnt := min(ps-r, most-j)
			attnWeighted(sc.s[attnLanes*j:], v[id][r*a.R+off:], a.R, cnt, D, sc.accT)
			j += cnt
		}
		for l := range lanes {
			i := v0 + l
			t, h := t0+i/G, g*G+i%G
			yh := y[(t*H+h)*D : (t*H+h+1)*D]
			for d := range yh {
				yh[d] = sc.accT[attnLanes*d+l] / sum[l]
			}
		}
	}
}

// grow returns b with length n, reusing its memory when it can.
func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n, n+n/2)
	}
	return b[:n]
}

// swigluRef is the int8 configuration's SwiGLU, silu(g)·u with the fast
// class's exp: e = exp32(−|g|) (never past 1), σ = (g < 0 ? e : 1)/(1 + e),
// y = (g·σ)·u, each a float32 operation.
func swigluRef(g, u, y []float32) {
	for i, gv := range g {
		e := exp32(-float32(math.Abs(float64(gv))))
		num := float32(1)
		if gv < 0 {
			num = e
		}
		sig := num / (1 + e)
		y[i] = gv * sig * u[i]
	}
}
