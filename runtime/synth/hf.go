package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/safetensors"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// hfShardBytes bounds one safetensors shard of a written checkpoint.
const hfShardBytes = 2 << 30

var hfArchitectures = map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
	"gemma2": "Gemma2ForCausalLM", "gemma3": "Gemma3ForCausalLM",
	"qwen3moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM"}

// hfConfig returns config.json for a plan.
func (pl *Plan) hfConfig(torchDType string, v *tokenizer.Vocab) map[string]any {
	hp := pl.HParams
	c := map[string]any{
		"architectures":           []string{hfArchitectures[hp.Arch]},
		"model_type":              hp.Arch,
		"hidden_size":             hp.Embedding,
		"intermediate_size":       hp.FFN,
		"num_hidden_layers":       hp.Layers,
		"num_attention_heads":     hp.Heads,
		"num_key_value_heads":     hp.HeadsKV,
		"head_dim":                hp.HeadDim,
		"max_position_embeddings": hp.ContextLength,
		"rms_norm_eps":            hp.RMSEps,
		"rope_theta":              hp.RopeBase,
		"vocab_size":              hp.VocabSize,
		"tie_word_embeddings":     hp.TiedEmbedding,
		"hidden_act":              "silu",
		"torch_dtype":             torchDType,
		"attention_dropout":       0.0,
		"initializer_range":       0.02,
		"use_cache":               true,
	}
	if hp.Arch == "llama" {
		c["attention_bias"] = false
		c["mlp_bias"] = false
	}
	if hp.Arch == "qwen3" {
		c["attention_bias"] = false
	}
	hfMoEConfig(hp, c)
	if v.BOS >= 0 {
		c["bos_token_id"] = v.BOS
	}
	if v.EOS >= 0 {
		c["eos_token_id"] = v.EOS
	}
	if rs := hp.RopeScaling; rs.Type == "llama3" {
		c["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": rs.Factor,
			"low_freq_factor": rs.LowFreqFactor, "high_freq_factor": rs.HighFreqFactor,
			"original_max_position_embeddings": rs.OriginalContext}
	}
	if rs := hp.RopeScaling; rs.Type == "yarn" {
		c["rope_scaling"] = map[string]any{"type": "yarn", "factor": rs.Factor,
			"original_max_position_embeddings": rs.OriginalContext}
	}
	if isGemma(hp.Arch) {
		gemmaHFConfig(c, hp)
	}
	return c
}

// WriteHF writes the model o describes as a Hugging Face checkpoint folder:
// config.json, model*.safetensors (with an index when sharded),
// tokenizer.json and tokenizer_config.json. Weights are the same values a
// GGUF written with the same options holds, in rotate-half Q/K order. Only
// float types can be stored: f32, f16 or bf16.
func WriteHF(dir string, o Options) (*Plan, error) {
	pl, err := NewPlan(o)
	if err != nil {
		return nil, err
	}
	var st string
	var torch string
	for _, t := range pl.Tensors {
		if t.spec.kind != kindMatrix {
			continue
		}
		switch t.Type {
		case dtype.F32:
			st, torch = "F32", "float32"
		case dtype.F16:
			st, torch = "F16", "float16"
		case dtype.BF16:
			st, torch = "BF16", "bfloat16"
		default:
			return nil, fmt.Errorf("%w: a Hugging Face checkpoint holds f32, f16 or bf16, not %s", ErrOptions, pl.Mix)
		}
		break
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	v, err := pl.vocab()
	if err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), pl.hfConfig(torch, v)); err != nil {
		return nil, err
	}
	if err := pl.writeSentenceTransformers(dir); err != nil {
		return nil, err
	}
	if err := pl.writeHFTokenizer(dir, v); err != nil {
		return nil, err
	}
	if err := pl.writeHFWeights(dir, st, o); err != nil {
		return nil, err
	}
	return pl, nil
}

func (pl *Plan) writeHFTokenizer(dir string, v *tokenizer.Vocab) error {
	tok, err := tokenizer.New(v)
	if err != nil {
		return fmt.Errorf("synth: tokenizer: %w", err)
	}
	tj, cj, err := tok.HFJSON()
	if err != nil {
		return fmt.Errorf("synth: tokenizer.json: %w", err)
	}
	if pl.Preset.Template != "" {
		t, err := asset(pl.Preset.Template)
		if err != nil {
			return err
		}
		var cfg map[string]any
		if err := json.Unmarshal(cj, &cfg); err != nil {
			return fmt.Errorf("synth: tokenizer_config.json: %w", err)
		}
		cfg["chat_template"] = string(t)
		if cj, err = json.MarshalIndent(cfg, "", "  "); err != nil {
			return fmt.Errorf("synth: tokenizer_config.json: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cj, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// writeHFWeights writes the tensors in shards of at most hfShardBytes.
func (pl *Plan) writeHFWeights(dir, st string, o Options) error {
	type entry struct {
		t           *PlannedTensor
		name        string
		part, parts int // an expert's part of a 3-D tensor (parts 1: the whole tensor)
	}
	var shards [][]entry
	var cur []entry
	var curBytes, total int64
	for i := range pl.Tensors {
		t := &pl.Tensors[i]
		if t.spec.kind == kindFreqs {
			continue // Llama 3.1 frequencies come from config.json's rope_scaling
		}
		names, ok := hfNames(pl.HParams, t.Name)
		if !ok {
			return fmt.Errorf("synth: no Hugging Face name for tensor %s", t.Name)
		}
		for p, name := range names {
			if pl.Pooling != "" {
				name = strings.TrimPrefix(name, "model.") // the Qwen3-Embedding layout
			}
			size := int64(t.spec.elems()/len(names)) * int64(safetensors.ElemSize(hfDType(st, t)))
			if len(cur) > 0 && curBytes+size > hfShardBytes {
				shards = append(shards, cur)
				cur, curBytes = nil, 0
			}
			cur = append(cur, entry{t, name, p, len(names)})
			curBytes += size
			total += size
		}
	}
	shards = append(shards, cur)
	weightMap := map[string]string{}
	var done int64
	var all []float32 // the values of the last tensor, for its experts' parts
	var of *PlannedTensor
	for i, sh := range shards {
		file := "model.safetensors"
		if len(shards) > 1 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		tensors := make([]safetensors.Tensor, 0, len(sh))
		for _, e := range sh {
			if of != e.t {
				all, of = floats(o.Seed, pl.HParams, &e.t.spec), e.t
			}
			n := len(all) / e.parts
			x := all[e.part*n : (e.part+1)*n]
			dt := hfDType(st, e.t)
			typ := map[string]dtype.Type{"F32": dtype.F32, "F16": dtype.F16, "BF16": dtype.BF16}[dt]
			b, err := encode(typ, e.t.spec.ne[0], x)
			if err != nil {
				return fmt.Errorf("synth: tensor %s: %w", e.name, err)
			}
			ne := e.t.Shape
			if e.parts > 1 {
				ne = ne[:len(ne)-1] // an expert of the 3-D tensor
			}
			shape := make([]int, len(ne))
			for j, d := range ne {
				shape[len(shape)-1-j] = d
			}
			tensors = append(tensors, safetensors.Tensor{Name: e.name, DType: dt, Shape: shape, Data: b})
			weightMap[e.name] = file
			done += int64(len(b))
			if o.Progress != nil {
				o.Progress(done, total)
			}
		}
		if err := safetensors.WriteFile(filepath.Join(dir, file), tensors, map[string]string{"format": "pt"}); err != nil {
			return err
		}
	}
	if len(shards) > 1 {
		idx := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}
		return writeJSON(filepath.Join(dir, "model.safetensors.index.json"), idx)
	}
	return nil
}

// hfDType is the stored type of a tensor in the checkpoint: matrices in the
// checkpoint's type, norms and biases in float32 exactly as the GGUF twin
// stores them, so both files hold the same values.
func hfDType(st string, t *PlannedTensor) string {
	if t.spec.kind == kindMatrix {
		return st
	}
	return "F32"
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// writeSentenceTransformers writes, for an embedding variant, the
// sentence-transformers modules of the Qwen3-Embedding layout:
// modules.json (Transformer, Pooling, Normalize), 1_Pooling/config.json
// with the plan's pooling, and an empty 2_Normalize.
func (pl *Plan) writeSentenceTransformers(dir string) error {
	if pl.Pooling == "" {
		return nil
	}
	mods := []map[string]any{
		{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
		{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
	}
	if err := writeJSON(filepath.Join(dir, "modules.json"), mods); err != nil {
		return err
	}
	for _, d := range []string{"1_Pooling", "2_Normalize"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	cfg := map[string]any{"word_embedding_dimension": pl.HParams.Embedding,
		"pooling_mode_cls_token": pl.Pooling == "cls", "pooling_mode_mean_tokens": pl.Pooling == "mean",
		"pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false,
		"pooling_mode_weightedmean_tokens": false, "pooling_mode_lasttoken": pl.Pooling == "last", "include_prompt": true}
	return writeJSON(filepath.Join(dir, "1_Pooling", "config.json"), cfg)
}
