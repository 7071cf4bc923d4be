package load

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/format/safetensors"
)

// gemmaHFTensors is a Gemma checkpoint: the llama layout with Gemma's
// four layer norms (post_attention_layernorm is a post-norm here),
// prefixed by prefix ("model." for a causal LM).
func gemmaHFTensors(prefix string, qkNorm bool) []safetensors.Tensor {
	ts := []safetensors.Tensor{f32Tensor(prefix+"embed_tokens.weight", 1000, tVocab, tHidden), f32Tensor(prefix+"norm.weight", 0.5, tHidden)}
	for l := range tLayers {
		p := prefix + "layers." + string(rune('0'+l)) + "."
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
			f32Tensor(p+"pre_feedforward_layernorm.weight", 100, tHidden),
			f32Tensor(p+"post_feedforward_layernorm.weight", -0.25, tHidden),
		)
		if qkNorm {
			ts = append(ts, f32Tensor(p+"self_attn.q_norm.weight", 110, tHeadDim), f32Tensor(p+"self_attn.k_norm.weight", 120, tHeadDim))
		}
	}
	return ts
}

// firstLast returns a tensor's first and last float32 elements.
func firstLast(t *testing.T, tt *Tensor) (float32, float32) {
	d, err := tt.Data()
	require.NoError(t, err)
	f := func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:])) }
	return f(0), f(len(d)/4 - 1)
}

func TestHFGemma2(t *testing.T) {
	cfg := hfConfigJSON("gemma2", map[string]any{"architectures": []string{"Gemma2ForCausalLM"}, "head_dim": tHeadDim,
		"query_pre_attn_scalar": 224, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
		"sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh", "rope_theta": 10000.0, "tie_word_embeddings": true})
	m, err := Open(writeHF(t, cfg, gemmaHFTensors("model.", false), nil))
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, ir.HParams{Arch: "gemma2", Name: m.HParams.Name, ContextLength: 256, Embedding: tHidden, Layers: tLayers, FFN: tFFN,
		Heads: tHeads, HeadsKV: tKV, HeadDim: tHeadDim, RopeDim: tHeadDim, RopeBase: 10000, RopeStyle: ir.RopeHalf, RMSEps: 1e-6,
		VocabSize: tVocab, TiedEmbedding: true, AttnScale: float32(1 / math.Sqrt(224)), AttnSoftcap: 50, FinalSoftcap: 30,
		SlidingWindow: 4096, SlidingPattern: 2}, m.HParams)
	// the norms, stored as w and applied as 1 + w, come as float32 1 + w; other tensors as stored
	for name, want := range map[string][2]float32{
		"blk.0.attn_norm.weight":           {81, 80 + tHidden},
		"blk.1.post_attention_norm.weight": {91, 90 + tHidden},
		"blk.0.ffn_norm.weight":            {101, 100 + tHidden},
		"blk.1.post_ffw_norm.weight":       {0.75, 0.75 + tHidden - 1},
		"output_norm.weight":               {1.5, 1.5 + tHidden - 1},
		"blk.0.ffn_up.weight":              {60, 60 + tHidden*tFFN - 1},
	} {
		tt, ok := m.Tensors[name]
		require.True(t, ok, name)
		require.Equal(t, dtype.F32, tt.Type, name)
		a, b := firstLast(t, tt)
		require.Equal(t, want, [2]float32{a, b}, name)
	}
	require.Len(t, m.Tensors, 2+11*tLayers)

	// bf16 norms too (a float32 1 + w), and the caps: null is none
	cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"] = nil, nil
	ts := gemmaHFTensors("model.", false)
	for i := range ts {
		if strings.HasSuffix(ts[i].Name, "layernorm.weight") {
			b := make([]byte, 2*tHidden)
			for j := range tHidden {
				binary.LittleEndian.PutUint16(b[2*j:], 0x3e80) // 0.25
			}
			ts[i].DType, ts[i].Data = "BF16", b
		}
	}
	m2, err := Open(writeHF(t, cfg, ts, nil))
	require.NoError(t, err)
	defer m2.Close()
	require.Zero(t, m2.HParams.AttnSoftcap)
	require.Zero(t, m2.HParams.FinalSoftcap)
	tt := m2.Tensors["blk.1.post_ffw_norm.weight"]
	require.Equal(t, dtype.F32, tt.Type)
	a, b := firstLast(t, tt)
	require.Equal(t, [2]float32{1.25, 1.25}, [2]float32{a, b})

	// absent caps are Gemma 2's defaults; another activation is refused
	delete(cfg, "attn_logit_softcapping")
	cfg["hidden_activation"] = "relu"
	_, err = Open(writeHF(t, cfg, gemmaHFTensors("model.", false), nil))
	require.ErrorIs(t, err, ErrMetadata)
	cfg["hidden_activation"] = "gelu_pytorch_tanh"
	m3, err := Open(writeHF(t, cfg, gemmaHFTensors("model.", false), nil))
	require.NoError(t, err)
	defer m3.Close()
	require.Equal(t, float32(50), m3.HParams.AttnSoftcap)
}

// A Gemma 3 multimodal checkpoint: the text_config (mostly transformers'
// defaults) and the language model's tensors under their prefix; the
// vision tower is skipped.
func TestHFGemma3Multimodal(t *testing.T) {
	for _, prefix := range []string{"language_model.model.", "model.language_model."} {
		cfg := map[string]any{"architectures": []string{"Gemma3ForConditionalGeneration"}, "model_type": "gemma3",
			"text_config": map[string]any{"model_type": "gemma3_text", "hidden_size": tHidden, "intermediate_size": tFFN,
				"num_hidden_layers": tLayers, "num_attention_heads": tHeads, "num_key_value_heads": tKV, "head_dim": tHeadDim,
				"vocab_size": tVocab, "rope_scaling": map[string]any{"rope_type": "linear", "factor": 8.0}, "sliding_window": 1024}}
		ts := append(gemmaHFTensors(prefix, true), f32Tensor("vision_tower.vision_model.post_layernorm.weight", 0, 4),
			f32Tensor("multi_modal_projector.mm_input_projection_weight", 0, 4, 4))
		m, err := Open(writeHF(t, cfg, ts, nil))
		require.NoError(t, err, prefix)
		require.Equal(t, ir.HParams{Arch: "gemma3", Name: m.HParams.Name, ContextLength: 131072, Embedding: tHidden, Layers: tLayers, FFN: tFFN,
			Heads: tHeads, HeadsKV: tKV, HeadDim: tHeadDim, RopeDim: tHeadDim, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6,
			RopeScaling: ir.RopeScaling{Type: "linear", Factor: 8}, VocabSize: tVocab, TiedEmbedding: true, QKNorm: true,
			AttnScale: 1.0 / 16, SlidingWindow: 1024, SlidingPattern: 6, RopeBaseLocal: 10000}, m.HParams, prefix)
		require.ElementsMatch(t, []string{"vision_tower.vision_model.post_layernorm.weight", "multi_modal_projector.mm_input_projection_weight"}, m.Skipped)
		a, _ := firstLast(t, m.Tensors["blk.1.attn_k_norm.weight"])
		require.Equal(t, float32(121), a)
		require.NoError(t, m.Close())
	}
}

// transformers 5 configs: rope parameters by layer type, layer_types.
func TestHFGemma3RopeParameters(t *testing.T) {
	types := []string{"sliding_attention", "full_attention"}
	cfg := hfConfigJSON("gemma3_text", map[string]any{"architectures": []string{"Gemma3ForCausalLM"}, "head_dim": tHeadDim,
		"query_pre_attn_scalar": 168, "sliding_window": 512, "layer_types": types, "rope_theta": nil,
		"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 20000.0}}})
	m, err := Open(writeHF(t, cfg, gemmaHFTensors("model.", true), nil))
	require.NoError(t, err)
	defer m.Close()
	hp := m.HParams
	require.Equal(t, float32(1e6), hp.RopeBase)
	require.Equal(t, ir.RopeScaling{Type: "linear", Factor: 4}, hp.RopeScaling)
	require.Equal(t, float32(20000), hp.RopeBaseLocal)
	require.Equal(t, 2, hp.SlidingPattern)
	require.Equal(t, 512, hp.SlidingWindow)
	require.InDelta(t, 1/math.Sqrt(168), hp.AttnScale, 1e-8)

	cfg["layer_types"] = []string{"full_attention", "sliding_attention"}
	_, err = Open(writeHF(t, cfg, gemmaHFTensors("model.", true), nil))
	require.ErrorIs(t, err, ErrMetadata, "a global first layer follows no pattern")
	require.ErrorContains(t, err, "layer_types")
}

func TestGemmaNames(t *testing.T) {
	for hf, want := range map[string]string{
		"model.layers.3.post_attention_layernorm.weight":                "blk.3.post_attention_norm.weight",
		"model.layers.3.pre_feedforward_layernorm.weight":               "blk.3.ffn_norm.weight",
		"model.layers.3.post_feedforward_layernorm.weight":              "blk.3.post_ffw_norm.weight",
		"model.layers.0.self_attn.q_norm.weight":                        "blk.0.attn_q_norm.weight",
		"language_model.model.layers.12.mlp.down_proj.weight":           "blk.12.ffn_down.weight",
		"model.language_model.layers.1.input_layernorm.weight":          "blk.1.attn_norm.weight",
		"model.language_model.embed_tokens.weight":                      "token_embd.weight",
		"language_model.lm_head.weight":                                 "output.weight",
		"model.layers.01.post_feedforward_layernorm.weight":             "",
		"vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight":     "",
		"model.layers.2.post_feedforward_layernorm.inv_freq":            "",
		"language_model.model.layers.0.post_attention_layernorm.weight": "blk.0.post_attention_norm.weight",
	} {
		got, ok := GGUFNameFor("gemma3", hf)
		require.Equal(t, want != "", ok, hf)
		require.Equal(t, want, got, hf)
		if ok && !strings.Contains(hf, "language_model") {
			back, ok := HFNameFor("gemma3", got)
			require.True(t, ok, got)
			require.Equal(t, hf, back)
		}
	}
	// llama keeps its meaning of post_attention_layernorm
	g, _ := GGUFNameFor("llama", "model.layers.3.post_attention_layernorm.weight")
	require.Equal(t, "blk.3.ffn_norm.weight", g)
	h, _ := HFNameFor("gemma2", "blk.3.ffn_norm.weight")
	require.Equal(t, "model.layers.3.pre_feedforward_layernorm.weight", h)
}

// A GGUF file of llama.cpp's gemma2 and gemma3 metadata (the stories
// fixture renamed).
func TestGGUFGemma(t *testing.T) {
	open := func(t *testing.T, arch string, kvs map[string]any) (*Model, error) {
		p := readParts(t, storiesPath)
		for i := range p.KVs {
			if rest, ok := strings.CutPrefix(p.KVs[i].Key, "llama."); ok {
				p.KVs[i].Key = arch + "." + rest
			}
		}
		p.setKV("general.architecture", arch)
		if arch == "gemma3" {
			p.setKV("gemma3.attention.sliding_window", uint32(1024))
		}
		for k, v := range kvs {
			p.setKV(k, v)
		}
		m, err := Open(writeFile(t, arch+".gguf", p.encode(t)))
		if m != nil {
			t.Cleanup(func() { m.Close() })
		}
		return m, err
	}
	m, err := open(t, "gemma2", map[string]any{"gemma2.attn_logit_softcapping": float32(50), "gemma2.final_logit_softcapping": float32(30),
		"gemma2.attention.sliding_window": uint32(4096)})
	require.NoError(t, err)
	hp := m.HParams
	require.Equal(t, [5]float64{50, 30, 4096, 2, 0}, [5]float64{float64(hp.AttnSoftcap), float64(hp.FinalSoftcap), float64(hp.SlidingWindow),
		float64(hp.SlidingPattern), float64(hp.RopeBaseLocal)})
	require.Zero(t, hp.AttnScale, "1/√head_dim: the graph's default")
	require.Equal(t, ir.RopeHalf, hp.RopeStyle)

	// a Gemma 2 file converted before the keys existed: llama.cpp's defaults
	m, err = open(t, "gemma2", nil)
	require.NoError(t, err)
	hp = m.HParams
	require.Equal(t, [3]float64{50, 30, 4096}, [3]float64{float64(hp.AttnSoftcap), float64(hp.FinalSoftcap), float64(hp.SlidingWindow)})

	m, err = open(t, "gemma3", map[string]any{"gemma3.attention.sliding_window": uint32(1024), "gemma3.rope.scaling.type": "linear",
		"gemma3.rope.scaling.factor": float32(8), "gemma3.attention.scale": float32(0.125)})
	require.NoError(t, err)
	hp = m.HParams
	require.Equal(t, 6, hp.SlidingPattern)
	require.Equal(t, float32(10000), hp.RopeBaseLocal)
	require.Equal(t, float32(0.125), hp.AttnScale)
	require.Zero(t, hp.AttnSoftcap)
	require.Equal(t, ir.RopeScaling{Type: "linear", Factor: 8}, hp.RopeScaling)

	// Gemma 3's window is required
	{
		p := readParts(t, storiesPath)
		for i := range p.KVs {
			if rest, ok := strings.CutPrefix(p.KVs[i].Key, "llama."); ok {
				p.KVs[i].Key = "gemma3." + rest
			}
		}
		p.setKV("general.architecture", "gemma3")
		_, err := Open(writeFile(t, "nowindow.gguf", p.encode(t)))
		require.ErrorIs(t, err, ErrMetadata)
		require.ErrorContains(t, err, "gemma3.attention.sliding_window")
	}

	// the 27B rule: 1/√(dim/heads) without a key, as llama.cpp takes it
	parts := readParts(t, storiesPath)
	parts.setKV("gemma3.attention.sliding_window", uint32(1024))
	f, err := gguf.Parse(parts.encode(t))
	require.NoError(t, err)
	for _, c := range []struct {
		arch   string
		layers int
		want   float32
	}{{"gemma3", 62, float32(1 / math.Sqrt(5376.0/32))}, {"gemma2", 46, float32(1 / math.Sqrt(4608.0/32))}, {"gemma3", 48, 0}} {
		hp := ir.HParams{Arch: c.arch, Layers: c.layers, Embedding: map[int]int{62: 5376, 46: 4608, 48: 3840}[c.layers], Heads: 32}
		g := ggufMeta{f: f, path: "x.gguf", arch: c.arch}
		require.NoError(t, g.gemmaGGUF(&hp))
		require.Equal(t, c.want, hp.AttnScale, "%s, %d layers", c.arch, c.layers)
	}

	// a per-layer pattern: stories has 5 layers
	m, err = open(t, "gemma3", map[string]any{"gemma3.attention.sliding_window_pattern": []bool{true, true, false, true, true}})
	require.NoError(t, err)
	require.Equal(t, 3, m.HParams.SlidingPattern)
	m, err = open(t, "gemma3", map[string]any{"gemma3.attention.sliding_window_pattern": uint32(4), "gemma3.rope.freq_base_swa": float32(5000)})
	require.NoError(t, err)
	require.Equal(t, 4, m.HParams.SlidingPattern)
	require.Equal(t, float32(5000), m.HParams.RopeBaseLocal)
	for _, kvs := range []map[string]any{
		{"gemma3.attention.sliding_window": "wide"},
		{"gemma3.attention.sliding_window_pattern": []bool{true, false, true, true, false}},
		{"gemma3.attention.sliding_window_pattern": []bool{true, false}},
		{"gemma3.attention.scale": float32(-1)},
		{"gemma3.attn_logit_softcapping": float32(math.NaN())},
	} {
		_, err := open(t, "gemma3", kvs)
		require.ErrorIs(t, err, ErrMetadata, "%v", kvs)
	}
}
