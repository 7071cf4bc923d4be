package synth

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// The real vocabularies synthesized models carry (provenance in
// testdata/PROVENANCE.md: the same files, gzip-compressed; the Qwen rank
// file with its CR line endings removed).
//
//go:embed assets
var assets embed.FS

func asset(name string) ([]byte, error) {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		return nil, fmt.Errorf("synth: embedded %s: %w", name, err)
	}
	if !strings.HasSuffix(name, ".gz") {
		return b, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("synth: embedded %s: %w", name, err)
	}
	return io.ReadAll(zr)
}

// vocabCache keeps each built vocabulary: building the 150k-token ones takes a while.
var vocabCache sync.Map // name → *tokenizer.Vocab

// vocabFor returns the tokenizer description of an embedded vocabulary,
// padded with unused tokens to size (a model's embedding rows may exceed
// its token count, as Qwen's do).
func vocabFor(name string, size int) (*tokenizer.Vocab, error) {
	var v *tokenizer.Vocab
	if c, ok := vocabCache.Load(name); ok {
		v = c.(*tokenizer.Vocab)
	} else {
		var err error
		switch name {
		case "llama-spm":
			v, err = spmVocab()
		case "llama3":
			v, err = llama3Vocab()
		case "qwen2":
			v, err = qwenVocab()
		case "gemma2":
			v, err = gemmaVocab(256000)
		case "gemma3":
			v, err = gemmaVocab(262144)
		default:
			err = fmt.Errorf("%w: unknown vocabulary %q", ErrOptions, name)
		}
		if err != nil {
			return nil, err
		}
		vocabCache.Store(name, v)
	}
	if len(v.Tokens) > size {
		return nil, fmt.Errorf("%w: vocabulary %s has %d tokens, more than the model's %d rows", ErrOptions, name, len(v.Tokens), size)
	}
	if len(v.Tokens) == size {
		return v, nil
	}
	p := *v
	p.Tokens = append(append([]string(nil), v.Tokens...), make([]string, size-len(v.Tokens))...)
	p.Types = append(append([]int32(nil), v.Types...), make([]int32, size-len(v.Types))...)
	if v.Scores != nil {
		p.Scores = append(append([]float32(nil), v.Scores...), make([]float32, size-len(v.Scores))...)
	}
	for i := len(v.Tokens); i < size; i++ {
		p.Tokens[i] = fmt.Sprintf("[PAD%d]", i)
		p.Types[i] = tokenizer.TypeUnused
	}
	return &p, nil
}

func spmVocab() (*tokenizer.Vocab, error) {
	b, err := asset("llama-spm.gguf.gz")
	if err != nil {
		return nil, err
	}
	f, err := gguf.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("synth: embedded llama-spm vocabulary: %w", err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("synth: embedded llama-spm vocabulary: %w", err)
	}
	return tok.Vocab(), nil
}

// llama3Specials are the 256 special tokens after Llama 3's 128000 regular ones.
func llama3Specials() []string {
	s := make([]string, 256)
	named := map[int]string{0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>",
		6: "<|start_header_id|>", 7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>"}
	reserved := 0
	for i := range s {
		if n, ok := named[i]; ok {
			s[i] = n
			continue
		}
		s[i] = fmt.Sprintf("<|reserved_special_token_%d|>", reserved)
		reserved++
	}
	return s
}

func llama3Vocab() (*tokenizer.Vocab, error) {
	enc, err := asset("llama3-encoder.json.gz")
	if err != nil {
		return nil, err
	}
	merges, err := asset("llama3-vocab.bpe.gz")
	if err != nil {
		return nil, err
	}
	var ids map[string]int
	if err := json.Unmarshal(enc, &ids); err != nil {
		return nil, fmt.Errorf("synth: embedded llama3 encoder: %w", err)
	}
	tokens := make([]string, len(ids))
	for t, id := range ids {
		if id < 0 || id >= len(tokens) {
			return nil, fmt.Errorf("synth: embedded llama3 encoder: id %d out of range", id)
		}
		tokens[id] = t
	}
	types := make([]int32, len(tokens), len(tokens)+256)
	for i := range types {
		types[i] = tokenizer.TypeNormal
	}
	for _, s := range llama3Specials() {
		tokens = append(tokens, s)
		types = append(types, tokenizer.TypeControl)
	}
	var ml []string
	for _, line := range strings.Split(string(merges), "\n") {
		if line == "" || strings.HasPrefix(line, "#version") {
			continue
		}
		ml = append(ml, line)
	}
	t := true
	return &tokenizer.Vocab{Model: "gpt2", Pre: "llama-bpe", Tokens: tokens, Types: types, Merges: ml,
		BOS: 128000, EOS: 128009, UNK: -1, PAD: -1, EOT: 128009, EOM: 128008, AddBOS: &t}, nil
}

// qwenSpecials are Qwen2.5/Qwen3's special tokens, from id 151643 on.
var qwenSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
	"<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
	"<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
	"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
	"<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"}

func qwenVocab() (*tokenizer.Vocab, error) {
	ranks, err := asset("qwen.tiktoken.gz")
	if err != nil {
		return nil, err
	}
	specials := make(map[string]int32, len(qwenSpecials))
	for i, s := range qwenSpecials {
		specials[s] = int32(151643 + i)
	}
	tok, err := tokenizer.FromTiktoken(ranks, specials, "qwen2")
	if err != nil {
		return nil, fmt.Errorf("synth: embedded qwen vocabulary: %w", err)
	}
	v := *tok.Vocab()
	if len(v.Merges) == 0 {
		return nil, fmt.Errorf("synth: embedded qwen vocabulary has no merges")
	}
	f := false
	v.BOS, v.EOS, v.PAD, v.EOT, v.UNK, v.EOM = 151643, 151645, 151643, 151645, -1, -1
	v.AddBOS = &f
	// Non-regular tokens ("<tool_call>", "<think>") are control tokens, like the other specials.
	for _, id := range specials {
		if int(id) < len(v.Types) {
			v.Types[id] = tokenizer.TypeControl
		}
	}
	return &v, nil
}

// tokenizerKVs returns the tokenizer.ggml.* metadata of v in GGUF order.
func tokenizerKVs(v *tokenizer.Vocab) []kv {
	out := []kv{{"tokenizer.ggml.model", v.Model}}
	if v.Pre != "" {
		out = append(out, kv{"tokenizer.ggml.pre", v.Pre})
	}
	out = append(out, kv{"tokenizer.ggml.tokens", v.Tokens})
	if v.Scores != nil {
		out = append(out, kv{"tokenizer.ggml.scores", v.Scores})
	}
	out = append(out, kv{"tokenizer.ggml.token_type", v.Types})
	if len(v.Merges) > 0 {
		out = append(out, kv{"tokenizer.ggml.merges", v.Merges})
	}
	ids := []struct {
		key string
		id  int32
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unknown", v.UNK}, {"padding", v.PAD}, {"eot", v.EOT}, {"eom", v.EOM}}
	for _, x := range ids {
		if x.id >= 0 {
			out = append(out, kv{"tokenizer.ggml." + x.key + "_token_id", uint32(x.id)})
		}
	}
	flags := []struct {
		key string
		b   *bool
	}{{"add_bos_token", v.AddBOS}, {"add_eos_token", v.AddEOS}, {"add_space_prefix", v.AddSpacePrefix}}
	for _, x := range flags {
		if x.b != nil {
			out = append(out, kv{"tokenizer.ggml." + x.key, *x.b})
		}
	}
	return out
}

type kv struct {
	key string
	val any
}
