package tokenizer

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// checkVectors encodes every case and compares ids; then checks decoding
// (want maps inputs whose decoding is lossy to their expected text) and
// that streaming equals Decode with only valid UTF-8 chunks.
func checkVectors(t *testing.T, tok *Tokenizer, cases []vectorCase, lossy map[string]string) {
	t.Helper()
	for i, c := range cases {
		got := tok.Encode(c.text, false, false)
		require.Equal(t, c.ids, append([]int32{}, got...), "case %d %q", i, c.text)
		want := c.text
		if w, ok := lossy[c.text]; ok {
			want = w
		}
		require.Equal(t, want, tok.Decode(got), "decode case %d", i)
		d := tok.NewDecoder()
		var s string
		for _, id := range got {
			chunk := d.Add(id)
			require.True(t, utf8.ValidString(chunk), "chunk %q", chunk)
			s += chunk
		}
		s += d.Flush()
		require.Equal(t, tok.Decode(got), s, "stream case %d", i)
	}
}

// cleanLossy lists the fixture inputs that llama.cpp's clean_spaces
// changes on decode (gpt-2 and llama-bpe).
var cleanLossy = map[string]string{
	"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～": "Hello, y'all! How are you 😁?我想在apple工作1314151天～",
}

func TestLlama3Vectors(t *testing.T) {
	tok := llama3(t)
	cases := loadVectors(t, "ggml-vocab-llama-bpe.gguf.inp", "ggml-vocab-llama-bpe.gguf.out")
	lossy := map[string]string{}
	for k, v := range cleanLossy {
		lossy[k] = v
	}
	lossy[cases[45].text] = string(cleanSpaces([]byte(cases[45].text)))
	checkVectors(t, tok, cases, lossy)
}

func TestLlama3InputsJSON(t *testing.T) {
	tok := llama3(t)
	cases := llama3Inputs(t)
	lossy := map[string]string{}
	for _, c := range cases {
		if cl := string(cleanSpaces([]byte(c.text))); cl != c.text {
			lossy[c.text] = cl
		}
	}
	checkVectors(t, tok, cases, lossy)
}

func TestQwenVectors(t *testing.T) {
	tok := qwen(t)
	checkVectors(t, tok, loadVectors(t, "ggml-vocab-qwen2.gguf.inp", "ggml-vocab-qwen2.gguf.out"), nil)
}

func TestSPMVectors(t *testing.T) {
	tok := ggufTok(t, "llama-spm")
	checkVectors(t, tok, loadVectors(t, "ggml-vocab-llama-spm.gguf.inp", "ggml-vocab-llama-spm.gguf.out"), nil)
}

func TestGPT2Vectors(t *testing.T) {
	tok := ggufTok(t, "gpt-2")
	cases := loadVectors(t, "ggml-vocab-gpt-2.gguf.inp", "ggml-vocab-gpt-2.gguf.out")
	lossy := map[string]string{}
	for k, v := range cleanLossy {
		lossy[k] = v
	}
	lossy[cases[45].text] = string(cleanSpaces([]byte(cases[45].text)))
	checkVectors(t, tok, cases, lossy)
}
