package tokenizer

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// tinySPM is a small SentencePiece vocabulary with byte pieces.
func tinySPM() *Vocab {
	toks := []string{"<unk>", "<s>", "</s>", "▁", "▁H", "▁He", "▁Hello", "He", "ll", "o", "H", "e", "l", "<|im_end|>", "<tool>", "▁Hell"}
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = TypeNormal
	}
	types[0], types[1], types[2], types[13], types[14] = TypeUnknown, TypeControl, TypeControl, TypeControl, TypeUserDefined
	for b := 0; b < 256; b++ {
		toks = append(toks, "<0x"+strings.ToUpper(string("0123456789abcdef"[b>>4]))+strings.ToUpper(string("0123456789abcdef"[b&15]))+">")
		types = append(types, TypeByte)
	}
	scores := make([]float32, len(toks))
	for i := 3; i < 13; i++ {
		scores[i] = -float32(i)
	}
	scores[15] = -2
	return &Vocab{Model: "llama", Tokens: toks, Scores: scores, Types: types, BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1, EOM: -1}
}

func TestSPMSmall(t *testing.T) {
	tok, err := New(tinySPM())
	require.NoError(t, err)
	hello := int32(6)
	byteTok := func(b byte) int32 { return 16 + int32(b) }
	for _, tc := range []struct {
		name       string
		text       string
		add, parse bool
		want       []int32
	}{
		{"bos", "Hello", true, false, []int32{1, hello}},
		{"no bos", "Hello", false, false, []int32{hello}},
		{"empty", "", false, false, []int32{}},
		{"empty bos", "", true, false, []int32{1}},
		{"byte fallback", "Hé", false, false, []int32{4, byteTok(0xC3), byteTok(0xA9)}},
		{"special parsed, prefix again", "Hello<|im_end|>Hello", false, true, []int32{hello, 13, hello}},
		{"special as text", "<|im_end|>", false, false, func() []int32 {
			var ids []int32
			ids = append(ids, byteTok(0xE2), byteTok(0x96), byteTok(0x81))
			for _, c := range []byte("<|im_end|>") {
				if c == 'e' { // a token of its own
					ids = append(ids, 11)
					continue
				}
				ids = append(ids, byteTok(c))
			}
			return ids
		}()},
		{"user-defined always", "<tool>", false, false, []int32{14}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tok.Encode(tc.text, tc.add, tc.parse)
			if tc.name == "special as text" {
				// "▁" is a token here, so the prefix is one id.
				tc.want = append([]int32{3}, tc.want[3:]...)
			}
			require.Equal(t, tc.want, append([]int32{}, got...))
		})
	}
	require.Equal(t, "Hello", tok.Decode([]int32{1, hello}))
	require.Equal(t, "Hello", tok.Decode([]int32{hello}))
	require.Equal(t, " Hello", tok.Decode([]int32{3, hello}))
	require.Equal(t, "Hé", tok.Decode([]int32{4, byteTok(0xC3), byteTok(0xA9)}))
	require.Equal(t, "H\uFFFD", tok.Decode([]int32{4, byteTok(0xC3)}))
	require.True(t, tok.IsEOG(2))
	require.True(t, tok.IsEOG(13))
	require.False(t, tok.IsEOG(hello))
	require.Empty(t, tok.TokenBytes(1))
	require.Equal(t, []byte{0xA9}, tok.TokenBytes(byteTok(0xA9)))
	require.Equal(t, "▁Hello", tok.TokenText(hello))
	id, ok := tok.TokenID("▁Hello")
	require.True(t, ok)
	require.Equal(t, hello, id)
	require.True(t, tok.AddBOS())

	// Streaming: a character split over byte pieces comes out whole.
	d := tok.NewDecoder()
	require.Equal(t, "", d.Add(1))
	require.Equal(t, "H", d.Add(4))
	require.Equal(t, "", d.Add(byteTok(0xC3)))
	require.Equal(t, "é", d.Add(byteTok(0xA9)))
	require.Equal(t, "", d.Add(byteTok(0xE2)))
	require.Equal(t, "\uFFFD", d.Flush())
}

func TestNewErrors(t *testing.T) {
	for _, v := range []*Vocab{
		nil,
		{Model: "llama"},
		{Model: "t5", Tokens: []string{"a"}},
		{Model: "llama", Tokens: []string{"a"}, Scores: []float32{1, 2}},
		{Model: "gpt2", Tokens: []string{"a"}, Types: []int32{1, 1}},
		{Model: "gpt2", Tokens: []string{"a"}, Merges: []string{"ab"}},
		{Model: "gpt2", Pre: "no-such-pre", Tokens: []string{"a"}},
	} {
		_, err := New(v)
		require.Error(t, err)
	}
}

func TestCleanSpaces(t *testing.T) {
	for in, want := range map[string]string{
		"Hello , world !":         "Hello, world!",
		"a . b ? c":               "a. b? c",
		"it 's we 're I 'm":       "it's we're I'm",
		"you 've they 'll don 't": "you've they 'll don 't",
		"a ' b":                   "a'b",
		" ' ' ":                   "'' ",
		"no change":               "no change",
	} {
		require.Equal(t, want, string(cleanSpaces([]byte(in))), "%q", in)
	}
}

func TestTiktokenErrors(t *testing.T) {
	for _, in := range []string{"", "\r\n\r\n", "YQ== 0 extra", "!!! 0", "YQ== x", "YQ== 0\nYQ== 1", "YQ== 0\nYg== 0"} {
		_, err := FromTiktoken([]byte(in), nil, "qwen2")
		require.Error(t, err, "%q", in)
	}
	tok, err := FromTiktoken([]byte("YQ== 0\r\nYg== 1\r\n\r\nYWI= 2\r\n"), map[string]int32{"<|endoftext|>": 4}, "qwen2")
	require.NoError(t, err)
	require.Equal(t, []int32{2, 0}, tok.Encode("aba", false, false))
	require.Equal(t, 5, tok.VocabSize())
	require.Equal(t, "[PAD3]", tok.TokenText(3))
	require.Equal(t, int32(4), tok.EOS())
	require.True(t, tok.IsEOG(4))
	require.Equal(t, []int32{0, 4}, tok.Encode("a<|endoftext|>", false, true))
	require.Equal(t, []string{"a b"}, tok.Vocab().Merges)
}

// TestTiktokenDerivedMerges checks that the merges Vocab derives for the
// Qwen ranks give the expected ids through the merge-list path.
func TestTiktokenDerivedMerges(t *testing.T) {
	v := qwen(t).Vocab()
	require.NotEmpty(t, v.Merges)
	tok, err := New(v)
	require.NoError(t, err)
	require.False(t, tok.opt.tiktoken)
	for i, c := range loadVectors(t, "ggml-vocab-qwen2.gguf.inp", "ggml-vocab-qwen2.gguf.out") {
		require.Equal(t, c.ids, append([]int32{}, tok.Encode(c.text, false, false)...), "case %d", i)
	}
}

// TestStreamRandom decodes random id sequences (byte tokens split UTF-8
// characters at random) token by token on every fixture vocabulary.
func TestStreamRandom(t *testing.T) {
	toks := map[string]*Tokenizer{"spm": ggufTok(t, "llama-spm"), "gpt2": ggufTok(t, "gpt-2"), "llama3": llama3(t), "qwen": qwen(t)}
	seed := uint32(7)
	next := func(n int) int32 {
		seed = seed*1664525 + 1013904223
		return int32((seed >> 8) % uint32(n))
	}
	for name, tok := range toks {
		for r := 0; r < 200; r++ {
			ids := make([]int32, 1+next(12))
			for i := range ids {
				if next(2) == 0 {
					ids[i] = next(300) // byte pieces, controls, short tokens
				} else {
					ids[i] = next(tok.VocabSize())
				}
			}
			d := tok.NewDecoder()
			var sb strings.Builder
			for _, id := range ids {
				chunk := d.Add(id)
				require.True(t, utf8.ValidString(chunk), "%s %v", name, ids)
				sb.WriteString(chunk)
			}
			sb.WriteString(d.Flush())
			require.Equal(t, tok.Decode(ids), sb.String(), "%s %v", name, ids)
		}
	}
}

func TestCommandInputsFile(t *testing.T) {
	b, err := os.ReadFile(vocabDir + "ggml-vocab-llama-spm.gguf.inp")
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(b), "\n__ggml_vocab_test__\n"))
}
