package tokenizer

// Token types, numbered as GGUF's tokenizer.ggml.token_type.
const (
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Vocab is a tokenizer description in the shape GGUF stores it
// (tokenizer.ggml.*). Loaders of other formats (tokenizer.json, tiktoken rank
// files) produce the same shape, so one constructor serves them all.
type Vocab struct {
	Model  string    // "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
	Pre    string    // byte-level BPE pre-tokenizer ("llama-bpe", "qwen2", "gpt-2", …); "" = "default"
	Tokens []string  // token pieces, indexed by id
	Scores []float32 // SentencePiece scores; nil when absent
	Types  []int32   // Type* per token; nil when absent (all normal)
	Merges []string  // byte-level BPE merges "left right", rank = index

	// Special token ids; -1 when absent.
	BOS, EOS, UNK, PAD, EOT, EOM int32

	// Behaviour switches; nil means the model family's default.
	AddBOS, AddEOS, AddSpacePrefix *bool

	// IgnoreMerges emits a pre-tokenized piece whole when it is itself a
	// token (Llama 3). Nil means the default for Pre.
	IgnoreMerges *bool
}
