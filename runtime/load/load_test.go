package load

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

const (
	storiesPath = "../../testdata/models/tinyllamas-stories-260k-f32.gguf"
	tinyPath    = "../../testdata/models/llama-2-tiny-random.gguf"
	spmPath     = "../../testdata/vocab/ggml-vocab-llama-spm.gguf"
)

func TestGGUFFixtures(t *testing.T) {
	cases := []struct {
		path     string
		hp       ir.HParams
		tensors  int
		fileType string
		vocab    int
		shapes   map[string][]int
		types    map[string]dtype.Type
	}{
		{
			path: storiesPath,
			hp: ir.HParams{
				Arch: "llama", Name: "tinyllamas-stories-260k", ContextLength: 512, Embedding: 64, Layers: 5,
				FFN: 172, Heads: 8, HeadsKV: 4, HeadDim: 8, RopeDim: 8, RopeBase: 10000,
				RopeStyle: ir.RopeInterleaved, RMSEps: 1e-5, VocabSize: 512,
			},
			tensors: 48, fileType: "F32", vocab: 512,
			shapes: map[string][]int{"token_embd.weight": {64, 512}, "blk.0.attn_k.weight": {64, 32}, "blk.2.ffn_down.weight": {172, 64}, "output_norm.weight": {64}},
			types:  map[string]dtype.Type{"token_embd.weight": dtype.F32, "output.weight": dtype.F32},
		},
		{
			path: tinyPath,
			hp: ir.HParams{
				Arch: "llama", Name: "LLaMA v2", ContextLength: 4096, Embedding: 8, Layers: 1,
				FFN: 32, Heads: 2, HeadsKV: 2, HeadDim: 4, RopeDim: 4, RopeBase: 10000,
				RopeStyle: ir.RopeInterleaved, RMSEps: 1e-5, VocabSize: 32000,
			},
			tensors: 12, fileType: "F16", vocab: 32000,
			shapes: map[string][]int{"token_embd.weight": {8, 32000}, "blk.0.ffn_gate.weight": {8, 32}, "output.weight": {8, 32000}},
			types:  map[string]dtype.Type{"blk.0.attn_q.weight": dtype.F16, "blk.0.attn_norm.weight": dtype.F32},
		},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			m, err := Open(c.path)
			require.NoError(t, err)
			defer m.Close()
			require.Equal(t, FormatGGUF, m.Format)
			require.Equal(t, c.hp, m.HParams)
			require.Len(t, m.Tensors, c.tensors)
			require.Len(t, m.Names(), c.tensors)
			require.Equal(t, c.fileType, m.FileType)
			require.Empty(t, m.ChatTemplate)
			require.NotNil(t, m.Tokenizer)
			require.Equal(t, c.vocab, m.Tokenizer.VocabSize())
			require.EqualValues(t, 1, m.Tokenizer.BOS())
			require.EqualValues(t, 2, m.Tokenizer.EOS())
			for name, shape := range c.shapes {
				ty, s, ok := m.Lookup(name)
				require.True(t, ok, name)
				require.Equal(t, shape, s, name)
				require.True(t, ty.Known())
			}
			for name, ty := range c.types {
				require.Equal(t, ty, m.Tensors[name].Type, name)
			}
			for _, name := range m.Names() {
				d, err := m.Tensors[name].Data()
				require.NoError(t, err)
				require.EqualValues(t, m.Tensors[name].Bytes(), len(d), name)
			}
		})
	}
}

func TestOpenGGUFBytes(t *testing.T) {
	raw, err := os.ReadFile(storiesPath)
	require.NoError(t, err)
	a, err := OpenGGUFBytes("stories", raw)
	require.NoError(t, err)
	b, err := Open(storiesPath)
	require.NoError(t, err)
	defer b.Close()
	require.Equal(t, "stories", a.Path)
	require.Equal(t, b.HParams, a.HParams)
	da, _ := a.Tensors["blk.1.attn_v.weight"].Data()
	db, _ := b.Tensors["blk.1.attn_v.weight"].Data()
	require.Equal(t, db, da)
	require.NoError(t, a.Close())

	_, err = OpenGGUFBytes("broken", raw[:1000])
	require.ErrorContains(t, err, "broken")
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	txt := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(txt, []byte("hello"), 0o644))
	_, err := Open(txt)
	require.ErrorIs(t, err, ErrFormat)
	_, err = Open(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = Open(dir) // folder without config.json
	require.ErrorIs(t, err, ErrFormat)

	// A vocabulary-only GGUF opens (no tensors), with its tokenizer.
	m, err := Open(spmPath)
	require.NoError(t, err)
	require.Empty(t, m.Tensors)
	require.Equal(t, 32000, m.HParams.VocabSize)
	require.NoError(t, m.Close())
}

// TestGGUFYarn reads YaRN scaling from the stories fixture with
// rope.scaling.* keys added: the keys llama.cpp's converter writes, their
// defaults, and the context the scaling extends to.
func TestGGUFYarn(t *testing.T) {
	open := func(t *testing.T, kvs map[string]any) (*Model, error) {
		p := readParts(t, storiesPath)
		for k, v := range kvs {
			p.setKV(k, v)
		}
		m, err := Open(writeFile(t, "yarn.gguf", p.encode(t)))
		if m != nil {
			t.Cleanup(func() { m.Close() })
		}
		return m, err
	}
	m, err := open(t, map[string]any{
		"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4),
		"llama.rope.scaling.original_context_length": uint32(256),
		"llama.rope.scaling.yarn_beta_fast":          float32(16), "llama.rope.scaling.yarn_beta_slow": float32(2),
		"llama.rope.scaling.yarn_attn_factor": float32(1.25), "llama.rope.scaling.attn_factor": float32(0.5),
		"llama.rope.scaling.yarn_ext_factor": float32(1),
	})
	require.NoError(t, err)
	require.Equal(t, ir.RopeScaling{Type: "yarn", Factor: 4, OriginalContext: 256, BetaFast: 16, BetaSlow: 2,
		AttnFactor: 1.25, AttnFactorMul: 0.5}, m.HParams.RopeScaling)
	require.Equal(t, 1024, m.HParams.ContextLength, "4 × 256 positions")

	// Qwen2.5's converted config: factor and original context only, which
	// is also the context length; the defaults are left to the graph.
	m, err = open(t, map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4),
		"llama.context_length": uint32(512)})
	require.NoError(t, err)
	require.Equal(t, ir.RopeScaling{Type: "yarn", Factor: 4, OriginalContext: 512}, m.HParams.RopeScaling)
	require.Equal(t, 2048, m.HParams.ContextLength)

	for _, c := range []struct {
		name string
		kvs  map[string]any
		msg  string
	}{
		{"ext factor", map[string]any{"llama.rope.scaling.yarn_ext_factor": float32(0.5)}, "llama.rope.scaling.yarn_ext_factor"},
		{"log multiplier", map[string]any{"llama.rope.scaling.yarn_log_multiplier": float32(0.1)}, "llama.rope.scaling.yarn_log_multiplier"},
		{"negative beta", map[string]any{"llama.rope.scaling.yarn_beta_fast": float32(-1)}, "llama.rope.scaling.yarn_beta_fast"},
		{"beta not a float", map[string]any{"llama.rope.scaling.yarn_beta_slow": "one"}, "llama.rope.scaling.yarn_beta_slow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.kvs["llama.rope.scaling.type"], c.kvs["llama.rope.scaling.factor"] = "yarn", float32(4)
			_, err := open(t, c.kvs)
			require.ErrorIs(t, err, ErrMetadata)
			require.ErrorContains(t, err, c.msg)
		})
	}
}
