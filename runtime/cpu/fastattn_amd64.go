//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// hasAttnAVX512 reports whether the int8 configuration's attention uses the
// AVX-512 kernels of fastattn_amd64.s.
var hasAttnAVX512 = cpu.X86.HasAVX512F

//go:noescape
func attnScoresAVX512(qT *float32, k *float32, stride int, n int, d int, s *float32)

//go:noescape
func attnSoftmaxAVX512(s *float32, n int, sum *float32)

//go:noescape
func attnWeightedAVX512(p *float32, v *float32, stride int, n int, d int, accT *float32)

// attnScores is scoresRef, on the kernel where there is one.
func attnScores(qT, k []float32, stride, n, D int, s []float32) {
	if !hasAttnAVX512 || n == 0 {
		scoresRef(qT, k, stride, n, D, s)
		return
	}
	_ = qT[attnLanes*D-1]
	_ = k[(n-1)*stride+D-1]
	_ = s[attnLanes*n-1]
	attnScoresAVX512(&qT[0], &k[0], 4*stride, n, D, &s[0])
}

// attnSoftmax is softmaxRef, on the kernel where there is one.
func attnSoftmax(s []float32, n int) (sum [attnLanes]float32) {
	if !hasAttnAVX512 || n == 0 {
		return softmaxRef(s, n)
	}
	_ = s[attnLanes*n-1]
	attnSoftmaxAVX512(&s[0], n, &sum[0])
	return sum
}

// attnWeighted is weightedRef, on the kernel where there is one.
func attnWeighted(p, v []float32, stride, n, D int, accT []float32) {
	if !hasAttnAVX512 || n == 0 || D%16 != 0 {
		weightedRef(p, v, stride, n, D, accT)
		return
	}
	_ = p[attnLanes*n-1]
	_ = v[(n-1)*stride+D-1]
	_ = accT[attnLanes*D-1]
	attnWeightedAVX512(&p[0], &v[0], 4*stride, n, D, &accT[0])
}

//go:noescape
func swigluAVX512(gate *float32, up *float32, y *float32, n int)

// swigluFast is swigluRef, on the kernel where there is one.
func swigluFast(g, u, y []float32) {
	n := 0
	if hasAttnAVX512 {
		n = len(y) &^ 15
		if n > 0 {
			_, _ = g[n-1], u[n-1]
			swigluAVX512(&g[0], &u[0], &y[0], n)
		}
	}
	swigluRef(g[n:len(y)], u[n:len(y)], y[n:])
}
