package tokenizer

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
)

// FromTiktoken builds a byte-level BPE tokenizer from a tiktoken rank file
// ("base64(bytes) rank" per line; blank lines are skipped and any
// whitespace, CR included, separates fields). BPE merges, lowest rank
// first, the adjacent pair whose concatenated bytes form a token; a piece
// that is itself a token is emitted at once. specials gives the special
// tokens and their ids (Qwen2: <|endoftext|> 151643, <|im_start|> 151644,
// <|im_end|> 151645); ids between the ranks and the specials are filled
// with unused "[PAD<id>]" tokens, as GGUF converters do. pre names the
// pre-tokenizer ("qwen2", "llama-bpe", …). BOS, EOS and UNK are
// <|endoftext|> when present.
func FromTiktoken(ranks []byte, specials map[string]int32, pre string) (*Tokenizer, error) {
	var raw []string
	seen := map[string]bool{}
	for lineNo, line := range bytes.Split(ranks, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: tiktoken line %d: want 2 fields, got %d", ErrFormat, lineNo+1, len(f))
		}
		tok, err := base64.StdEncoding.DecodeString(string(f[0]))
		if err != nil || len(tok) == 0 {
			return nil, fmt.Errorf("%w: tiktoken line %d: bad base64 token %q", ErrFormat, lineNo+1, f[0])
		}
		rank, err := strconv.ParseInt(string(f[1]), 10, 32)
		if err != nil || rank < 0 || rank > 1<<24 {
			return nil, fmt.Errorf("%w: tiktoken line %d: bad rank %q", ErrFormat, lineNo+1, f[1])
		}
		for int(rank) >= len(raw) {
			raw = append(raw, "")
		}
		if raw[rank] != "" || seen[string(tok)] {
			return nil, fmt.Errorf("%w: tiktoken line %d: duplicate rank %d or token", ErrFormat, lineNo+1, rank)
		}
		raw[rank] = string(tok)
		seen[string(tok)] = true
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: empty tiktoken file", ErrFormat)
	}
	n := len(raw)
	for _, id := range specials {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("%w: special token id %d", ErrInvalid, id)
		}
		n = max(n, int(id)+1)
	}
	v := &Vocab{Model: "gpt2", Pre: pre, Tokens: make([]string, n), Types: make([]int32, n),
		BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1, EOM: -1}
	for i := 0; i < n; i++ {
		switch {
		case i < len(raw) && raw[i] != "":
			v.Tokens[i], v.Types[i] = byteMap(raw[i]), TypeNormal
		default:
			v.Tokens[i], v.Types[i] = fmt.Sprintf("[PAD%d]", i), TypeUnused
		}
	}
	for s, id := range specials {
		if int(id) < len(raw) && raw[id] != "" {
			return nil, fmt.Errorf("%w: special %q id %d is a regular rank", ErrInvalid, s, id)
		}
		v.Tokens[id], v.Types[id] = s, TypeControl
	}
	if id, ok := specials["<|endoftext|>"]; ok {
		v.BOS, v.EOS, v.UNK = id, id, id
	}
	return newTokenizer(v, options{tiktoken: true})
}

// Vocab returns the vocabulary in GGUF shape. For a tiktoken tokenizer the
// merges are derived on the first call (each token's BPE over lower ranks
// gives its last merge), so the Vocab can be written to GGUF or
// tokenizer.json and gives the same ids through New.
func (t *Tokenizer) Vocab() *Vocab {
	if !t.opt.tiktoken {
		return t.v
	}
	t.exportOnce.Do(func() {
		v := *t.v
		v.Merges = t.deriveMerges()
		t.exported = &v
	})
	return t.exported
}

// deriveMerges rebuilds a merge list for a tiktoken vocabulary: for every
// multi-byte token, BPE over its bytes limited to lower ranks ends in two
// parts, and that pair is the merge of the token's rank.
func (t *Tokenizer) deriveMerges() []string {
	m := t.bpe
	type merge struct {
		rank int32
		l, r string
	}
	var ms []merge
	for id := int32(0); id < m.nTok; id++ {
		if t.types[id] != TypeNormal {
			continue
		}
		tok := string(t.tokBytes[id])
		if len(tok) < 2 {
			continue
		}
		parts := m.partsBelow(tok, id)
		if len(parts) == 2 {
			ms = append(ms, merge{id, parts[0], parts[1]})
		}
	}
	sort.Slice(ms, func(a, b int) bool { return ms[a].rank < ms[b].rank })
	out := make([]string, len(ms))
	for i, x := range ms {
		out[i] = byteMap(x.l) + " " + byteMap(x.r)
	}
	return out
}

// partsBelow runs rank BPE on tok using only tokens ranked below limit and
// returns the parts left.
func (m *bpeModel) partsBelow(tok string, limit int32) []string {
	parts := make([]string, len(tok))
	for i := range parts {
		parts[i] = tok[i : i+1]
	}
	for len(parts) > 1 {
		best, at := int32(-1), -1
		for i := 0; i+1 < len(parts); i++ {
			id, ok := m.raw[parts[i]+parts[i+1]]
			if ok && id < limit && (best < 0 || id < best) {
				best, at = id, i
			}
		}
		if at < 0 {
			break
		}
		parts[at] += parts[at+1]
		parts = append(parts[:at+1], parts[at+2:]...)
	}
	return parts
}
