package load

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/safetensors"
)

// hfDims of the test checkpoints: hidden 8, 2 heads of 4, 1 KV head,
// FFN 16, 2 layers, vocab 10.
const (
	tHidden, tHeads, tKV, tHeadDim, tFFN, tLayers, tVocab = 8, 2, 1, 4, 16, 2, 10
)

// f32Tensor returns an F32 tensor whose element i is base+i.
func f32Tensor(name string, base float32, shape ...int) safetensors.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(base+float32(i)))
	}
	return safetensors.Tensor{Name: name, DType: "F32", Shape: shape, Data: b}
}

// hfTensors returns a llama-layout checkpoint; extra adds per-layer tensors.
func hfTensors(withEmbed, withHead bool, extra func(l string) []safetensors.Tensor) []safetensors.Tensor {
	var ts []safetensors.Tensor
	if withEmbed {
		ts = append(ts, f32Tensor("model.embed_tokens.weight", 1000, tVocab, tHidden))
	}
	if withHead {
		ts = append(ts, f32Tensor("lm_head.weight", 2000, tVocab, tHidden))
	}
	ts = append(ts, f32Tensor("model.norm.weight", 3000, tHidden), f32Tensor("model.rotary_emb.inv_freq", 0, 2))
	for l := range tLayers {
		p := "model.layers." + string(rune('0'+l)) + "."
		ts = append(ts,
			f32Tensor(p+"self_attn.q_proj.weight", 10, tHeads*tHeadDim, tHidden),
			f32Tensor(p+"self_attn.k_proj.weight", 20, tKV*tHeadDim, tHidden),
			f32Tensor(p+"self_attn.v_proj.weight", 30, tKV*tHeadDim, tHidden),
			f32Tensor(p+"self_attn.o_proj.weight", 40, tHidden, tHeads*tHeadDim),
			f32Tensor(p+"mlp.gate_proj.weight", 50, tFFN, tHidden),
			f32Tensor(p+"mlp.up_proj.weight", 60, tFFN, tHidden),
			f32Tensor(p+"mlp.down_proj.weight", 70, tHidden, tFFN),
			f32Tensor(p+"input_layernorm.weight", 80, tHidden),
			f32Tensor(p+"post_attention_layernorm.weight", 90, tHidden),
		)
		if extra != nil {
			ts = append(ts, extra(p)...)
		}
	}
	return ts
}

func hfConfigJSON(modelType string, extra map[string]any) map[string]any {
	cfg := map[string]any{
		"architectures": []string{"X"}, "model_type": modelType,
		"hidden_size": tHidden, "intermediate_size": tFFN, "num_hidden_layers": tLayers,
		"num_attention_heads": tHeads, "num_key_value_heads": tKV, "max_position_embeddings": 256,
		"rms_norm_eps": 1e-6, "rope_theta": 500000.0, "vocab_size": tVocab, "tie_word_embeddings": false,
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

func writeHF(t *testing.T, cfg map[string]any, ts []safetensors.Tensor, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	require.NoError(t, safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}))
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	return dir
}

func TestHFLlama(t *testing.T) {
	cfg := hfConfigJSON("llama", map[string]any{"rope_scaling": map[string]any{
		"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
		"original_max_position_embeddings": 8192,
	}, "_name_or_path": "test/llama"})
	ts := hfTensors(true, true, nil)
	dir := writeHF(t, cfg, ts, map[string]string{
		"tokenizer_config.json": `{"bos_token":"<s>","eos_token":"</s>","chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"{{ messages }}"}]}`,
		"tokenizer.json":        tinyTokenizerJSON,
	})
	m, err := Open(dir)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, FormatSafetensors, m.Format)
	require.Equal(t, ir.HParams{
		Arch: "llama", Name: "test/llama", ContextLength: 256, Embedding: tHidden, Layers: tLayers, FFN: tFFN,
		Heads: tHeads, HeadsKV: tKV, HeadDim: tHeadDim, RopeDim: tHeadDim, RopeBase: 500000,
		RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: tVocab,
		RopeScaling: ir.RopeScaling{Type: "llama3", Factor: 8, OriginalContext: 8192, LowFreqFactor: 1, HighFreqFactor: 4},
	}, m.HParams)
	require.Equal(t, "{{ messages }}", m.ChatTemplate)
	require.NotNil(t, m.Tokenizer)
	require.Equal(t, tVocab, m.Tokenizer.VocabSize())
	require.EqualValues(t, 8, m.Tokenizer.BOS())
	require.EqualValues(t, 9, m.Tokenizer.EOS())
	require.Equal(t, "F32", m.FileType)
	require.Equal(t, []string{"model.rotary_emb.inv_freq"}, m.Skipped)
	require.Len(t, m.Tensors, 3+9*tLayers)

	want := map[string]struct {
		hf    string
		shape []int
		base  float32
	}{
		"token_embd.weight":        {"model.embed_tokens.weight", []int{tHidden, tVocab}, 1000},
		"output.weight":            {"lm_head.weight", []int{tHidden, tVocab}, 2000},
		"output_norm.weight":       {"model.norm.weight", []int{tHidden}, 3000},
		"blk.1.attn_q.weight":      {"", []int{tHidden, tHeads * tHeadDim}, 10},
		"blk.1.attn_k.weight":      {"", []int{tHidden, tKV * tHeadDim}, 20},
		"blk.0.attn_v.weight":      {"", []int{tHidden, tKV * tHeadDim}, 30},
		"blk.0.attn_output.weight": {"", []int{tHeads * tHeadDim, tHidden}, 40},
		"blk.0.ffn_gate.weight":    {"", []int{tHidden, tFFN}, 50},
		"blk.1.ffn_up.weight":      {"", []int{tHidden, tFFN}, 60},
		"blk.0.ffn_down.weight":    {"", []int{tFFN, tHidden}, 70},
		"blk.1.attn_norm.weight":   {"", []int{tHidden}, 80},
		"blk.0.ffn_norm.weight":    {"", []int{tHidden}, 90},
	}
	for name, w := range want {
		tt, ok := m.Tensors[name]
		require.True(t, ok, name)
		require.Equal(t, dtype.F32, tt.Type, name)
		require.Equal(t, w.shape, tt.Shape, name)
		d, err := tt.Data()
		require.NoError(t, err)
		require.Equal(t, w.base, math.Float32frombits(binary.LittleEndian.Uint32(d)), name)
		last := len(d)/4 - 1
		require.Equal(t, w.base+float32(last), math.Float32frombits(binary.LittleEndian.Uint32(d[4*last:])), name)
	}
}

// tinyTokenizerJSON is a byte-level BPE tokenizer.json of 10 tokens.
const tinyTokenizerJSON = `{
 "added_tokens": [{"id": 8, "content": "<s>", "special": true}, {"id": 9, "content": "</s>", "special": true}],
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
 "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "Ġ": 5, "Ġa": 6, "d": 7},
  "merges": ["a b", "ab c", "Ġ a"]}
}`

func TestHFChatTemplateFile(t *testing.T) {
	dir := writeHF(t, hfConfigJSON("llama", nil), hfTensors(true, true, nil), map[string]string{
		"tokenizer_config.json": `{"chat_template":"from config"}`,
		"chat_template.jinja":   "from file",
	})
	m, err := Open(dir)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, "from file", m.ChatTemplate)
	require.Nil(t, m.Tokenizer)

	dir = writeHF(t, hfConfigJSON("llama", nil), hfTensors(true, true, nil), map[string]string{
		"tokenizer_config.json": `{"chat_template":[{"name":"rag","template":"x"}]}`,
	})
	_, err = Open(dir)
	require.ErrorIs(t, err, ErrMetadata)
	require.ErrorContains(t, err, "default")
}

func TestHFQwen(t *testing.T) {
	bias := func(p string) []safetensors.Tensor {
		return []safetensors.Tensor{
			f32Tensor(p+"self_attn.q_proj.bias", 1, tHeads*tHeadDim),
			f32Tensor(p+"self_attn.k_proj.bias", 2, tKV*tHeadDim),
			f32Tensor(p+"self_attn.v_proj.bias", 3, tKV*tHeadDim),
		}
	}
	norm := func(p string) []safetensors.Tensor {
		return []safetensors.Tensor{f32Tensor(p+"self_attn.q_norm.weight", 1, tHeadDim), f32Tensor(p+"self_attn.k_norm.weight", 2, tHeadDim)}
	}
	cases := []struct {
		modelType      string
		extra          func(string) []safetensors.Tensor
		cfg            map[string]any
		bias, qkNorm   bool
		ropeBase       float32
		headDim, count int
	}{
		{"qwen2", bias, nil, true, false, 500000, tHeadDim, 3 + 12*tLayers},
		// transformers 5 writes rope_parameters; Qwen3 sets head_dim.
		{"qwen3", norm, map[string]any{"head_dim": tHeadDim, "rope_theta": nil, "rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}}, false, true, 1e6, tHeadDim, 3 + 11*tLayers},
	}
	for _, c := range cases {
		t.Run(c.modelType, func(t *testing.T) {
			dir := writeHF(t, hfConfigJSON(c.modelType, c.cfg), hfTensors(true, true, c.extra), nil)
			m, err := Open(filepath.Join(dir, "config.json"))
			require.NoError(t, err)
			defer m.Close()
			require.Equal(t, c.modelType, m.HParams.Arch)
			require.Equal(t, c.bias, m.HParams.QKVBias)
			require.Equal(t, c.qkNorm, m.HParams.QKNorm)
			require.Equal(t, c.ropeBase, m.HParams.RopeBase)
			require.Equal(t, ir.RopeHalf, m.HParams.RopeStyle)
			require.Len(t, m.Tensors, c.count)
			if c.bias {
				require.Equal(t, []int{tKV * tHeadDim}, m.Tensors["blk.1.attn_k.bias"].Shape)
			}
			if c.qkNorm {
				require.Equal(t, []int{tHeadDim}, m.Tensors["blk.0.attn_q_norm.weight"].Shape)
			}
		})
	}
}

func TestHFTied(t *testing.T) {
	cases := []struct {
		name             string
		embed, head, tie bool
		embedBase        float32
	}{
		{"tie flag drops lm_head", true, true, true, 1000},
		{"only lm_head serves both ends", false, true, false, 2000},
		{"no lm_head", true, false, false, 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeHF(t, hfConfigJSON("llama", map[string]any{"tie_word_embeddings": c.tie}), hfTensors(c.embed, c.head, nil), nil)
			m, err := Open(dir)
			require.NoError(t, err)
			defer m.Close()
			require.True(t, m.HParams.TiedEmbedding)
			_, hasOut := m.Tensors["output.weight"]
			require.False(t, hasOut)
			d, err := m.Tensors["token_embd.weight"].Data()
			require.NoError(t, err)
			require.Equal(t, c.embedBase, math.Float32frombits(binary.LittleEndian.Uint32(d)))
		})
	}
}

func TestHFSharded(t *testing.T) {
	dir := t.TempDir()
	ts := hfTensors(true, true, nil)
	half := len(ts) / 2
	shards := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	weightMap := map[string]string{}
	for i, part := range [][]safetensors.Tensor{ts[:half], ts[half:]} {
		require.NoError(t, safetensors.WriteFile(filepath.Join(dir, shards[i]), part, nil))
		for _, tt := range part {
			weightMap[tt.Name] = shards[i]
		}
	}
	idx, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	require.NoError(t, os.WriteFile(filepath.Join(dir, safetensors.IndexName), idx, 0o644))
	cfg, _ := json.Marshal(hfConfigJSON("llama", nil))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644))
	m, err := Open(dir)
	require.NoError(t, err)
	defer m.Close()
	require.Len(t, m.Tensors, 3+9*tLayers)
	d, err := m.Tensors["blk.1.ffn_norm.weight"].Data()
	require.NoError(t, err)
	require.Equal(t, float32(90), math.Float32frombits(binary.LittleEndian.Uint32(d)))
}

func TestHFFP8(t *testing.T) {
	// q_proj of layer 0 stored as FP8 with one 128×128 block scale:
	// 0x38 = 1.0, 0x40 = 2.0, 0xC4 = -3.0, 0x01 = 2^-9; scale 0.5.
	fp8 := func(p string) []safetensors.Tensor {
		if p != "model.layers.0." {
			return nil
		}
		w := make([]byte, tHeads*tHeadDim*tHidden)
		w[0], w[1], w[2], w[len(w)-1] = 0x38, 0x40, 0xC4, 0x01
		return []safetensors.Tensor{
			{Name: p + "self_attn.q_proj.weight", DType: "F8_E4M3", Shape: []int{tHeads * tHeadDim, tHidden}, Data: w},
			f32Tensor(p+"self_attn.q_proj.weight_scale_inv", 0.5, 1, 1),
		}
	}
	ts := hfTensors(true, true, nil)
	var kept []safetensors.Tensor
	for _, tt := range ts {
		if tt.Name != "model.layers.0.self_attn.q_proj.weight" {
			kept = append(kept, tt)
		}
	}
	kept = append(kept, fp8("model.layers.0.")...)
	dir := writeHF(t, hfConfigJSON("llama", nil), kept, nil)
	m, err := Open(dir)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, "F8_E4M3", m.FileType)
	q := m.Tensors["blk.0.attn_q.weight"]
	require.Equal(t, dtype.BF16, q.Type)
	require.Equal(t, []int{tHidden, tHeads * tHeadDim}, q.Shape)
	require.Contains(t, m.Skipped, "model.layers.0.self_attn.q_proj.weight_scale_inv")
	d, err := q.Data()
	require.NoError(t, err)
	require.Len(t, d, 2*tHeads*tHeadDim*tHidden)
	bf := func(i int) float32 { return dtype.BF16ToF32(binary.LittleEndian.Uint16(d[2*i:])) }
	require.Equal(t, float32(0.5), bf(0))
	require.Equal(t, float32(1), bf(1))
	require.Equal(t, float32(-1.5), bf(2))
	require.Equal(t, float32(0), bf(3))
	require.Equal(t, float32(1.0/1024), bf(len(d)/2-1))
}

// TestHFYarn reads YaRN rope_scaling from config.json: Qwen2.5's published
// form, the optional keys, transformers 5's rope_parameters and the factor
// transformers derives when a config gives none.
func TestHFYarn(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  map[string]any
		rs   ir.RopeScaling
		ctx  int
	}{
		{"qwen2.5", map[string]any{"rope_scaling": map[string]any{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}},
			ir.RopeScaling{Type: "yarn", Factor: 4, OriginalContext: 256}, 1024},
		{"no original context", map[string]any{"rope_scaling": map[string]any{"type": "yarn", "factor": 2.0}},
			ir.RopeScaling{Type: "yarn", Factor: 2, OriginalContext: 256}, 512},
		{"all keys", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
			"beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 0.5, "attention_factor": 1.5, "truncate": true}},
			ir.RopeScaling{Type: "yarn", Factor: 40, OriginalContext: 64, BetaFast: 16, BetaSlow: 2, Mscale: 0.707, MscaleAllDim: 0.5, AttnFactor: 1.5}, 2560},
		{"rope_parameters without factor", map[string]any{"max_position_embeddings": 1024, "rope_parameters": map[string]any{
			"rope_type": "yarn", "rope_theta": 1e6, "original_max_position_embeddings": 128}},
			ir.RopeScaling{Type: "yarn", Factor: 8, OriginalContext: 128}, 1024},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := Open(writeHF(t, hfConfigJSON("qwen2", c.cfg), hfTensors(true, true, nil), nil))
			require.NoError(t, err)
			defer m.Close()
			require.Equal(t, c.rs, m.HParams.RopeScaling)
			require.Equal(t, c.ctx, m.HParams.ContextLength)
		})
	}
}

func TestHFErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  map[string]any
		ts   []safetensors.Tensor
		want error
		msg  string
	}{
		{"unknown arch", hfConfigJSON("gpt_neox", map[string]any{"architectures": []string{"GPTNeoXForCausalLM"}}), hfTensors(true, true, nil), ErrArch, "gpt_neox"},
		{"zero heads", hfConfigJSON("llama", map[string]any{"num_attention_heads": 0}), hfTensors(true, true, nil), ErrMetadata, "num_attention_heads"},
		{"bad rope", hfConfigJSON("llama", map[string]any{"rope_scaling": map[string]any{"type": "dynamic", "factor": 2.0}}), hfTensors(true, true, nil), ErrMetadata, "dynamic"},
		{"yarn truncate", hfConfigJSON("llama", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 2.0, "truncate": false}}), hfTensors(true, true, nil), ErrMetadata, "truncate false"},
		{"vocab mismatch", hfConfigJSON("llama", map[string]any{"vocab_size": 11}), hfTensors(true, true, nil), ErrMetadata, "vocab_size 11"},
		{"no embedding", hfConfigJSON("llama", nil), hfTensors(false, false, nil), ErrTensor, "embed_tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(writeHF(t, c.cfg, c.ts, nil))
			require.ErrorIs(t, err, c.want)
			require.ErrorContains(t, err, c.msg)
		})
	}
	dir := writeHF(t, hfConfigJSON("llama", nil), hfTensors(true, true, nil), nil)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"), 0o644))
	_, err := Open(dir)
	require.ErrorIs(t, err, ErrMetadata)
	require.ErrorContains(t, err, "config.json")
}

func TestGGUFName(t *testing.T) {
	cases := map[string]string{
		"model.embed_tokens.weight":                      "token_embd.weight",
		"lm_head.weight":                                 "output.weight",
		"model.norm.weight":                              "output_norm.weight",
		"model.layers.12.self_attn.o_proj.weight":        "blk.12.attn_output.weight",
		"model.layers.3.self_attn.v_proj.bias":           "blk.3.attn_v.bias",
		"model.layers.0.self_attn.k_norm.weight":         "blk.0.attn_k_norm.weight",
		"model.layers.7.post_attention_layernorm.weight": "blk.7.ffn_norm.weight",
		"model.layers.x.mlp.up_proj.weight":              "",
		"model.layers.01.mlp.up_proj.weight":             "",
		"model.layers.1.mlp.up_proj.weight_scale_inv":    "",
		"model.rotary_emb.inv_freq":                      "",
	}
	for hf, want := range cases {
		got, ok := GGUFName(hf)
		require.Equal(t, want != "", ok, hf)
		require.Equal(t, want, got, hf)
	}
}

// HFName is GGUFName's inverse for every tensor of the three families.
func TestHFNameInvertsGGUFName(t *testing.T) {
	names := []string{"token_embd.weight", "output_norm.weight", "output.weight"}
	for _, g := range hfLayerNames {
		names = append(names, "blk.7."+g+".weight", "blk.12."+g+".bias")
	}
	for _, g := range names {
		hf, ok := HFName(g)
		require.True(t, ok, g)
		back, ok := GGUFName(hf)
		require.True(t, ok, hf)
		require.Equal(t, g, back)
	}
	for _, g := range []string{"rope_freqs.weight", "blk.x", "blk.1.nope.weight"} {
		_, ok := HFName(g)
		require.False(t, ok, g)
	}
}
