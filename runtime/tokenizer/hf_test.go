package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHFRoundTrip writes each fixture vocabulary as tokenizer.json, reads
// it back with FromHF and checks the ids of every fixture input.
func TestHFRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tok      func(testing.TB) *Tokenizer
		inp, out string
	}{
		{"llama-spm", func(t testing.TB) *Tokenizer { return ggufTok(t, "llama-spm") }, "ggml-vocab-llama-spm.gguf.inp", "ggml-vocab-llama-spm.gguf.out"},
		{"gpt-2", func(t testing.TB) *Tokenizer { return ggufTok(t, "gpt-2") }, "ggml-vocab-gpt-2.gguf.inp", "ggml-vocab-gpt-2.gguf.out"},
		{"qwen2-tiktoken", qwen, "ggml-vocab-qwen2.gguf.inp", "ggml-vocab-qwen2.gguf.out"},
		{"llama3", llama3, "ggml-vocab-llama-bpe.gguf.inp", "ggml-vocab-llama-bpe.gguf.out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := tc.tok(t)
			tj, cj, err := orig.HFJSON()
			require.NoError(t, err)
			back, err := FromHF(tj, cj)
			require.NoError(t, err)
			require.Equal(t, orig.VocabSize(), back.VocabSize())
			require.Equal(t, orig.kind, back.kind)
			require.Equal(t, orig.AddBOS(), back.AddBOS())
			require.Equal(t, orig.BOS(), back.BOS())
			require.Equal(t, orig.clean, back.clean)
			for i, c := range loadVectors(t, tc.inp, tc.out) {
				got := back.Encode(c.text, false, false)
				require.Equal(t, c.ids, append([]int32{}, got...), "case %d %q", i, c.text)
				require.Equal(t, orig.Decode(got), back.Decode(got), "decode case %d", i)
			}
			hello := "Hello <|im_end|> world"
			require.Equal(t, orig.Encode(hello, true, true), back.Encode(hello, true, true))
		})
	}
}
