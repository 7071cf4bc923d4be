package arch

import "github.com/memra-ai/memra/ir"

// qwen3: the llama block with a per-head RMSNorm of q and k before RoPE
// (blk.N.attn_{q,k}_norm.weight, head_dim long); head_dim may differ from
// embedding/heads, so hp.HeadDim must be set for such models.
func init() {
	Register("qwen3", func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
		return buildDecoder(hp, w, layerOpts{qkNorm: true}, first, last)
	})
}
