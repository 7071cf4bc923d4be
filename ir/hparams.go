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
// Per-layer variation is not modelled: the families memra builds use one
// value for every layer.
type HParams struct {
	Arch          string // "llama", "qwen2", "qwen3"
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
}
