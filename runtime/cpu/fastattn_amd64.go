//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func attnScoresAVX512(qT *float32, k *float32, stride int, n int, d int, s *float32)

//go:noescape
func attnSoftmaxAVX512(s *float32, n int, sum *float32)

//go:noescape
func attnWeightedAVX512(p *float32, v *float32, stride int, n int, d int, accT *float32)

//go:noescape
func swigluAVX512(gate *float32, up *float32, y *float32, n int)

//go:noescape
func attnScoresAVX2(qT *float32, k *float32, stride int, n int, d int, s *float32)

//go:noescape
func attnSoftmaxAVX2(s *float32, n int, sum *float32)

//go:noescape
func attnWeightedAVX2(p *float32, v *float32, stride int, n int, d int, accT *float32)

//go:noescape
func swigluAVX2(gate *float32, up *float32, y *float32, n int)

// fastKernels is one instruction set's attention and SwiGLU kernels; step
// is the head sizes attnWeighted takes (a multiple of it) and the
// elements swiglu takes at a time.
type fastKernels struct {
	name     string
	scores   func(qT *float32, k *float32, stride int, n int, d int, s *float32)
	softmax  func(s *float32, n int, sum *float32)
	weighted func(p *float32, v *float32, stride int, n int, d int, accT *float32)
	swiglu   func(gate *float32, up *float32, y *float32, n int)
	step     int
}

// fastKernelSets are the kernel sets this CPU runs, best first.
var fastKernelSets = func() []fastKernels {
	var sets []fastKernels
	if cpu.X86.HasAVX512F {
		sets = append(sets, fastKernels{"avx512", attnScoresAVX512, attnSoftmaxAVX512, attnWeightedAVX512, swigluAVX512, 16})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		sets = append(sets, fastKernels{"avx2", attnScoresAVX2, attnSoftmaxAVX2, attnWeightedAVX2, swigluAVX2, 8})
	}
	return sets
}()

// fastActive is the set in use (nil: the portable definitions).
var fastActive = func() *fastKernels {
	if len(fastKernelSets) == 0 {
		return nil
	}
	return &fastKernelSets[0]
}()

// attnScores is scoresRef, on the kernel where there is one.
func attnScores(qT, k []float32, stride, n, D int, s []float32) {
	ks := fastActive
	if ks == nil || n == 0 {
		scoresRef(qT, k, stride, n, D, s)
		return
	}
	_ = qT[attnLanes*D-1]
	_ = k[(n-1)*stride+D-1]
	_ = s[attnLanes*n-1]
	ks.scores(&qT[0], &k[0], 4*stride, n, D, &s[0])
}

// attnSoftmax is softmaxRef, on the kernel where there is one.
func attnSoftmax(s []float32, n int) (sum [attnLanes]float32) {
	ks := fastActive
	if ks == nil || n == 0 {
		return softmaxRef(s, n)
	}
	_ = s[attnLanes*n-1]
	ks.softmax(&s[0], n, &sum[0])
	return sum
}

// attnWeighted is weightedRef, on the kernel where there is one.
func attnWeighted(p, v []float32, stride, n, D int, accT []float32) {
	ks := fastActive
	if ks == nil || n == 0 || D%ks.step != 0 {
		weightedRef(p, v, stride, n, D, accT)
		return
	}
	_ = p[attnLanes*n-1]
	_ = v[(n-1)*stride+D-1]
	_ = accT[attnLanes*D-1]
	ks.weighted(&p[0], &v[0], 4*stride, n, D, &accT[0])
}

// swigluFast is swigluRef, on the kernel where there is one.
func swigluFast(g, u, y []float32) {
	n := 0
	if ks := fastActive; ks != nil {
		n = len(y) / ks.step * ks.step
		if n > 0 {
			_, _ = g[n-1], u[n-1]
			ks.swiglu(&g[0], &u[0], &y[0], n)
		}
	}
	swigluRef(g[n:len(y)], u[n:len(y)], y[n:])
}
