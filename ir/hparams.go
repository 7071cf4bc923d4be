package ir

// RopeStyle says which elements of a head RoPE rotates together.
type RopeStyle int

const (
	// RopeInterleaved rotates adjacent pairs (x[2i], x[2i+1]): the layout of
	// llama2.c and of llama GGUF files, whose Q/K rows the converter permuted.
	RopeInterleaved RopeStyle = iota
	// RopeHalf rotates (x[i], x[i+d/2]) ("rotate half", NeoX): Hugging Face
	// checkpoints, and qwen2/qwen3 GGUF files.
	RopeHalf
)

func (s RopeStyle) String() string {
	if s == RopeHalf {
		return "half"
	}
	return "interleaved"
}

// RopeScaling describes a context-extension scheme for RoPE frequencies.
// Zero optional fields take their defaults.
type RopeScaling struct {
	Type            string  // "", "none", "linear", "yarn", "llama3"
	Factor          float32 // scale factor (linear: positions divided by it)
	OriginalContext int     // original_max_position_embeddings; yarn: 0 is ContextLength
	LowFreqFactor   float32 // llama3
	HighFreqFactor  float32 // llama3
	BetaFast        float32 // yarn beta_fast: pairs turning more often over OriginalContext keep θ (0 is 32)
	BetaSlow        float32 // yarn beta_slow: pairs turning less often get θ/Factor (0 is 1)
	// AttnFactor is what YaRN multiplies cos and sin by (Hugging Face
	// attention_factor, GGUF rope.scaling.yarn_attn_factor); 0 computes it
	// from Factor, Mscale and MscaleAllDim (ir.YarnMscale).
	AttnFactor   float32
	Mscale       float32 // yarn (Hugging Face mscale)
	MscaleAllDim float32 // yarn (Hugging Face mscale_all_dim)
	// AttnFactorMul multiplies YaRN's attention factor, given or computed:
	// GGUF rope.scaling.attn_factor, as llama.cpp applies it (0 is 1).
	AttnFactorMul float32
	Finetuned     bool // yarn
}

// HParams are the hyperparameters of a decoder-only transformer, the same
// whether the model came from a GGUF file or a Hugging Face checkpoint.
// Per-layer variation is not modelled beyond Gemma's: a periodic pattern
// of sliding-window and global layers (Sliding), the sliding ones with
// their own RoPE base.
type HParams struct {
	Arch          string // "llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "gemma2", "gemma3"
	Name          string // general.name or the checkpoint's name
	ContextLength int    // maximum positions the model was trained for
	Embedding     int    // hidden size (n_embd)
	Layers        int    // block count
	FFN           int    // feed-forward inner size
	Heads         int    // attention heads for queries
	HeadsKV       int    // attention heads for keys/values (GQA); = Heads for MHA
	HeadDim       int    // key/value head size (key_length); usually Embedding/Heads
	RopeDim       int    // rotated dimensions per head (≤ HeadDim)
	RopeBase      float32
	RopeStyle     RopeStyle
	RopeScaling   RopeScaling
	RMSEps        float32
	VocabSize     int  // rows of the embedding table
	TiedEmbedding bool // output projection shares token_embd.weight
	QKVBias       bool // qwen2: biases on q/k/v projections
	QKNorm        bool // qwen3: per-head RMSNorm on q and k

	// Gemma 2 and 3.

	// AttnScale is the attention score scale (Gemma's
	// query_pre_attn_scalar^-½); 0 is 1/√HeadDim.
	AttnScale float32
	// AttnSoftcap soft-caps the attention scores, s → c·tanh(s/c) (Gemma 2:
	// 50); FinalSoftcap the logits (Gemma 2: 30). 0: none.
	AttnSoftcap, FinalSoftcap float32
	// SlidingWindow is the positions a sliding-window layer reads: the
	// token's own and the SlidingWindow−1 before it (Gemma 2: 4096, Gemma
	// 3: 1024); 0: no such layers.
	SlidingWindow int
	// SlidingPattern makes layer l global (every earlier position) when
	// (l+1) % SlidingPattern == 0 and sliding otherwise: Gemma 2's 2 (every
	// other layer, the first sliding), Gemma 3's 6 (five sliding, one
	// global). 0 with a window: every layer slides.
	SlidingPattern int
	// RopeBaseLocal is the RoPE base of the sliding layers, which then take
	// no RopeScaling (Gemma 3: 10000, against the global layers' 1e6 with
	// linear scaling); 0: the sliding layers rotate as the others do.
	RopeBaseLocal float32

	// Mixture of experts (qwen3moe, mixtral): every layer's feed-forward is
	// Experts SwiGLU experts of ExpertFFN inner size, of which a router
	// (blk.N.ffn_gate_inp) chooses ExpertsUsed per token; ExpertNorm
	// renormalises the chosen experts' softmax weights to sum to 1
	// (Qwen3-MoE's norm_topk_prob; Mixtral's top-k then softmax is the same).
	// Experts 0 is a dense model.
	Experts     int
	ExpertsUsed int
	ExpertFFN   int
	ExpertNorm  bool
}

// Sliding reports whether layer l reads only a sliding window of positions.
func (hp HParams) Sliding(l int) bool {
	if hp.SlidingWindow <= 0 {
		return false
	}
	return hp.SlidingPattern <= 0 || (l+1)%hp.SlidingPattern != 0
}
