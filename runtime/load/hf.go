package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/safetensors"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// hfConfig is the part of a Hugging Face config.json memra reads.
type hfConfig struct {
	Architectures         []string `json:"architectures"`
	ModelType             string   `json:"model_type"`
	NameOrPath            string   `json:"_name_or_path"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      *int     `json:"num_key_value_heads"`
	HeadDim               *int     `json:"head_dim"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             *float64 `json:"rope_theta"`
	RopeScaling           *hfRope  `json:"rope_scaling"`
	RopeParameters        *hfRope  `json:"rope_parameters"` // transformers ≥ 5
	VocabSize             int      `json:"vocab_size"`
	TieWordEmbeddings     *bool    `json:"tie_word_embeddings"`

	gemma *gemmaConfig // a Gemma checkpoint's own fields (hfGemmaConfig)
	// mixture of experts (moe.go)
	NumExperts          int   `json:"num_experts"`       // qwen3_moe
	NumLocalExperts     int   `json:"num_local_experts"` // mixtral
	NumExpertsPerTok    int   `json:"num_experts_per_tok"`
	MoEIntermediateSize int   `json:"moe_intermediate_size"` // qwen3_moe (mixtral: intermediate_size)
	NormTopKProb        bool  `json:"norm_topk_prob"`
	DecoderSparseStep   int   `json:"decoder_sparse_step"`
	MLPOnlyLayers       []int `json:"mlp_only_layers"`
}

// hfRope is rope_scaling (or transformers 5's rope_parameters).
type hfRope struct {
	RopeType        string   `json:"rope_type"`
	Type            string   `json:"type"`
	RopeTheta       *float64 `json:"rope_theta"`
	Factor          float64  `json:"factor"`
	LowFreqFactor   float64  `json:"low_freq_factor"`
	HighFreqFactor  float64  `json:"high_freq_factor"`
	OriginalContext int      `json:"original_max_position_embeddings"`
	AttnFactor      float64  `json:"attention_factor"`
	BetaFast        float64  `json:"beta_fast"`
	BetaSlow        float64  `json:"beta_slow"`
	Mscale          float64  `json:"mscale"`
	MscaleAllDim    float64  `json:"mscale_all_dim"`
	Truncate        *bool    `json:"truncate"`
}

// hfArchs maps model_type and architectures[0] to memra's arch names.
var hfArchs = map[string]string{
	"llama": "llama", "LlamaForCausalLM": "llama",
	"qwen2": "qwen2", "Qwen2ForCausalLM": "qwen2",
	"qwen3": "qwen3", "Qwen3ForCausalLM": "qwen3",
	"gemma2": "gemma2", "Gemma2ForCausalLM": "gemma2",
	"gemma3_text": "gemma3", "Gemma3ForCausalLM": "gemma3", "gemma3": "gemma3", "Gemma3ForConditionalGeneration": "gemma3",
	"qwen3_moe": "qwen3moe", "Qwen3MoeForCausalLM": "qwen3moe",
	"mixtral": "mixtral", "MixtralForCausalLM": "mixtral",
}

// openHF opens a Hugging Face checkpoint folder.
func openHF(dir string) (*Model, error) {
	cfgPath := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no config.json", ErrFormat, dir)
		}
		return nil, fmt.Errorf("load: %w", err)
	}
	var cfg hfConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMetadata, cfgPath, err)
	}
	if err := hfGemmaConfig(cfgPath, raw, &cfg); err != nil {
		return nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Path: dir, Format: FormatSafetensors, Tensors: map[string]*Tensor{}, closers: []io.Closer{set}}
	if err := m.fillHF(dir, cfgPath, &cfg, set); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Model) fillHF(dir, cfgPath string, cfg *hfConfig, set *safetensors.Set) error {
	hp, err := hfHParams(cfgPath, cfg, dir)
	if err != nil {
		return err
	}
	fp8, err := m.mapHFTensors(set, cfg, hp)
	if err != nil {
		return err
	}
	_, hasOutput := m.Tensors["output.weight"]
	hp.TiedEmbedding = !hasOutput
	_, hp.QKVBias = m.Tensors["blk.0.attn_q.bias"]
	_, hp.QKNorm = m.Tensors["blk.0.attn_q_norm.weight"]
	if t, ok := m.Tensors["token_embd.weight"]; ok && len(t.Shape) == 2 {
		if hp.VocabSize != 0 && hp.VocabSize != t.Shape[1] {
			return fmt.Errorf("%w: %s: vocab_size %d but the embedding has %d rows", ErrMetadata, cfgPath, hp.VocabSize, t.Shape[1])
		}
		hp.VocabSize = t.Shape[1]
	}
	m.HParams = hp
	m.FileType = hfFileType(m, fp8)
	if m.Pooling, err = hfPooling(dir); err != nil {
		return err
	}
	if m.Pooling == "" && hp.Arch == "qwen3" && flatBackbone(set.Names()) {
		m.Pooling = PoolLast
	}
	if err := m.hfTokenizer(dir); err != nil {
		return err
	}
	if err := checkHParams(cfgPath, hp, hfKeys); err != nil {
		return err
	}
	return checkTensors(dir, m, hfKeys)
}

// hfHParams maps config.json to HParams.
func hfHParams(path string, cfg *hfConfig, dir string) (ir.HParams, error) {
	var hp ir.HParams
	arch := hfArchs[cfg.ModelType]
	if arch == "" && len(cfg.Architectures) > 0 {
		arch = hfArchs[cfg.Architectures[0]]
	}
	if arch == "" {
		return hp, fmt.Errorf("%w: %s: model_type %q, architectures %v (want llama, qwen2, qwen3, qwen3_moe, mixtral, gemma2 or gemma3)", ErrArch, path, cfg.ModelType, cfg.Architectures)
	}
	hp.Arch = arch
	hp.Name = cfg.NameOrPath
	if hp.Name == "" {
		hp.Name = filepath.Base(filepath.Clean(dir))
	}
	for key, v := range map[string]int{
		"hidden_size": cfg.HiddenSize, "intermediate_size": cfg.IntermediateSize,
		"num_hidden_layers": cfg.NumHiddenLayers, "num_attention_heads": cfg.NumAttentionHeads,
	} {
		if v <= 0 {
			return hp, fmt.Errorf("%w: %s: %s = %d; want a positive number", ErrMetadata, path, key, v)
		}
	}
	hp.Embedding, hp.FFN, hp.Layers, hp.Heads = cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers, cfg.NumAttentionHeads
	hp.ContextLength = cfg.MaxPositionEmbeddings
	hp.HeadsKV = hp.Heads
	if cfg.NumKeyValueHeads != nil {
		hp.HeadsKV = *cfg.NumKeyValueHeads
	}
	hp.HeadDim = hp.Embedding / hp.Heads
	if cfg.HeadDim != nil && *cfg.HeadDim > 0 {
		hp.HeadDim = *cfg.HeadDim
	}
	hp.RopeDim = hp.HeadDim
	hp.RopeStyle = ir.RopeHalf // HF stores Q/K for rotate-half RoPE
	hp.RMSEps = float32(cfg.RMSNormEps)
	if hp.RMSEps == 0 {
		hp.RMSEps = 1e-6
	}
	hp.VocabSize = cfg.VocabSize
	hp.RopeBase = 10000
	if cfg.RopeTheta != nil {
		hp.RopeBase = float32(*cfg.RopeTheta)
	}
	rope := cfg.RopeScaling
	if rope == nil {
		rope = cfg.RopeParameters
	}
	if rope != nil {
		if rope.RopeTheta != nil {
			hp.RopeBase = float32(*rope.RopeTheta)
		}
		typ := rope.RopeType
		if typ == "" {
			typ = rope.Type
		}
		switch typ {
		case "", "default", "none":
		case "llama3", "linear":
			hp.RopeScaling = ir.RopeScaling{
				Type: typ, Factor: float32(rope.Factor), OriginalContext: rope.OriginalContext,
				LowFreqFactor: float32(rope.LowFreqFactor), HighFreqFactor: float32(rope.HighFreqFactor),
			}
		case "yarn":
			if rope.Truncate != nil && !*rope.Truncate {
				return hp, fmt.Errorf("%w: %s: rope_scaling truncate false is not supported", ErrMetadata, path)
			}
			factor := rope.Factor
			if factor == 0 && rope.OriginalContext > 0 {
				// transformers' rule when a yarn config gives no factor
				factor = float64(cfg.MaxPositionEmbeddings) / float64(rope.OriginalContext)
			}
			hp.RopeScaling = ir.RopeScaling{
				Type: typ, Factor: float32(factor), OriginalContext: rope.OriginalContext,
				BetaFast: float32(rope.BetaFast), BetaSlow: float32(rope.BetaSlow), AttnFactor: float32(rope.AttnFactor),
				Mscale: float32(rope.Mscale), MscaleAllDim: float32(rope.MscaleAllDim),
			}
			yarnContext(&hp)
		default:
			return hp, fmt.Errorf("%w: %s: rope_scaling type %q (want llama3, linear or yarn)", ErrMetadata, path, typ)
		}
	}
	if err := gemmaHF(path, cfg, &hp); err != nil {
		return hp, err
	}
	return hp, hfMoE(path, cfg, &hp)
}

// hfLayerNames maps the part after "model.layers.N." to the GGUF name
// after "blk.N.".
var hfLayerNames = map[string]string{
	"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
	"self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
	"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
	"mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}

// GGUFName maps a Hugging Face tensor name (llama/qwen2/qwen3 layout) to
// its GGUF name; false for names with no GGUF counterpart.
func GGUFName(hf string) (string, bool) {
	switch hf {
	case "model.embed_tokens.weight":
		return "token_embd.weight", true
	case "model.norm.weight":
		return "output_norm.weight", true
	case "lm_head.weight":
		return "output.weight", true
	}
	rest, ok := strings.CutPrefix(hf, "model.layers.")
	if !ok {
		return "", false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if n, err := strconv.Atoi(num); err != nil || n < 0 || strconv.Itoa(n) != num {
		return "", false
	}
	dot := strings.LastIndexByte(rest, '.')
	if dot < 0 {
		return "", false
	}
	part, suffix := rest[:dot], rest[dot+1:]
	if suffix != "weight" && suffix != "bias" {
		return "", false
	}
	g, ok := hfLayerNames[part]
	if !ok {
		return "", false
	}
	return "blk." + num + "." + g + "." + suffix, true
}

// HFName maps a GGUF tensor name (llama/qwen2/qwen3 layout) back to its
// Hugging Face name; false for names with no checkpoint counterpart (such
// as rope_freqs.weight). It is the inverse of GGUFName.
func HFName(gguf string) (string, bool) {
	switch gguf {
	case "token_embd.weight":
		return "model.embed_tokens.weight", true
	case "output_norm.weight":
		return "model.norm.weight", true
	case "output.weight":
		return "lm_head.weight", true
	}
	rest, ok := strings.CutPrefix(gguf, "blk.")
	if !ok {
		return "", false
	}
	num, rest, ok := strings.Cut(rest, ".")
	dot := strings.LastIndexByte(rest, '.')
	if !ok || dot < 0 {
		return "", false
	}
	for hf, g := range hfLayerNames {
		if g == rest[:dot] {
			return "model.layers." + num + "." + hf + rest[dot:], true
		}
	}
	return "", false
}

// mapHFTensors adds the checkpoint's tensors under GGUF names. It reports
// whether FP8 weights were found (and are presented as BF16).
func (m *Model) mapHFTensors(set *safetensors.Set, cfg *hfConfig, hp ir.HParams) (fp8 bool, err error) {
	experts, err := m.mapHFExperts(set, hp.Arch, hp.Experts)
	if err != nil {
		return false, err
	}
	names := set.Names()
	scales := map[string]bool{}
	for _, n := range names {
		if t, _, _ := set.Tensor(n); t.DType == "F8_E4M3" {
			if sn, ok := set.ScaleName(n); ok {
				scales[sn] = true
				fp8 = true
			}
		}
	}
	flat := flatBackbone(names)
	lookup := func(n string) string {
		if flat {
			return "model." + n // the Qwen3-Embedding layout: the backbone without its prefix
		}
		return n
	}
	arch := hfArchOf(cfg)
	hasEmbed := false
	for _, n := range names {
		g, _ := GGUFNameFor(arch, lookup(n))
		hasEmbed = hasEmbed || g == "token_embd.weight"
	}
	tie := cfg.TieWordEmbeddings != nil && *cfg.TieWordEmbeddings
	for _, hfName := range names {
		if experts[hfName] {
			continue
		}
		name, ok := GGUFNameFor(arch, lookup(hfName))
		if !ok || scales[hfName] {
			m.Skipped = append(m.Skipped, hfName)
			continue
		}
		if name == "output.weight" {
			if hasEmbed && tie {
				m.Skipped = append(m.Skipped, hfName) // tied: the embedding serves
				continue
			}
			if !hasEmbed {
				name = "token_embd.weight" // only lm_head stored: it serves both ends
			}
		}
		t, err := hfTensor(set, hfName, name)
		if err == nil && isGemma(arch) && strings.HasSuffix(name, "norm.weight") {
			t, err = gemmaNorm(t) // stored as w, applied as 1 + w
		}
		if err != nil {
			return false, err
		}
		m.addTensor(t)
	}
	if _, ok := m.Tensors["token_embd.weight"]; !ok {
		return false, fmt.Errorf("%w: %s: no model.embed_tokens.weight or lm_head.weight", ErrTensor, m.Path)
	}
	slices.Sort(m.order)
	return fp8, nil
}

// hfTensor presents one checkpoint tensor under a GGUF name, shape reversed
// to ne order; FP8 weights with a scale become BF16.
func hfTensor(set *safetensors.Set, hfName, name string) (*Tensor, error) {
	info, f, _ := set.Tensor(hfName)
	shape := make([]int, len(info.Shape))
	for i, d := range info.Shape {
		shape[len(shape)-1-i] = d
	}
	if len(shape) == 0 {
		shape = []int{1}
	}
	t := &Tensor{Name: name, Shape: shape}
	if info.DType == "F8_E4M3" {
		if _, ok := set.ScaleName(hfName); ok {
			t.Type = dtype.BF16
			t.load = func() ([]byte, error) { return set.DequantizeFP8(hfName, dtype.BF16) }
			return t, nil
		}
	}
	ty, ok := info.Type()
	if !ok {
		return nil, fmt.Errorf("%w: %s: tensor %s has dtype %s", ErrTensor, f.Path, hfName, info.DType)
	}
	t.Type = ty
	t.load = func() ([]byte, error) { return f.TensorData(info) }
	return t, nil
}

// hfFileType names the checkpoint's weight type: the first layer's query
// weight's dtype, or F8_E4M3 for FP8 checkpoints (presented as BF16).
func hfFileType(m *Model, fp8 bool) string {
	if fp8 {
		return "F8_E4M3"
	}
	for _, name := range []string{"blk.0.attn_q.weight", "token_embd.weight"} {
		if t, ok := m.Tensors[name]; ok {
			return t.Type.String()
		}
	}
	return ""
}

// hfTokenizer loads tokenizer.json (with tokenizer_config.json) and the
// chat template, when present.
func (m *Model) hfTokenizer(dir string) error {
	tokJSON, err := readOptional(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfgJSON, err := readOptional(cfgPath)
	if err != nil {
		return err
	}
	if tokJSON != nil {
		tok, err := tokenizer.FromHF(tokJSON, cfgJSON)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, "tokenizer.json"), err)
		}
		m.Tokenizer = tok
	}
	jinja, err := readOptional(filepath.Join(dir, "chat_template.jinja"))
	if err != nil {
		return err
	}
	if jinja != nil {
		m.ChatTemplate = string(jinja)
		return nil
	}
	if cfgJSON != nil {
		m.ChatTemplate, err = chatTemplate(cfgPath, cfgJSON)
	}
	return err
}

// chatTemplate reads chat_template from tokenizer_config.json: a string,
// or a list of {name, template} of which "default" is taken.
func chatTemplate(path string, raw []byte) (string, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMetadata, path, err)
	}
	if len(cfg.ChatTemplate) == 0 || string(cfg.ChatTemplate) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(cfg.ChatTemplate, &s); err == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &list); err != nil {
		return "", fmt.Errorf("%w: %s: chat_template is neither a string nor a list of {name, template}", ErrMetadata, path)
	}
	for _, t := range list {
		if t.Name == "default" {
			return t.Template, nil
		}
	}
	return "", fmt.Errorf("%w: %s: chat_template list has no \"default\" entry", ErrMetadata, path)
}

func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return b, nil
}
