package synth

import (
	"fmt"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/load"
)

// Mixture-of-experts models: their presets' tensors (the router and the
// experts' 3-D tensors in place of the dense feed-forward), the quantisation
// rules the standard mixes apply to them, their GGUF keys and their
// checkpoints' per-expert tensors.

// moePresets are the published mixture-of-experts shapes.
var moePresets = map[string]Preset{
	// Qwen3-30B-A3B: 128 experts of 768, 8 a token, weights renormalised
	// (norm_topk_prob); every layer sparse.
	"qwen3-30b-a3b": {
		Name: "qwen3-30b-a3b", Vocab: "qwen2", Template: "qwen3-0.6b.jinja",
		HParams: ir.HParams{Arch: "qwen3moe", ContextLength: 40960, Embedding: 2048, Layers: 48, FFN: 6144,
			Heads: 32, HeadsKV: 4, HeadDim: 128, RopeDim: 128, RopeBase: 1000000, RMSEps: 1e-6, VocabSize: 151936,
			QKNorm: true, RopeStyle: ir.RopeHalf, Experts: 128, ExpertsUsed: 8, ExpertFFN: 768, ExpertNorm: true},
	},
	// Mixtral-8x7B: the llama block with 8 experts of 14336, 2 a token
	// (a softmax over the two chosen); no chat template in the base model.
	"mixtral-8x7b": {
		Name: "mixtral-8x7b", Vocab: "llama-spm",
		HParams: ir.HParams{Arch: "mixtral", ContextLength: 32768, Embedding: 4096, Layers: 32, FFN: 14336,
			Heads: 32, HeadsKV: 8, HeadDim: 128, RopeDim: 128, RopeBase: 1000000, RMSEps: 1e-5, VocabSize: 32000,
			Experts: 8, ExpertsUsed: 2, ExpertFFN: 14336, ExpertNorm: true},
	},
}

func init() {
	for n, p := range moePresets {
		presets[n] = p
	}
}

// moeShape applies the overrides to the experts' size: a smaller Dim
// scales it as it scales the dense feed-forward (rounded up to 32), and
// FFN sets it where the experts' size is the feed-forward size (Mixtral).
func moeShape(p Preset, o *Options, hp *ir.HParams) {
	if hp.Experts == 0 {
		return
	}
	if o.Dim > 0 && o.Dim != p.HParams.Embedding {
		f := int(float64(p.HParams.ExpertFFN) * float64(o.Dim) / float64(p.HParams.Embedding))
		hp.ExpertFFN = (f + 31) / 32 * 32
	}
	if o.FFN > 0 && p.HParams.ExpertFFN == p.HParams.FFN {
		hp.ExpertFFN = o.FFN
	}
}

// kindRouter is a router matrix: random like the other matrices, stored in
// float32 whatever the mix (the standard quantiser leaves ffn_gate_inp
// alone).
const kindRouter = kindFreqs + 1

// ffnTensors are layer l's feed-forward tensors: the dense gate, up and
// down, or the router and the experts' gate, up and down ([in, out,
// experts]; the down's role is ffn_down, so the mixes treat it as theirs).
func ffnTensors(hp ir.HParams, l int) []tensorSpec {
	d := hp.Embedding
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", l, s) }
	if hp.Experts == 0 {
		mat := func(role string, in, out int) tensorSpec {
			return tensorSpec{name: name(role), role: role, layer: l, ne: []int{in, out}}
		}
		return []tensorSpec{mat("ffn_gate", d, hp.FFN), mat("ffn_up", d, hp.FFN), mat("ffn_down", hp.FFN, d)}
	}
	F, E := hp.ExpertFFN, hp.Experts
	return []tensorSpec{
		{name: name("ffn_gate_inp"), role: "ffn_gate_inp", layer: l, ne: []int{d, E}, kind: kindRouter},
		{name: name("ffn_gate_exps"), role: "ffn_gate_exps", layer: l, ne: []int{d, F, E}},
		{name: name("ffn_up_exps"), role: "ffn_up_exps", layer: l, ne: []int{d, F, E}},
		{name: name("ffn_down_exps"), role: "ffn_down", layer: l, ne: []int{F, d, E}},
	}
}

// moeType is the standard quantiser's choice for models of eight experts
// on top of the mix's (typeFor): attn_k and attn_v in Q8_0 ("trades just
// ~128MB"), and attn_output in Q5_K for the 2-, 3- and 4-bit K mixes and
// the IQ4 ones.
func moeType(m mix, hp ir.HParams, ts *tensorSpec, t dtype.Type) dtype.Type {
	if hp.Experts != 8 || !m.base.Quantized() {
		return t
	}
	switch ts.role {
	case "attn_k", "attn_v":
		return fallback(dtype.Q8_0, ts.ne[0])
	case "attn_output":
		if m.base == dtype.Q4_K || m.base == dtype.Q3_K || m.base == dtype.Q2_K || m.base == dtype.IQ4_XS || m.base == dtype.IQ4_NL {
			return fallback(dtype.Q5_K, ts.ne[0])
		}
	}
	return t
}

// ggufArch is the general.architecture a family is written under:
// llama.cpp writes Mixtral as llama (with expert keys).
func ggufArch(arch string) string {
	if arch == "mixtral" {
		return "llama"
	}
	return arch
}

// moeKVs are the experts' GGUF keys of a model, under architecture a.
func moeKVs(hp ir.HParams, a string) []kv {
	if hp.Experts == 0 {
		return nil
	}
	kvs := []kv{{a + ".expert_count", uint32(hp.Experts)}, {a + ".expert_used_count", uint32(hp.ExpertsUsed)}}
	if hp.Arch != "mixtral" {
		kvs = append(kvs, kv{a + ".expert_feed_forward_length", uint32(hp.ExpertFFN)})
	}
	return kvs
}

// hfMoEConfig adds the experts' keys to a checkpoint's config.json, as
// transformers' Qwen3MoeConfig and MixtralConfig name them.
func hfMoEConfig(hp ir.HParams, c map[string]any) {
	switch hp.Arch {
	case "qwen3moe":
		c["model_type"] = "qwen3_moe"
		c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"] = hp.Experts, hp.ExpertsUsed, hp.ExpertFFN
		c["norm_topk_prob"], c["decoder_sparse_step"], c["mlp_only_layers"] = hp.ExpertNorm, 1, []int{}
		c["attention_bias"], c["output_router_logits"], c["router_aux_loss_coef"] = false, false, 0.001
	case "mixtral":
		c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"] = hp.Experts, hp.ExpertsUsed, hp.ExpertFFN
		c["router_jitter_noise"], c["output_router_logits"], c["router_aux_loss_coef"] = 0.0, false, 0.02
		c["sliding_window"] = nil
	}
}

// hfNames are the checkpoint names of a GGUF tensor: its experts' names
// for a 3-D expert tensor, else its one name.
func hfNames(hp ir.HParams, gguf string) ([]string, bool) {
	if names, ok := load.HFMoENames(hp.Arch, gguf, hp.Experts); ok {
		return names, true
	}
	name, ok := load.HFNameFor(hp.Arch, gguf)
	return []string{name}, ok
}
