package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
)

// TestModelShapeMixedLayers: autotune reads the per-layer types of a
// Q4_K_M model, whose V is Q6_K in some layers and Q4_K in others, so that
// it tunes the products lowering runs for both kinds of layer.
func TestModelShapeMixedLayers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "llama3-8b", Quant: "q4_k_m", Layers: 8, Dim: 256, Weights: synth.WeightsBlocks})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	defer m.Close()
	_, w, err := modelShape(m)
	require.NoError(t, err)
	require.Contains(t, w.QKV, [3]dtype.Type{dtype.Q4_K, dtype.Q4_K, dtype.Q6_K})
	require.Contains(t, w.QKV, [3]dtype.Type{dtype.Q4_K, dtype.Q4_K, dtype.Q4_K})
	require.Len(t, w.QKV, 2)
	require.GreaterOrEqual(t, len(w.Downs), 2, "%v", w.Downs)
}
