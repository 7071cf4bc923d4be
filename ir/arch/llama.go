package arch

import "github.com/memra-ai/memra/ir"

// llama: Llama 2 and 3 (and llama2.c's tinyllamas): pre-norm blocks with
// RMSNorm, GQA attention with RoPE (style from hp.RopeStyle: interleaved for
// llama2.c/GGUF-permuted weights, half for Hugging Face checkpoints), Llama
// 3.1 rope scaling from rope_freqs.weight or hp.RopeScaling, a SwiGLU FFN,
// and tied embeddings when the model has no output.weight.
func init() {
	Register("llama", func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
		return buildDecoder(hp, w, layerOpts{}, first, last)
	})
}
