package runtime

import "math"

// Argmax returns the index of the largest logit (the lowest on ties): the
// greedy token.
func Argmax(logits []float32) int32 {
	best := 0
	for i, x := range logits {
		if x > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// Cosine returns the cosine similarity of two logit rows (1 when both are
// zero, 0 when only one is or a value is NaN), computed in float64: the
// measure the parity checks compare backends by.
func Cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	if aa == 0 && bb == 0 {
		return 1
	}
	if aa == 0 || bb == 0 || math.IsNaN(ab) {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
