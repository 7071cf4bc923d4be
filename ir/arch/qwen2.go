package arch

import "github.com/memra-ai/memra/ir"

// qwen2: the llama block with biases on the q, k and v projections
// (blk.N.attn_{q,k,v}.bias) and rotate-half RoPE (set by the loader in
// hp.RopeStyle).
func init() {
	Register("qwen2", func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
		return buildDecoder(hp, w, layerOpts{qkvBias: true}, first, last)
	})
}
