package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func fuzzSeeds(f *testing.F) {
	for _, c := range loadVectors(f, "ggml-vocab-gpt-2.gguf.inp", "ggml-vocab-gpt-2.gguf.out") {
		f.Add(c.text)
	}
	f.Add("<|im_start|>user\nhi<|im_end|>\n<s></s>")
	f.Add("\xff\xfe invalid \xc3")
	f.Add("'S 'Ll I'M 123456789 \u00a0\u2581x")
}

// FuzzEncodeBPE: byte-level BPE must give the input back for valid UTF-8
// (without clean-up and specials), and stream like Decode.
func FuzzEncodeBPE(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range []*Tokenizer{qwen(t), llama3(t)} {
			ids := tok.Encode(s, true, true)
			if !utf8.ValidString(s) {
				continue
			}
			ids = tok.Encode(s, false, false)
			var raw []byte
			for _, id := range ids {
				raw = append(raw, tok.TokenBytes(id)...)
			}
			require.Equal(t, s, string(raw))
			d := tok.NewDecoder()
			var out string
			for _, id := range ids {
				out += d.Add(id)
			}
			require.Equal(t, tok.Decode(ids), out+d.Flush())
		}
	})
}

// FuzzEncodeSPM: SentencePiece encoding must not panic, and byte fallback
// keeps it lossless, except for a literal "▁" in the text, which reads
// back as a space (SentencePiece uses it as the space marker).
func FuzzEncodeSPM(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		tok := ggufTok(t, "llama-spm")
		tok.Encode(s, true, true)
		if !utf8.ValidString(s) || strings.Contains(s, "\u2581") {
			return
		}
		require.Equal(t, s, tok.Decode(tok.Encode(s, false, false)))
	})
}

// FuzzFromHF: malformed tokenizer.json gives an error, never a panic; what
// loads must encode and decode without panicking.
func FuzzFromHF(f *testing.F) {
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"}}`), []byte(`{}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"▁a":0,"a":1,"▁":2,"<0x41>":3},"merges":[["▁","a"]],"byte_fallback":true},"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},"added_tokens":[{"id":4,"content":"<s>","special":true}],"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"ids":[4]}}}}`), []byte(`{"add_bos_token":true}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":-1}}}`), []byte(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a"]}}`), []byte(nil))
	f.Add([]byte(`{"model":{"type":"Unigram"}}`), []byte(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(("},"behavior":"Isolated"},"decoder":{"type":"ByteLevel"}}`), []byte(nil))
	f.Add([]byte(`not json`), []byte(`{`))
	f.Fuzz(func(t *testing.T, tj, cj []byte) {
		tok, err := FromHF(tj, cj)
		if err != nil {
			return
		}
		ids := tok.Encode("Hello wörld <s> 123", true, true)
		tok.Decode(ids)
		_, _, err = tok.HFJSON()
		require.NoError(t, err)
	})
}

func TestFromHFErrors(t *testing.T) {
	for _, tj := range []string{
		`not json`,
		`{"model":{"type":"Unigram"}}`,
		`{"model":{"type":"BPE","vocab":{"a":-1}}}`,
		`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a"]}}`,
		`{"model":{"type":"BPE","vocab":{}}}`,
		`{"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(("},"behavior":"Isolated"},"decoder":{"type":"ByteLevel"}}`,
		`{"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Whitespace"}}`,
		`{"model":{"type":"BPE","vocab":{"a":0}},"normalizer":{"type":"Precompiled"}}`,
		`{"model":{"type":"BPE","vocab":{"a":0}},"added_tokens":[{"id":5,"content":""}]}`,
	} {
		_, err := FromHF([]byte(tj), nil)
		require.Error(t, err, tj)
	}
}

// TestFromHFSmall checks the SentencePiece mapping of a minimal Llama-2
// style tokenizer.json: prefix, byte fallback, template BOS, strip rule.
func TestFromHFSmall(t *testing.T) {
	tj := `{"model":{"type":"BPE","vocab":{"▁a":0,"a":1,"▁":2,"<0x41>":3,"<unk>":5},"unk_token":"<unk>","merges":[["▁","a"]],"byte_fallback":true},
	"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
	"added_tokens":[{"id":4,"content":"<s>","special":true},{"id":5,"content":"<unk>","special":true}],
	"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"ids":[4]}}},
	"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}}`
	tok, err := FromHF([]byte(tj), nil)
	require.NoError(t, err)
	require.Equal(t, []int32{4, 0, 3}, tok.Encode("aA", true, false))
	require.Equal(t, "aA", tok.Decode([]int32{4, 0, 3}))
	require.Equal(t, int32(4), tok.BOS())
}
