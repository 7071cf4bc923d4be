package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/synth"
	"github.com/memra-ai/memra/serve"
)

func TestParsePoolings(t *testing.T) {
	got, err := parsePoolings([]string{"mean", "b=last", " "}, []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, map[string]runtime.Pooling{"": runtime.PoolMean, "b": runtime.PoolLast}, got)
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"c=mean"}, `model "c" is not served`},
		{[]string{"max"}, "want mean, cls, last or none"},
		{[]string{"a=mean", "a=cls"}, "given twice for a"},
		{[]string{"mean", "cls"}, "given twice for every model"},
	} {
		_, err := parsePoolings(c.flags, []string{"a", "b"})
		require.ErrorContains(t, err, c.want)
	}
}

// TestServeEmbeddingModels: an embedding model is served with the pooling
// it declares and embeds through its engine; --pooling turns a decoder
// model into one, or a declared pooling off; the facts Ollama's routes
// show come from the file.
func TestServeEmbeddingModels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "embed.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "qwen3-8b", Layers: 1, Dim: 64, FFN: 128, Quant: "f32", Context: 128, Pooling: "last"})
	require.NoError(t, err)
	o := &serveOptions{maxRunning: 2, maxQueue: 4, device: "cpu", threads: 2}
	for _, c := range []struct {
		alias, path string
		poolings    map[string]runtime.Pooling
		want        runtime.Pooling
	}{
		{"embed", path, nil, runtime.PoolLast},
		{"embed", path, map[string]runtime.Pooling{"embed": runtime.PoolMean}, runtime.PoolMean},
		{"embed", path, map[string]runtime.Pooling{"": runtime.PoolNone}, runtime.PoolNone},
		{"stories260K", "", map[string]runtime.Pooling{"": runtime.PoolCLS}, runtime.PoolCLS},
		{"stories260K", "", nil, runtime.PoolNone},
	} {
		m, closeFn, err := openServed(rootCmd, modelSpec{alias: c.alias, path: c.path}, o, c.poolings)
		require.NoError(t, err, c.alias)
		require.Equal(t, c.want, m.Pooling, c.alias)
		ee := m.Engine.(serve.EmbedEngine)
		if c.want == runtime.PoolNone {
			require.Zero(t, ee.EmbedWidth())
			closeFn()
			continue
		}
		require.Positive(t, ee.EmbedWidth())
		vecs, err := ee.Embed(context.Background(), runtime.EmbedRequest{Inputs: [][]int32{{1, 2, 3}, {4}}, Pooling: m.Pooling})
		require.NoError(t, err)
		require.Len(t, vecs, 2)
		if c.path != "" {
			require.Equal(t, "gguf", m.Facts.Format)
			require.Equal(t, path, m.Facts.Path)
			require.Positive(t, m.Facts.Parameters)
			require.Positive(t, m.Facts.Size)
			require.False(t, m.Facts.Modified.IsZero())
		}
		closeFn()
	}
}
