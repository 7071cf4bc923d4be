package tokenizer

import (
	"fmt"

	"github.com/memra-ai/memra/runtime/format/gguf"
)

// FromGGUF builds the tokenizer described by a GGUF file's tokenizer.ggml.*
// metadata. Missing keys take llama.cpp's defaults: for "llama" BOS 1, EOS
// 2, UNK 0, BOS added, dummy prefix on; for "gpt2" BOS = EOS = 11, no
// prefix, BOS added only for the Llama 3 family; a missing pre means
// "default". Out-of-range special ids are ignored.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := VocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// VocabFromGGUF reads the tokenizer.ggml.* metadata into a Vocab, with the
// defaults of FromGGUF filled in.
func VocabFromGGUF(f *gguf.File) (*Vocab, error) {
	const p = "tokenizer.ggml."
	model, ok := f.String(p + "model")
	if !ok {
		return nil, fmt.Errorf("%w: GGUF has no %smodel", ErrInvalid, p)
	}
	v := &Vocab{Model: model, BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1, EOM: -1}
	switch model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
	case "gpt2":
		v.BOS, v.EOS = 11, 11
	default:
		return nil, fmt.Errorf("%w: GGUF tokenizer model %q", ErrUnsupported, model)
	}
	v.Pre, _ = f.String(p + "pre")
	if v.Tokens, ok = f.Strings(p + "tokens"); !ok {
		return nil, fmt.Errorf("%w: GGUF has no %stokens", ErrInvalid, p)
	}
	n := uint64(len(v.Tokens))
	if _, present := f.Lookup(p + "scores"); present {
		if v.Scores, ok = f.Float32s(p + "scores"); !ok {
			return nil, fmt.Errorf("%w: %sscores is not a float32 array", ErrInvalid, p)
		}
	}
	if _, present := f.Lookup(p + "token_type"); present {
		if v.Types, ok = f.Int32s(p + "token_type"); !ok {
			return nil, fmt.Errorf("%w: %stoken_type is not an int32 array", ErrInvalid, p)
		}
	}
	if _, present := f.Lookup(p + "merges"); present {
		if v.Merges, ok = f.Strings(p + "merges"); !ok {
			return nil, fmt.Errorf("%w: %smerges is not a string array", ErrInvalid, p)
		}
	}
	for _, k := range []struct {
		key string
		dst *int32
	}{
		{"bos_token_id", &v.BOS}, {"eos_token_id", &v.EOS}, {"unknown_token_id", &v.UNK},
		{"padding_token_id", &v.PAD}, {"eot_token_id", &v.EOT}, {"eom_token_id", &v.EOM},
	} {
		if id, ok := f.Uint(p + k.key); ok {
			if id < n {
				*k.dst = int32(id)
			} else {
				*k.dst = -1
			}
		}
	}
	for _, k := range []struct {
		key string
		dst **bool
	}{
		{"add_bos_token", &v.AddBOS}, {"add_eos_token", &v.AddEOS}, {"add_space_prefix", &v.AddSpacePrefix},
	} {
		if b, ok := f.Bool(p + k.key); ok {
			*k.dst = &b
		}
	}
	return v, nil
}
