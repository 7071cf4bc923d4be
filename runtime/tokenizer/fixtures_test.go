package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/format/gguf"
)

const vocabDir = "../../testdata/vocab/"

// vectorCase is one input with its expected ids.
type vectorCase struct {
	text string
	ids  []int32
}

// loadVectors reads an .inp file (inputs separated by
// "\n__ggml_vocab_test__\n") and the .out file of the same vocabulary.
func loadVectors(t testing.TB, inp, out string) []vectorCase {
	t.Helper()
	in, err := os.ReadFile(vocabDir + inp)
	require.NoError(t, err)
	texts := strings.Split(string(in), "\n__ggml_vocab_test__\n")
	if texts[len(texts)-1] == "" {
		texts = texts[:len(texts)-1]
	}
	o, err := os.ReadFile(vocabDir + out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(o), "\n"), "\n")
	require.Len(t, lines, len(texts))
	cases := make([]vectorCase, len(texts))
	for i, line := range lines {
		cases[i].text = texts[i]
		cases[i].ids = []int32{}
		for _, f := range strings.Fields(line) {
			n, err := strconv.Atoi(f)
			require.NoError(t, err)
			cases[i].ids = append(cases[i].ids, int32(n))
		}
	}
	return cases
}

var (
	llama3Once sync.Once
	llama3Tok  *Tokenizer
	llama3Err  error
	qwenOnce   sync.Once
	qwenTok    *Tokenizer
	qwenErr    error
)

// llama3Vocab builds the Llama 3 vocabulary from encoder.json and
// vocab.bpe as GGUF stores it (model gpt2, pre llama-bpe).
func llama3Vocab() (*Vocab, error) {
	enc, err := os.ReadFile(vocabDir + "llama3/encoder.json")
	if err != nil {
		return nil, err
	}
	var m map[string]int32
	if err := json.Unmarshal(enc, &m); err != nil {
		return nil, err
	}
	tokens := make([]string, len(m))
	for s, id := range m {
		tokens[id] = s
	}
	bpe, err := os.ReadFile(vocabDir + "llama3/vocab.bpe")
	if err != nil {
		return nil, err
	}
	var merges []string
	for _, l := range strings.Split(string(bpe), "\n") {
		if l != "" && !strings.HasPrefix(l, "#version") {
			merges = append(merges, l)
		}
	}
	return &Vocab{Model: "gpt2", Pre: "llama-bpe", Tokens: tokens, Merges: merges,
		BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1, EOM: -1}, nil
}

func llama3(t testing.TB) *Tokenizer {
	t.Helper()
	llama3Once.Do(func() {
		var v *Vocab
		if v, llama3Err = llama3Vocab(); llama3Err == nil {
			llama3Tok, llama3Err = New(v)
		}
	})
	require.NoError(t, llama3Err)
	return llama3Tok
}

// qwenSpecials are the Qwen2 special tokens.
var qwenSpecials = map[string]int32{"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}

func qwen(t testing.TB) *Tokenizer {
	t.Helper()
	qwenOnce.Do(func() {
		var b []byte
		if b, qwenErr = os.ReadFile(vocabDir + "qwen/qwen.tiktoken"); qwenErr == nil {
			qwenTok, qwenErr = FromTiktoken(b, qwenSpecials, "qwen2")
		}
	})
	require.NoError(t, qwenErr)
	return qwenTok
}

// llama3Inputs reads inputs.json: base64 texts with their Llama 3 ids.
func llama3Inputs(t testing.TB) []vectorCase {
	b, err := os.ReadFile(vocabDir + "llama3/inputs.json")
	require.NoError(t, err)
	var raw []struct {
		Base64 string  `json:"base64"`
		IDs    []int32 `json:"ids"`
	}
	require.NoError(t, json.Unmarshal(b, &raw))
	cases := make([]vectorCase, len(raw))
	for i, r := range raw {
		txt, err := base64.StdEncoding.DecodeString(r.Base64)
		require.NoError(t, err)
		cases[i] = vectorCase{text: string(txt), ids: append([]int32{}, r.IDs...)}
	}
	return cases
}

var (
	ggufOnce sync.Once
	ggufToks map[string]*Tokenizer
	ggufErr  error
)

// ggufTok loads the llama-spm and gpt-2 vocab GGUFs once per test binary.
func ggufTok(t testing.TB, name string) *Tokenizer {
	t.Helper()
	ggufOnce.Do(func() {
		ggufToks = map[string]*Tokenizer{}
		for _, n := range []string{"llama-spm", "gpt-2"} {
			f, err := gguf.Open(vocabDir + "ggml-vocab-" + n + ".gguf")
			if err != nil {
				ggufErr = err
				return
			}
			tok, err := FromGGUF(f)
			f.Close()
			if err != nil {
				ggufErr = err
				return
			}
			ggufToks[n] = tok
		}
	})
	require.NoError(t, ggufErr)
	return ggufToks[name]
}
