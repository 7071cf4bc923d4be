package load

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenRejectsLyingGGUF edits the stories fixture so that its metadata
// contradicts itself or its tensors; Open must name the key or tensor.
func TestOpenRejectsLyingGGUF(t *testing.T) {
	cases := []struct {
		name string
		edit func(p *ggufParts)
		err  error
		msg  string
	}{
		{"hidden size", func(p *ggufParts) { p.setKV("llama.embedding_length", uint32(96)) }, ErrMismatch, "llama.embedding_length = 96"},
		{"heads do not divide", func(p *ggufParts) { p.setKV("llama.attention.head_count", uint32(7)) }, ErrMetadata, "llama.attention.head_count"},
		{"heads vs head size", func(p *ggufParts) { p.setKV("llama.attention.head_count", uint32(16)) }, ErrMismatch, "blk.0.attn_k.weight"},
		{"zero layers", func(p *ggufParts) { p.setKV("llama.block_count", uint32(0)) }, ErrMetadata, "llama.block_count"},
		{"huge layers", func(p *ggufParts) { p.setKV("llama.block_count", uint32(1<<30)) }, ErrMismatch, "llama.block_count = 1073741824"},
		{"fewer layers", func(p *ggufParts) { p.setKV("llama.block_count", uint32(3)) }, ErrMismatch, "blocks 0…4"},
		{"context 2^40", func(p *ggufParts) { p.setKV("llama.context_length", uint64(1)<<40) }, ErrMetadata, "llama.context_length"},
		{"context 2^31", func(p *ggufParts) { p.setKV("llama.context_length", uint32(1)<<31) }, ErrMetadata, "llama.context_length"},
		{"context zero", func(p *ggufParts) { p.setKV("llama.context_length", uint32(0)) }, ErrMetadata, "llama.context_length"},
		{"vocab size", func(p *ggufParts) { p.setKV("llama.vocab_size", uint32(1000)) }, ErrMismatch, "llama.vocab_size = 1000"},
		{"kv heads zero", func(p *ggufParts) { p.setKV("llama.attention.head_count_kv", uint32(0)) }, ErrMetadata, "llama.attention.head_count_kv"},
		{"kv heads vs attn_k", func(p *ggufParts) { p.setKV("llama.attention.head_count_kv", uint32(8)) }, ErrMismatch, "blk.0.attn_k.weight"},
		{"head size", func(p *ggufParts) { p.setKV("llama.attention.key_length", uint32(1<<30)) }, ErrMismatch, "blk.0.attn_q.weight"},
		{"ffn zero", func(p *ggufParts) { p.setKV("llama.feed_forward_length", uint32(0)) }, ErrMetadata, "llama.feed_forward_length"},
		{"ffn vs ffn_up", func(p *ggufParts) { p.setKV("llama.feed_forward_length", uint32(100)) }, ErrMismatch, "blk.0.ffn_up.weight"},
		{"rope base NaN", func(p *ggufParts) { p.setKV("llama.rope.freq_base", float32(math.NaN())) }, ErrMetadata, "llama.rope.freq_base"},
		{"eps negative", func(p *ggufParts) { p.setKV("llama.attention.layer_norm_rms_epsilon", float32(-1)) }, ErrMetadata, "layer_norm_rms_epsilon"},
		{"eps string", func(p *ggufParts) { p.setKV("llama.attention.layer_norm_rms_epsilon", "x") }, ErrMetadata, "layer_norm_rms_epsilon"},
		{"unknown arch", func(p *ggufParts) { p.setKV("general.architecture", "mamba") }, ErrArch, `"mamba"`},
		{"arch not a string", func(p *ggufParts) { p.setKV("general.architecture", uint32(3)) }, ErrMetadata, "want a non-empty string"},
		{"bos out of range", func(p *ggufParts) { p.setKV("tokenizer.ggml.bos_token_id", uint32(99999)) }, ErrMetadata, "tokenizer.ggml.bos_token_id"},
		{"eos out of range", func(p *ggufParts) { p.setKV("tokenizer.ggml.eos_token_id", uint32(512)) }, ErrMetadata, "tokenizer.ggml.eos_token_id"},
		{"embedding 1-D", func(p *ggufParts) {
			e := p.tensor("token_embd.weight")
			e.Dims = []uint64{64 * 512}
		}, ErrTensor, "token_embd.weight"},
		{"embedding narrower than the tokenizer", func(p *ggufParts) {
			e := p.tensor("token_embd.weight")
			e.Dims, e.Data = []uint64{64, 256}, e.Data[:64*256*4]
		}, ErrMismatch, "512 tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := readParts(t, storiesPath)
			c.edit(p)
			path := writeFile(t, "bad.gguf", p.encode(t))
			m, err := Open(path)
			if m != nil {
				m.Close()
			}
			require.ErrorIs(t, err, c.err)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, c.msg)
		})
	}
	// The unedited rewrite opens: the cases fail for their edit alone.
	m, err := Open(writeFile(t, "good.gguf", readParts(t, storiesPath).encode(t)))
	require.NoError(t, err)
	require.NoError(t, m.Close())
}

// TestOpenRejectsTruncatedGGUF cuts the fixture at offsets in each section.
func TestOpenRejectsTruncatedGGUF(t *testing.T) {
	raw, err := os.ReadFile(storiesPath)
	require.NoError(t, err)
	for _, n := range []int{0, 3, 10, 200, 7000, 9000, len(raw) / 2, len(raw) - 1} {
		path := writeFile(t, "cut.gguf", raw[:n])
		m, err := Open(path)
		require.Error(t, err, "cut at %d", n)
		require.Nil(t, m)
		require.ErrorContains(t, err, path)
	}
}

// TestOpenRejectsBadHF breaks a checkpoint folder one way at a time.
func TestOpenRejectsBadHF(t *testing.T) {
	files := map[string]string{"tokenizer.json": tinyTokenizerJSON}
	cases := []struct {
		name    string
		cfg     map[string]any
		breakIt func(dir string)
		err     error
		msg     string
	}{
		{"hidden size", hfConfigJSON("llama", map[string]any{"hidden_size": 16}), nil, ErrMismatch, "hidden_size = 16"},
		{"layers", hfConfigJSON("llama", map[string]any{"num_hidden_layers": 1 << 30}), nil, ErrMismatch, "num_hidden_layers"},
		{"kv heads", hfConfigJSON("llama", map[string]any{"num_key_value_heads": 0}), nil, ErrMetadata, "num_key_value_heads"},
		{"context", hfConfigJSON("llama", map[string]any{"max_position_embeddings": int64(1) << 40}), nil, ErrMetadata, "max_position_embeddings"},
		{"rope theta", hfConfigJSON("llama", map[string]any{"rope_theta": -1.0}), nil, ErrMetadata, "rope_theta"},
		{"wrong type", hfConfigJSON("llama", map[string]any{"hidden_size": "eight"}), nil, ErrMetadata, "config.json"},
		{"unknown arch", hfConfigJSON("mamba", nil), nil, ErrArch, "mamba"},
		{"no config", hfConfigJSON("llama", nil), func(dir string) { os.Remove(filepath.Join(dir, "config.json")) }, ErrFormat, "config.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeHF(t, c.cfg, hfTensors(true, true, nil), files)
			if c.breakIt != nil {
				c.breakIt(dir)
			}
			m, err := Open(dir)
			if m != nil {
				m.Close()
			}
			require.ErrorIs(t, err, c.err)
			require.ErrorContains(t, err, dir)
			require.ErrorContains(t, err, c.msg)
		})
	}
	// Without safetensors, or with one cut short, the folder is refused too.
	for _, cut := range []func(string) error{
		func(p string) error { return os.Remove(p) },
		func(p string) error { return os.Truncate(p, 100) },
		func(p string) error { st, _ := os.Stat(p); return os.Truncate(p, st.Size()-1) },
	} {
		dir := writeHF(t, hfConfigJSON("llama", nil), hfTensors(true, true, nil), files)
		require.NoError(t, cut(filepath.Join(dir, "model.safetensors")))
		m, err := Open(dir)
		require.Error(t, err)
		require.Nil(t, m)
		require.ErrorContains(t, err, dir)
	}
}
