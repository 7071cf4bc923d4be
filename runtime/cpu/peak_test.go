package cpu

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMeasurePeak: a small measurement fills every field.
func TestMeasurePeak(t *testing.T) {
	p := MeasurePeak(2, 8<<20, 1)
	require.NotEmpty(t, p.Model)
	require.Equal(t, 2, p.Threads)
	require.Positive(t, p.CopyBW)
	if p.FMAUnit != "none" {
		require.Positive(t, p.FMAFLOPs)
		require.Positive(t, p.Int8Ops)
	}
}
