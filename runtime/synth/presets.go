// Package synth writes models of real architectures and shapes with random
// weights and real tokenizers: GGUF files in the standard quantisation mixes,
// and Hugging Face checkpoint folders of the same weights. Dense decode speed
// does not depend on weight values, so a synthesized file is a fair stand-in
// for a downloaded one in benchmarks, and a GGUF and its HF twin make parity
// tests possible without downloading anything.
package synth

import (
	"fmt"
	"sort"

	"github.com/memra-ai/memra/ir"
)

// Preset is a named real model shape.
type Preset struct {
	Name     string
	HParams  ir.HParams
	Vocab    string // embedded tokenizer: "llama-spm", "llama3", "qwen2", "gemma2" or "gemma3"
	Template string // embedded chat template file, "" for none
}

// presets are the shapes of the published models of these names.
var presets = map[string]Preset{
	"llama2-7b": {
		Name: "llama2-7b", Vocab: "llama-spm",
		HParams: ir.HParams{Arch: "llama", ContextLength: 4096, Embedding: 4096, Layers: 32, FFN: 11008,
			Heads: 32, HeadsKV: 32, HeadDim: 128, RopeDim: 128, RopeBase: 10000, RMSEps: 1e-5, VocabSize: 32000},
	},
	"llama3-8b": {
		Name: "llama3-8b", Vocab: "llama3", Template: "llama-3.2-3b-instruct.jinja",
		HParams: ir.HParams{Arch: "llama", ContextLength: 8192, Embedding: 4096, Layers: 32, FFN: 14336,
			Heads: 32, HeadsKV: 8, HeadDim: 128, RopeDim: 128, RopeBase: 500000, RMSEps: 1e-5, VocabSize: 128256},
	},
	"llama3.2-1b": {
		Name: "llama3.2-1b", Vocab: "llama3", Template: "llama-3.2-3b-instruct.jinja",
		HParams: ir.HParams{Arch: "llama", ContextLength: 131072, Embedding: 2048, Layers: 16, FFN: 8192,
			Heads: 32, HeadsKV: 8, HeadDim: 64, RopeDim: 64, RopeBase: 500000, RMSEps: 1e-5, VocabSize: 128256,
			TiedEmbedding: true,
			RopeScaling:   ir.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}},
	},
	"qwen2.5-0.5b": {
		Name: "qwen2.5-0.5b", Vocab: "qwen2", Template: "qwen2.5-7b-instruct.jinja",
		HParams: ir.HParams{Arch: "qwen2", ContextLength: 32768, Embedding: 896, Layers: 24, FFN: 4864,
			Heads: 14, HeadsKV: 2, HeadDim: 64, RopeDim: 64, RopeBase: 1000000, RMSEps: 1e-6, VocabSize: 151936,
			TiedEmbedding: true, QKVBias: true, RopeStyle: ir.RopeHalf},
	},
	"qwen2.5-7b": {
		Name: "qwen2.5-7b", Vocab: "qwen2", Template: "qwen2.5-7b-instruct.jinja",
		HParams: ir.HParams{Arch: "qwen2", ContextLength: 32768, Embedding: 3584, Layers: 28, FFN: 18944,
			Heads: 28, HeadsKV: 4, HeadDim: 128, RopeDim: 128, RopeBase: 1000000, RMSEps: 1e-6, VocabSize: 152064,
			QKVBias: true, RopeStyle: ir.RopeHalf},
	},
	// qwen2.5-7b with the rope_scaling its model card gives for 131072
	// positions: YaRN, factor 4 over the 32768 it was trained for.
	"qwen2.5-7b-yarn": {
		Name: "qwen2.5-7b-yarn", Vocab: "qwen2", Template: "qwen2.5-7b-instruct.jinja",
		HParams: ir.HParams{Arch: "qwen2", ContextLength: 32768, Embedding: 3584, Layers: 28, FFN: 18944,
			Heads: 28, HeadsKV: 4, HeadDim: 128, RopeDim: 128, RopeBase: 1000000, RMSEps: 1e-6, VocabSize: 152064,
			QKVBias: true, RopeStyle: ir.RopeHalf,
			RopeScaling: ir.RopeScaling{Type: "yarn", Factor: 4, OriginalContext: 32768}},
	},
	// Gemma 2 9B: every other layer sliding over 4096 positions, soft caps
	// 50 (scores) and 30 (logits), query_pre_attn_scalar 256.
	"gemma2-9b": {
		Name: "gemma2-9b", Vocab: "gemma2", Template: "gemma-2-2b-it.jinja",
		HParams: ir.HParams{Arch: "gemma2", ContextLength: 8192, Embedding: 3584, Layers: 42, FFN: 14336,
			Heads: 16, HeadsKV: 8, HeadDim: 256, RopeDim: 256, RopeBase: 10000, RMSEps: 1e-6, VocabSize: 256000,
			TiedEmbedding: true, RopeStyle: ir.RopeHalf, AttnScale: 0.0625, AttnSoftcap: 50, FinalSoftcap: 30,
			SlidingWindow: 4096, SlidingPattern: 2},
	},
	// Gemma 3 12B (text): five layers sliding over 1024 positions (RoPE base
	// 10000) to one global (base 1e6, linear scaling 8), q/k norms, no caps.
	// Its chat template is not in memra's assets: Gemma 2's stands in.
	"gemma3-12b": {
		Name: "gemma3-12b", Vocab: "gemma3", Template: "gemma-2-2b-it.jinja",
		HParams: ir.HParams{Arch: "gemma3", ContextLength: 131072, Embedding: 3840, Layers: 48, FFN: 15360,
			Heads: 16, HeadsKV: 8, HeadDim: 256, RopeDim: 256, RopeBase: 1e6, RMSEps: 1e-6, VocabSize: 262208,
			TiedEmbedding: true, RopeStyle: ir.RopeHalf, QKNorm: true, AttnScale: 0.0625,
			SlidingWindow: 1024, SlidingPattern: 6, RopeBaseLocal: 10000,
			RopeScaling: ir.RopeScaling{Type: "linear", Factor: 8}},
	},
	"qwen3-8b": {
		Name: "qwen3-8b", Vocab: "qwen2", Template: "qwen3-0.6b.jinja",
		HParams: ir.HParams{Arch: "qwen3", ContextLength: 40960, Embedding: 4096, Layers: 36, FFN: 12288,
			Heads: 32, HeadsKV: 8, HeadDim: 128, RopeDim: 128, RopeBase: 1000000, RMSEps: 1e-6, VocabSize: 151936,
			QKNorm: true, RopeStyle: ir.RopeHalf},
	},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the preset with the given name.
func Lookup(name string) (Preset, error) {
	p, ok := presets[name]
	if !ok {
		return Preset{}, fmt.Errorf("%w: unknown preset %q (have %v)", ErrOptions, name, Presets())
	}
	return p, nil
}

// Shape applies the overrides of o to a preset's hyperparameters. A smaller
// Dim keeps the head size (unless Dim is smaller than it) and scales the
// head counts and the feed-forward size with it, so GQA ratios survive.
func (o *Options) shape(p Preset) (ir.HParams, error) {
	hp := p.HParams
	hp.Name = p.Name
	if o.Layers > 0 {
		hp.Layers = o.Layers
	}
	if o.Dim > 0 && o.Dim != hp.Embedding {
		if o.Dim%32 != 0 {
			return hp, fmt.Errorf("%w: --dim %d is not a multiple of 32", ErrOptions, o.Dim)
		}
		if o.Dim < hp.HeadDim {
			hp.HeadDim = o.Dim
		}
		ratio := hp.Heads / hp.HeadsKV
		heads := o.Dim / hp.HeadDim
		if heads < 1 {
			heads = 1
		}
		kv := heads / ratio
		if kv < 1 {
			kv = 1
		}
		ffn := int(float64(hp.FFN) * float64(o.Dim) / float64(hp.Embedding))
		ffn = (ffn + 31) / 32 * 32
		hp.Heads, hp.HeadsKV, hp.FFN, hp.Embedding = heads, kv, ffn, o.Dim
		hp.RopeDim = hp.HeadDim
	}
	moeShape(p, o, &hp)
	if o.FFN > 0 {
		hp.FFN = o.FFN
	}
	if o.Context > 0 {
		hp.ContextLength = o.Context
	}
	if o.Window > 0 {
		if hp.SlidingWindow == 0 {
			return hp, fmt.Errorf("%w: --sliding-window for %s, which has no sliding-window layers", ErrOptions, p.Name)
		}
		hp.SlidingWindow = o.Window
	}
	if hp.Layers < 1 || hp.Embedding < 1 || hp.FFN < 1 || hp.Heads < 1 || hp.HeadsKV < 1 {
		return hp, fmt.Errorf("%w: degenerate shape %+v", ErrOptions, hp)
	}
	return hp, nil
}
