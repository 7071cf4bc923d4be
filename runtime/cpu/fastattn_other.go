//go:build !amd64 || purego

package cpu

// fastKernels: no vector kernels in this build; the portable definitions run.
type fastKernels struct{ name string }

var fastKernelSets []fastKernels

var fastActive *fastKernels

func attnScores(qT, k []float32, stride, n, D int, s []float32) { scoresRef(qT, k, stride, n, D, s) }

func attnSoftmax(s []float32, n int) [attnLanes]float32 { return softmaxRef(s, n) }

func attnWeighted(p, v []float32, stride, n, D int, accT []float32) {
	weightedRef(p, v, stride, n, D, accT)
}

func swigluFast(g, u, y []float32) { swigluRef(g[:len(y)], u[:len(y)], y) }
