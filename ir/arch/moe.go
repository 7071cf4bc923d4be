package arch

import (
	"fmt"

	"github.com/memra-ai/memra/ir"
)

// qwen3moe: the qwen3 block (per-head q/k norms) with a mixture-of-experts
// feed-forward in every layer (Qwen3-MoE: softmax over all experts, top-k,
// renormalised when norm_topk_prob).
//
// mixtral: the llama block with a mixture-of-experts feed-forward (top-k
// of the router's logits, then a softmax over the chosen: hp.ExpertNorm).
// llama.cpp writes Mixtral GGUF files as architecture "llama" with expert
// tensors; the loader names them mixtral.
func init() {
	Register("qwen3moe", func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
		return buildMoE(hp, w, layerOpts{qkNorm: true, ffn: moeFFN}, first, last)
	})
	Register("mixtral", func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
		return buildMoE(hp, w, layerOpts{ffn: moeFFN}, first, last)
	})
}

// buildMoE checks the experts' hyperparameters and builds the decoder with
// the mixture-of-experts feed-forward o.ffn; the graph's consts gain
// experts, experts_used and expert_ffn. A model with no dense feed-forward
// size takes the experts' for the normalisation's check.
func buildMoE(hp ir.HParams, w Weights, o layerOpts, first, last int) (*ir.Graph, error) {
	if hp.Experts <= 0 || hp.ExpertsUsed <= 0 || hp.ExpertsUsed > hp.Experts || hp.ExpertFFN <= 0 {
		return nil, fmt.Errorf("%w: %d experts, %d used a token, expert feed-forward %d (want 0 < used ≤ experts, a positive size)",
			ErrHParams, hp.Experts, hp.ExpertsUsed, hp.ExpertFFN)
	}
	if hp.FFN <= 0 {
		hp.FFN = hp.ExpertFFN
	}
	g, err := buildDecoder(hp, w, o, first, last)
	if err != nil {
		return nil, err
	}
	g.Consts["experts"], g.Consts["experts_used"], g.Consts["expert_ffn"] = hp.Experts, hp.ExpertsUsed, hp.ExpertFFN
	return g, nil
}

// moeFFN is layer l's mixture-of-experts feed-forward of its normalised
// input h: the router's logits (blk.l.ffn_gate_inp, [E] rows of the hidden
// size), the ExpertsUsed experts it chooses and their weights, the chosen
// experts' SwiGLU (ffn_gate_exps and ffn_up_exps, [E][F] rows) and down
// products (ffn_down_exps, [E][hidden] rows of F), summed by the weights.
func moeFFN(d *decoder, h *ir.Node, l int) *ir.Node {
	hp, k := d.hp, d.dims()
	E, F := hp.Experts, hp.ExpertFFN
	logits := d.g.Add(ir.OpMatmul, nil, h, d.weight(blk(l, "ffn_gate_inp.weight"), k.E, E))
	ids := d.g.Add(ir.OpTopK, ir.Attrs{"k": hp.ExpertsUsed}, logits)
	wts := d.g.Add(ir.OpMoEWeights, ir.Attrs{"norm": hp.ExpertNorm}, logits, ids)
	gate := d.g.Add(ir.OpMoEMatmul, nil, h, d.weight(blk(l, "ffn_gate_exps.weight"), k.E, F, E), ids)
	up := d.g.Add(ir.OpMoEMatmul, nil, h, d.weight(blk(l, "ffn_up_exps.weight"), k.E, F, E), ids)
	act := d.g.Add(ir.OpSwiGLU, nil, gate, up)
	down := d.g.Add(ir.OpMoEMatmul, nil, act, d.weight(blk(l, "ffn_down_exps.weight"), F, k.E, E), ids)
	return d.g.Add(ir.OpMoESum, nil, down, wts)
}
