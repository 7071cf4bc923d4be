package codegen

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRefHeadRMSNorm: each head of the region is normalised on its own
// (its mean square over the head only) and scaled by its weight (w for the
// first Heads, w2 for the Heads2 after them); the columns outside the
// region keep their values.
func TestRefHeadRMSNorm(t *testing.T) {
	s := HeadNormShape{Heads: 1, Heads2: 1, HeadDim: 4, Offset: 3, Stride: 13, Eps: 1e-6}
	x := make([]float32, 2*s.Stride)
	for i := range x {
		x[i] = float32(i%7) - 2.5
	}
	w, w2 := []float32{1, 2, 0.5, -1}, []float32{-3, 0.25, 1, 4}
	got := RefHeadRMSNorm(s, x, w, w2)
	for r := range 2 {
		for c := range s.Stride {
			i := r*s.Stride + c
			h := (c - s.Offset) / s.HeadDim
			if c < s.Offset || h >= s.Heads+s.Heads2 {
				require.Equal(t, x[i], got[i], "row %d column %d", r, c)
				continue
			}
			base := r*s.Stride + s.Offset + h*s.HeadDim
			ss := 0.0
			for d := range s.HeadDim {
				ss += float64(x[base+d]) * float64(x[base+d])
			}
			d := c - s.Offset - h*s.HeadDim
			wd := w[d]
			if h >= s.Heads {
				wd = w2[d] // the second weight's heads
			}
			want := float64(x[i]) / math.Sqrt(ss/float64(s.HeadDim)+float64(s.Eps)) * float64(wd)
			require.InDelta(t, want, float64(got[i]), 1e-5, "row %d column %d", r, c)
		}
	}
}
