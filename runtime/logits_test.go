package runtime

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCosineArgmax(t *testing.T) {
	require.InDelta(t, 1, Cosine([]float32{1, 2}, []float32{2, 4}), 1e-12)
	require.InDelta(t, 0, Cosine([]float32{1, 0}, []float32{0, 1}), 1e-12)
	require.Equal(t, int32(1), Argmax([]float32{1, 3, 3}))
}
