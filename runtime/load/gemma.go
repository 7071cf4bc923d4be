package load

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/gguf"
)

// Gemma 2 and 3 in both formats.
//
// GGUF files (llama.cpp's converter) name the post-norms
// blk.N.post_attention_norm and blk.N.post_ffw_norm, store every RMSNorm
// weight as 1 + w, and carry <arch>.attn_logit_softcapping,
// <arch>.final_logit_softcapping and <arch>.attention.sliding_window; the
// layer pattern, the sliding layers' RoPE base and the query scale are
// llama.cpp's fixed rules unless keys say otherwise (gemmaGGUF).
//
// Hugging Face checkpoints (Gemma2ForCausalLM, Gemma3ForCausalLM, and the
// text half of Gemma3ForConditionalGeneration) store the norms as w and
// apply 1 + w: the norms are presented as float32 1 + w, formed in float32
// as transformers forms it, so both formats give the graph the same
// weights and the same plain rms_norm.

// hfArchOf is the memra architecture of a config: by model_type, else by
// architectures[0]; "" when neither is known.
func hfArchOf(cfg *hfConfig) string {
	if a := hfArchs[cfg.ModelType]; a != "" {
		return a
	}
	if len(cfg.Architectures) > 0 {
		return hfArchs[cfg.Architectures[0]]
	}
	return ""
}

// isGemma reports whether arch is a Gemma family.
func isGemma(arch string) bool { return arch == "gemma2" || arch == "gemma3" }

// gemmaPattern is the sliding-layer pattern llama.cpp fixes per family.
func gemmaPattern(arch string) int {
	if arch == "gemma3" {
		return 6
	}
	return 2
}

// gemma27BLayers are the layer counts llama.cpp takes for the 27B models,
// whose query scale is 1/√(dim/heads) rather than 1/√head_dim.
var gemma27BLayers = map[string]int{"gemma2": 46, "gemma3": 62}

// gemmaGGUF reads the Gemma keys of a GGUF file into hp.
func (g *ggufMeta) gemmaGGUF(hp *ir.HParams) error {
	if !isGemma(hp.Arch) {
		return nil
	}
	// Gemma 2 files converted before these keys existed take llama.cpp's
	// defaults for them, Gemma 2's values
	attnCap, finalCap, window := 0.0, 0.0, -1 // Gemma 3's window is required, as llama.cpp requires it
	if hp.Arch == "gemma2" {
		attnCap, finalCap, window = 50, 30, 4096
	}
	var err error
	for _, f := range []struct {
		dst    *float32
		suffix string
		def    float64
	}{{&hp.AttnSoftcap, "attn_logit_softcapping", attnCap}, {&hp.FinalSoftcap, "final_logit_softcapping", finalCap}} {
		if *f.dst, err = g.float(f.suffix, f.def, false); err != nil {
			return err
		}
		if !positive(*f.dst) && *f.dst != 0 {
			return g.errf(g.arch+"."+f.suffix, "%g is not a finite number ≥ 0", *f.dst)
		}
	}
	if hp.SlidingWindow, err = g.uint("attention.sliding_window", window); err != nil {
		return err
	}
	if hp.SlidingPattern, err = g.slidingPattern(hp.Layers); err != nil {
		return err
	}
	if hp.Arch == "gemma3" {
		// llama.cpp's fixed local base, unless the file names one
		if hp.RopeBaseLocal, err = g.float("rope.freq_base_swa", 10000, false); err != nil {
			return err
		}
	}
	key := g.arch + ".attention.scale"
	if _, ok := g.f.Lookup(key); ok {
		if hp.AttnScale, err = g.float("attention.scale", 0, false); err != nil {
			return err
		}
		if !positive(hp.AttnScale) {
			return g.errf(key, "%g is not a positive finite number", hp.AttnScale)
		}
	} else if hp.Layers == gemma27BLayers[hp.Arch] && hp.Heads > 0 {
		hp.AttnScale = float32(1 / math.Sqrt(float64(hp.Embedding/hp.Heads)))
	}
	return nil
}

// slidingPattern reads <arch>.attention.sliding_window_pattern: a pattern
// (a global layer every that many) or one flag a layer (true: sliding),
// which must then follow a pattern; absent, the family's.
func (g *ggufMeta) slidingPattern(layers int) (int, error) {
	key := g.arch + ".attention.sliding_window_pattern"
	v, ok := g.f.Lookup(key)
	if !ok {
		return gemmaPattern(g.arch), nil
	}
	if v.Type != gguf.TypeArray {
		return g.uint("attention.sliding_window_pattern", 0)
	}
	var flags []bool
	switch x := v.Any().(type) {
	case []bool:
		flags = x
	default:
		ints, ok := g.f.Int32s(key)
		if !ok {
			return 0, g.errf(key, "want a pattern or one flag a layer, have %v", v)
		}
		for _, i := range ints {
			flags = append(flags, i != 0)
		}
	}
	if len(flags) != layers {
		return 0, g.errf(key, "%d flags for %d layers", len(flags), layers)
	}
	return patternOf(flags, func(format string, args ...any) error { return g.errf(key, format, args...) })
}

// patternOf returns the pattern P of per-layer sliding flags: layer l
// global exactly when (l+1) % P == 0 (0: every layer sliding); an error
// when no pattern gives the flags.
func patternOf(flags []bool, errf func(string, ...any) error) (int, error) {
	p := 0
	for l, s := range flags {
		if !s {
			p = l + 1
			break
		}
	}
	if !follows(flags, ir.HParams{SlidingWindow: 1, SlidingPattern: p}) {
		return 0, errf("the sliding and global layers %v do not follow a pattern (memra needs a global layer every P)", flags)
	}
	return p, nil
}

// follows reports whether hp's pattern makes layer l sliding exactly
// where flags[l] is true.
func follows(flags []bool, hp ir.HParams) bool {
	hp.SlidingWindow = 1
	for l, s := range flags {
		if hp.Sliding(l) != s {
			return false
		}
	}
	return true
}

// gemmaConfig is the part of a Gemma config.json memra reads beyond
// hfConfig: the fields whose absence and null differ (the caps), the
// layer types, the local RoPE base, and transformers 5's rope parameters
// by layer type.
type gemmaConfig struct {
	QueryPreAttnScalar    *float64                   `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping  json.RawMessage            `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping json.RawMessage            `json:"final_logit_softcapping"`
	SlidingWindow         *int                       `json:"sliding_window"`
	SlidingWindowPattern  *int                       `json:"sliding_window_pattern"`
	LayerTypes            []string                   `json:"layer_types"`
	RopeLocalBaseFreq     *float64                   `json:"rope_local_base_freq"`
	HiddenActivation      *string                    `json:"hidden_activation"`
	RopeParameters        map[string]json.RawMessage `json:"rope_parameters"`
}

// gemmaDefaults are what transformers' Gemma2Config and Gemma3TextConfig
// take for an absent key (Gemma 3's multimodal configs leave most of their
// text_config to them).
var gemmaDefaults = map[string]struct {
	vocab, heads, kv, headDim, ctx, window, pattern int
	theta, local, qpas, attnCap, finalCap           float64
}{
	"gemma2": {vocab: 256000, heads: 8, kv: 4, headDim: 256, ctx: 8192, window: 4096, pattern: 2, theta: 10000, qpas: 256, attnCap: 50, finalCap: 30},
	"gemma3": {vocab: 262208, heads: 8, kv: 4, headDim: 256, ctx: 131072, window: 4096, pattern: 6, theta: 1e6, local: 10000, qpas: 256},
}

// hfGemmaConfig prepares the config of a Gemma checkpoint: a
// Gemma3ForConditionalGeneration config gives way to its text_config;
// absent keys take transformers' defaults; the Gemma fields are kept for
// gemmaHF. Other configs are left alone.
func hfGemmaConfig(path string, raw []byte, cfg *hfConfig) error {
	arch := hfArchOf(cfg)
	if !isGemma(arch) {
		return nil
	}
	var outer struct {
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(raw, &outer); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMetadata, path, err)
	}
	if len(outer.TextConfig) > 0 && string(outer.TextConfig) != "null" {
		// the language model of a multimodal checkpoint
		var text hfConfig
		if err := json.Unmarshal(outer.TextConfig, &text); err != nil {
			return fmt.Errorf("%w: %s: text_config: %w", ErrMetadata, path, err)
		}
		text.Architectures, text.NameOrPath = cfg.Architectures, cfg.NameOrPath
		if text.ModelType == "" {
			text.ModelType = "gemma3_text"
		}
		if text.TieWordEmbeddings == nil {
			text.TieWordEmbeddings = cfg.TieWordEmbeddings
		}
		*cfg, raw = text, outer.TextConfig
	}
	var gc gemmaConfig
	if err := json.Unmarshal(raw, &gc); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMetadata, path, err)
	}
	d := gemmaDefaults[arch]
	for _, f := range []struct {
		dst *int
		def int
	}{{&cfg.VocabSize, d.vocab}, {&cfg.NumAttentionHeads, d.heads}, {&cfg.MaxPositionEmbeddings, d.ctx}} {
		if *f.dst == 0 {
			*f.dst = f.def
		}
	}
	if cfg.NumKeyValueHeads == nil {
		cfg.NumKeyValueHeads = &d.kv
	}
	if cfg.HeadDim == nil {
		cfg.HeadDim = &d.headDim
	}
	if cfg.RMSNormEps == 0 {
		cfg.RMSNormEps = 1e-6
	}
	if cfg.TieWordEmbeddings == nil {
		t := true
		cfg.TieWordEmbeddings = &t
	}
	// transformers 5: rope parameters by layer type
	if rp := gc.RopeParameters; rp["full_attention"] != nil || rp["sliding_attention"] != nil {
		var full, local hfRope
		for _, p := range []struct {
			raw json.RawMessage
			dst *hfRope
		}{{rp["full_attention"], &full}, {rp["sliding_attention"], &local}} {
			if len(p.raw) > 0 {
				if err := json.Unmarshal(p.raw, p.dst); err != nil {
					return fmt.Errorf("%w: %s: rope_parameters: %w", ErrMetadata, path, err)
				}
			}
		}
		cfg.RopeParameters, cfg.RopeScaling = &full, nil
		if local.RopeTheta != nil {
			gc.RopeLocalBaseFreq = local.RopeTheta
		}
		if t := local.RopeType; t != "" && t != "default" {
			return fmt.Errorf("%w: %s: rope_parameters: the sliding layers' rope_type %q (memra rotates them unscaled)", ErrMetadata, path, t)
		}
	}
	if cfg.RopeTheta == nil && (cfg.RopeParameters == nil || cfg.RopeParameters.RopeTheta == nil) {
		cfg.RopeTheta = &d.theta
	}
	if a := gc.HiddenActivation; a != nil && *a != "gelu_pytorch_tanh" && *a != "gelu_tanh" {
		return fmt.Errorf("%w: %s: hidden_activation %q (Gemma's is gelu_pytorch_tanh)", ErrMetadata, path, *a)
	}
	cfg.gemma = &gc
	return nil
}

// gemmaHF sets the Gemma hyperparameters of a checkpoint (hfGemmaConfig
// kept its fields).
func gemmaHF(path string, cfg *hfConfig, hp *ir.HParams) error {
	gc := cfg.gemma
	if gc == nil || !isGemma(hp.Arch) {
		return nil
	}
	d := gemmaDefaults[hp.Arch]
	qpas := d.qpas
	if gc.QueryPreAttnScalar != nil {
		qpas = *gc.QueryPreAttnScalar
	}
	if !(qpas > 0) || math.IsInf(qpas, 0) {
		return fmt.Errorf("%w: %s: query_pre_attn_scalar %g", ErrMetadata, path, qpas)
	}
	hp.AttnScale = float32(math.Pow(qpas, -0.5))
	var err error
	if hp.AttnSoftcap, err = hfCap(path, "attn_logit_softcapping", gc.AttnLogitSoftcapping, d.attnCap); err != nil {
		return err
	}
	if hp.FinalSoftcap, err = hfCap(path, "final_logit_softcapping", gc.FinalLogitSoftcapping, d.finalCap); err != nil {
		return err
	}
	hp.SlidingWindow = d.window
	if gc.SlidingWindow != nil {
		hp.SlidingWindow = *gc.SlidingWindow
	}
	if hp.SlidingWindow < 0 {
		return fmt.Errorf("%w: %s: sliding_window %d", ErrMetadata, path, hp.SlidingWindow)
	}
	hp.SlidingPattern = d.pattern
	if gc.SlidingWindowPattern != nil {
		hp.SlidingPattern = *gc.SlidingWindowPattern
	}
	if len(gc.LayerTypes) > 0 {
		if len(gc.LayerTypes) != hp.Layers {
			return fmt.Errorf("%w: %s: %d layer_types for %d layers", ErrMetadata, path, len(gc.LayerTypes), hp.Layers)
		}
		flags := make([]bool, len(gc.LayerTypes))
		for i, t := range gc.LayerTypes {
			switch t {
			case "sliding_attention":
				flags[i] = true
			case "full_attention":
			default:
				return fmt.Errorf("%w: %s: layer_types[%d] is %q", ErrMetadata, path, i, t)
			}
		}
		given := *hp
		if !follows(flags, given) {
			// the layer types rule; the pattern key (or the default) keeps
			// its value where they agree (a short model may not show it)
			if hp.SlidingPattern, err = patternOf(flags, func(format string, args ...any) error {
				return fmt.Errorf("%w: %s: layer_types: %s", ErrMetadata, path, fmt.Sprintf(format, args...))
			}); err != nil {
				return err
			}
		}
	}
	if hp.Arch == "gemma3" {
		hp.RopeBaseLocal = float32(d.local)
		if gc.RopeLocalBaseFreq != nil {
			hp.RopeBaseLocal = float32(*gc.RopeLocalBaseFreq)
		}
		if !positive(hp.RopeBaseLocal) {
			return fmt.Errorf("%w: %s: rope_local_base_freq %g", ErrMetadata, path, hp.RopeBaseLocal)
		}
	}
	return nil
}

// hfCap reads a soft-cap key: absent, the family's default; null, none.
func hfCap(path, key string, raw json.RawMessage, def float64) (float32, error) {
	if len(raw) == 0 {
		return float32(def), nil
	}
	if string(raw) == "null" {
		return 0, nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: %s: %s is %s, want a finite number ≥ 0 or null", ErrMetadata, path, key, raw)
	}
	return float32(v), nil
}

// gemmaLayerNames map the Gemma parts of a layer that differ from llama's
// (hfLayerNames): the post-norms, and the pre-feed-forward norm.
var gemmaLayerNames = map[string]string{
	"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
	"post_feedforward_layernorm": "post_ffw_norm",
}

// gemmaPrefixes are the language model's prefixes in multimodal Gemma 3
// checkpoints (transformers 4.50's and later ones), read as a causal LM's.
var gemmaPrefixes = [][2]string{
	{"language_model.model.", "model."}, {"model.language_model.", "model."}, {"language_model.lm_head.", "lm_head."},
}

// GGUFNameFor maps a Hugging Face tensor name of architecture arch to its
// GGUF name (GGUFName for the llama, qwen2 and qwen3 layout); false for
// names with no GGUF counterpart (a multimodal checkpoint's vision tower).
func GGUFNameFor(arch, hf string) (string, bool) {
	if !isGemma(arch) {
		return GGUFName(hf)
	}
	for _, p := range gemmaPrefixes {
		if rest, ok := strings.CutPrefix(hf, p[0]); ok {
			hf = p[1] + rest
			break
		}
	}
	if rest, ok := strings.CutPrefix(hf, "model.layers."); ok {
		if num, part, ok := strings.Cut(rest, "."); ok {
			for h, g := range gemmaLayerNames {
				if suffix, ok := strings.CutPrefix(part, h+"."); ok && (suffix == "weight" || suffix == "bias") {
					if n, err := strconv.Atoi(num); err != nil || n < 0 || strconv.Itoa(n) != num {
						return "", false
					}
					return "blk." + num + "." + g + "." + suffix, true
				}
			}
		}
	}
	return GGUFName(hf)
}

// HFNameFor maps a GGUF tensor name of architecture arch back to its
// Hugging Face causal-LM name; the inverse of GGUFNameFor.
func HFNameFor(arch, gguf string) (string, bool) {
	if !isGemma(arch) {
		return HFName(gguf)
	}
	if rest, ok := strings.CutPrefix(gguf, "blk."); ok {
		if num, part, ok := strings.Cut(rest, "."); ok {
			for h, g := range gemmaLayerNames {
				if suffix, ok := strings.CutPrefix(part, g+"."); ok {
					return "model.layers." + num + "." + h + "." + suffix, true
				}
			}
		}
	}
	return HFName(gguf)
}

// gemmaNorm presents a checkpoint's RMSNorm weight t (w, applied as 1 + w)
// as the float32 1 + w GGUF files store: the sum formed in float32, as
// transformers forms it.
func gemmaNorm(t *Tensor) (*Tensor, error) {
	src, typ := t.load, t.Type
	switch typ {
	case dtype.F32, dtype.F16, dtype.BF16:
	default:
		return nil, fmt.Errorf("%w: norm %s has type %v", ErrTensor, t.Name, typ)
	}
	n := t.Elements()
	t.Type = dtype.F32
	t.load = func() ([]byte, error) {
		b, err := src()
		if err != nil {
			return nil, err
		}
		if want, _ := typ.RowBytes(int(n)); len(b) != want {
			return nil, fmt.Errorf("%w: %s: %d bytes, %v[%d] needs %d", ErrTensor, t.Name, len(b), typ, n, want)
		}
		w := make([]float32, n)
		if err := dtype.Dequantize(typ, b, w); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrTensor, t.Name, err)
		}
		out := make([]byte, 4*n)
		for i, v := range w {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(1+v))
		}
		return out, nil
	}
	return t, nil
}
