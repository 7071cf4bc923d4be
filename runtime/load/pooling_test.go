package load

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/format/safetensors"
)

// TestGGUFPoolingType reads {arch}.pooling_type in llama.cpp's numbering
// and refuses what memra does not pool by.
func TestGGUFPoolingType(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
		err  string
	}{
		{nil, "", ""}, {uint32(0), "", ""}, {uint32(1), PoolMean, ""}, {uint32(2), PoolCLS, ""}, {uint32(3), PoolLast, ""},
		{uint32(4), "", "llama.pooling_type = 4"}, {"last", "", "want an integer"},
	} {
		p := readParts(t, storiesPath)
		if c.v != nil {
			p.setKV("llama.pooling_type", c.v)
		}
		m, err := Open(writeFile(t, "pool.gguf", p.encode(t)))
		if c.err != "" {
			require.ErrorIs(t, err, ErrMetadata, "%v", c.v)
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, m.Pooling, "%v", c.v)
		m.Close()
	}
}

// flatTensors is a qwen3-shaped checkpoint in the Qwen3-Embedding layout:
// the backbone without "model." and without lm_head.
func flatTensors() []safetensors.Tensor {
	var ts []safetensors.Tensor
	for _, x := range hfTensors(true, false, func(p string) []safetensors.Tensor {
		return []safetensors.Tensor{f32Tensor(p+"self_attn.q_norm.weight", 1, tHeadDim), f32Tensor(p+"self_attn.k_norm.weight", 1, tHeadDim)}
	}) {
		if x.Name == "model.rotary_emb.inv_freq" {
			continue
		}
		x.Name = x.Name[len("model."):]
		ts = append(ts, x)
	}
	return ts
}

// TestHFPooling: a sentence-transformers Pooling module names the pooling;
// the Qwen3-Embedding layout maps to the usual tensors and pools by the
// last token when no module says otherwise; what memra cannot pool by is
// refused naming the file.
func TestHFPooling(t *testing.T) {
	modules := `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},` +
		`{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`
	open := func(t *testing.T, pooling map[string]bool, mods string) (*Model, error) {
		dir := writeHF(t, hfConfigJSON("qwen3", nil), flatTensors(), nil)
		if mods != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "modules.json"), []byte(mods), 0o644))
		}
		if pooling != nil {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755))
			raw, err := json.Marshal(pooling)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), raw, 0o644))
		}
		m, err := Open(dir)
		if m != nil {
			t.Cleanup(func() { m.Close() })
		}
		return m, err
	}
	m, err := open(t, nil, "")
	require.NoError(t, err)
	require.Equal(t, PoolLast, m.Pooling, "the Qwen3-Embedding layout")
	for _, n := range []string{"token_embd.weight", "output_norm.weight", "blk.1.attn_q_norm.weight", "blk.0.ffn_down.weight"} {
		require.Contains(t, m.Tensors, n)
	}
	require.NotContains(t, m.Tensors, "output.weight")
	require.True(t, m.HParams.TiedEmbedding)

	m, err = open(t, map[string]bool{"pooling_mode_mean_tokens": true}, modules)
	require.NoError(t, err)
	require.Equal(t, PoolMean, m.Pooling)
	m, err = open(t, map[string]bool{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}, modules)
	require.NoError(t, err)
	require.Equal(t, PoolCLS, m.Pooling)

	for _, c := range []struct {
		pooling map[string]bool
		mods    string
		err     string
	}{
		{map[string]bool{"pooling_mode_max_tokens": true}, modules, "pooling max"},
		{map[string]bool{"pooling_mode_mean_tokens": true, "pooling_mode_lasttoken": true}, modules, "mean + last"},
		{map[string]bool{}, modules, "no pooling mode"},
		{nil, modules, "names a Pooling module"},
		{nil, `{"not": "a list"}`, "modules.json"},
		{nil, `[{"path":"../x","type":"sentence_transformers.models.Pooling"}]`, "leaves the folder"},
	} {
		_, err := open(t, c.pooling, c.mods)
		require.ErrorIs(t, err, ErrMetadata, c.err)
		require.ErrorContains(t, err, c.err)
	}
	// a generative checkpoint declares nothing
	g, err := Open(writeHF(t, hfConfigJSON("llama", nil), hfTensors(true, true, nil), nil))
	require.NoError(t, err)
	defer g.Close()
	require.Empty(t, g.Pooling)
}
