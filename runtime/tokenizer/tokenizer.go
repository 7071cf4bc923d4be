// Package tokenizer turns text into token ids and back: SentencePiece-style
// BPE (GGUF model "llama") and byte-level BPE (model "gpt2", tiktoken rank
// files), loaded from GGUF metadata, tokenizer.json or a tiktoken file.
//
// Every source is first brought into the GGUF shape (Vocab), so one
// implementation serves them all; llama.cpp's tokenizer is the reference
// for ids.
package tokenizer

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Errors returned by the constructors, wrapped with context.
var (
	// ErrInvalid reports a vocabulary that cannot work (wrong lengths,
	// unknown model, bad merge lines, bad regexes).
	ErrInvalid = errors.New("tokenizer: invalid vocabulary")
	// ErrUnsupported reports a valid description this package does not
	// implement (another model kind, normaliser or pre-tokenizer).
	ErrUnsupported = errors.New("tokenizer: unsupported")
	// ErrFormat reports a malformed input file (JSON, tiktoken lines).
	ErrFormat = errors.New("tokenizer: malformed input")
)

// Token attribute bits (added tokens of tokenizer.json).
const (
	attrLStrip uint8 = 1 << iota // absorbs whitespace on its left
	attrRStrip                   // absorbs whitespace on its right
)

// options are behaviours that the GGUF shape cannot express; tokenizer.json
// and tiktoken files set them.
type options struct {
	prePatterns []string            // pre-tokenizer regexes; nil = from Vocab.Pre
	normalize   func(string) string // applied to each text fragment; nil = none
	attrs       map[int32]uint8     // lstrip/rstrip per token
	cleanSpaces *bool               // decode clean-up; nil = the Pre default
	tiktoken    bool                // rank = id of the concatenation, no merge list
	normJSON    []byte              // tokenizer.json normalizer behind normalize
	stripSpace  *bool               // SentencePiece decode drops a leading space; nil = AddSpacePrefix
}

type modelKind int

const (
	kindSPM modelKind = iota
	kindBPE
)

// Tokenizer encodes and decodes text for one vocabulary. It is safe for
// concurrent use.
type Tokenizer struct {
	v    *Vocab
	opt  options
	kind modelKind

	ids      map[string]int32 // token text → id (last one wins, as in llama.cpp)
	types    []int32
	scores   []float32
	tokBytes [][]byte // decoded bytes per token; nil for control tokens
	eog      map[int32]bool

	specials []int32 // control, user-defined and unknown tokens, longest first

	bos, eos                       int32
	addBOS, addEOS, addSpacePrefix bool
	stripSpace, clean              bool

	byteTok  [256]int32 // SPM byte fallback tokens
	spmSplit bool       // SPM: no token has "▁" after another character
	cache    pieceCache // SPM words already encoded
	bpe      *bpeModel
	pre      *preTokenizer

	exportOnce sync.Once
	exported   *Vocab
}

// eogTexts are token texts that end a generation in the chat formats.
var eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"}

// cleanPre lists the pre-tokenizers whose decoding skips llama.cpp's
// clean_spaces step.
var noCleanPre = map[string]bool{"deepseek-llm": true, "deepseek-coder": true, "deepseek-v3": true,
	"qwen2": true, "deepseek-r1-qwen": true, "megrez": true, "stablelm2": true, "command-r": true,
	"poro-chat": true, "viking": true, "tekken": true, "smollm": true, "chameleon": true}

// addBOSPre lists the byte-level pre-tokenizers whose models add BOS by default.
var addBOSPre = map[string]bool{"llama3": true, "llama-v3": true, "llama-bpe": true, "falcon3": true,
	"tekken": true, "chameleon": true}

// New builds a Tokenizer from v. v is kept, not copied; do not change it
// afterwards.
func New(v *Vocab) (*Tokenizer, error) {
	return newTokenizer(v, options{})
}

func newTokenizer(v *Vocab, opt options) (*Tokenizer, error) {
	if v == nil || len(v.Tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrInvalid)
	}
	n := len(v.Tokens)
	if v.Scores != nil && len(v.Scores) != n {
		return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrInvalid, len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrInvalid, len(v.Types), n)
	}
	t := &Tokenizer{v: v, opt: opt, ids: make(map[string]int32, n), scores: v.Scores,
		eog: make(map[int32]bool), bos: -1, eos: -1}
	t.types = make([]int32, n)
	for i := range t.types {
		t.types[i] = TypeNormal
		if v.Types != nil && v.Types[i] >= TypeNormal && v.Types[i] <= TypeByte {
			t.types[i] = v.Types[i]
		}
	}
	for i, s := range v.Tokens {
		t.ids[s] = int32(i)
	}
	valid := func(id int32) int32 {
		if id >= 0 && int(id) < n {
			return id
		}
		return -1
	}
	t.bos, t.eos = valid(v.BOS), valid(v.EOS)
	switch v.Model {
	case "llama":
		t.kind = kindSPM
		t.addBOS, t.addEOS, t.addSpacePrefix = true, false, true
	case "gpt2":
		t.kind = kindBPE
		t.addBOS = addBOSPre[v.Pre]
	default:
		return nil, fmt.Errorf("%w: tokenizer model %q", ErrUnsupported, v.Model)
	}
	if v.AddBOS != nil {
		t.addBOS = *v.AddBOS
	}
	if v.AddEOS != nil {
		t.addEOS = *v.AddEOS
	}
	if v.AddSpacePrefix != nil {
		t.addSpacePrefix = *v.AddSpacePrefix
	}
	for _, id := range []int32{v.EOS, v.EOT, v.EOM} {
		if id = valid(id); id >= 0 {
			t.eog[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.ids[s]; ok {
			t.eog[id] = true
		}
	}
	t.tokBytes = make([][]byte, n)
	if t.kind == kindSPM {
		if err := t.initSPM(); err != nil {
			return nil, err
		}
	} else if err := t.initBPE(); err != nil {
		return nil, err
	}
	for i, ty := range t.types {
		if (ty == TypeControl || ty == TypeUserDefined || ty == TypeUnknown) && v.Tokens[i] != "" {
			t.specials = append(t.specials, int32(i))
		}
	}
	sort.SliceStable(t.specials, func(a, b int) bool {
		return len(v.Tokens[t.specials[a]]) > len(v.Tokens[t.specials[b]])
	})
	return t, nil
}

func (t *Tokenizer) initSPM() error {
	v := t.v
	unk := int32(-1)
	if v.UNK >= 0 && int(v.UNK) < len(v.Tokens) {
		unk = v.UNK
	}
	for b := 0; b < 256; b++ {
		t.byteTok[b] = unk
		if id, ok := t.ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			t.byteTok[b] = id
		} else if id, ok := t.ids[string([]byte{byte(b)})]; ok {
			t.byteTok[b] = id
		}
	}
	for i, s := range v.Tokens {
		switch t.types[i] {
		case TypeControl, TypeUnknown:
		case TypeByte:
			if b, ok := parseByteToken(s); ok {
				t.tokBytes[i] = []byte{b}
			} else {
				t.tokBytes[i] = []byte(s)
			}
		default:
			t.tokBytes[i] = []byte(strings.ReplaceAll(s, "\u2581", " "))
		}
	}
	t.spmSplit = true
	for _, s := range v.Tokens {
		if strings.Contains(strings.TrimLeft(s, "\u2581"), "\u2581") {
			t.spmSplit = false
			break
		}
	}
	t.stripSpace = t.addSpacePrefix
	if t.opt.stripSpace != nil {
		t.stripSpace = *t.opt.stripSpace
	}
	return nil
}

func (t *Tokenizer) initBPE() error {
	v := t.v
	raw := make([]string, len(v.Tokens))
	for i, s := range v.Tokens {
		switch t.types[i] {
		case TypeControl, TypeUnknown:
		case TypeUserDefined:
			t.tokBytes[i] = []byte(s)
		case TypeByte:
			if b, ok := parseByteToken(s); ok {
				t.tokBytes[i] = []byte{b}
				continue
			}
			fallthrough
		default:
			r, ok := byteUnmap(s)
			if !ok {
				t.tokBytes[i] = []byte(s)
				continue
			}
			t.tokBytes[i] = []byte(r)
			if t.types[i] == TypeNormal || t.types[i] == TypeByte {
				raw[i] = r
			}
		}
	}
	unk := int32(-1)
	if v.UNK >= 0 && int(v.UNK) < len(v.Tokens) {
		unk = v.UNK
	}
	var err error
	t.bpe, err = newBPEModel(raw, v.Merges, t.opt.tiktoken, unk)
	if err != nil {
		return err
	}
	pre, known := canonicalPre(v.Pre)
	t.bpe.ignoreMerges = pre == "llama-bpe" || v.Pre == "tekken"
	if v.IgnoreMerges != nil {
		t.bpe.ignoreMerges = *v.IgnoreMerges
	}
	patterns := t.opt.prePatterns
	if patterns == nil {
		if !known {
			return fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, v.Pre)
		}
		patterns = prePatterns[pre]
	}
	if t.pre, err = newPreTokenizer(patterns); err != nil {
		return err
	}
	t.clean = !noCleanPre[v.Pre] && !noCleanPre[pre]
	if t.opt.cleanSpaces != nil {
		t.clean = *t.opt.cleanSpaces
	}
	return nil
}

// parseByteToken reads a "<0xNN>" piece.
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	b, err := strconv.ParseUint(s[3:5], 16, 8)
	return byte(b), err == nil
}

// fragment is a special token (id ≥ 0) or a run of text between them.
type fragment struct {
	id   int32
	text string
}

// splitSpecial cuts text at special tokens, longest first, each token in
// turn matching every occurrence in the fragments left so far. Without
// parseSpecial only user-defined tokens match.
func (t *Tokenizer) splitSpecial(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{id: -1, text: text}}
	for _, id := range t.specials {
		if !parseSpecial && t.types[id] != TypeUserDefined {
			continue
		}
		tok := t.v.Tokens[id]
		if !strings.Contains(text, tok) {
			continue
		}
		attr := t.opt.attrs[id]
		var next []fragment
		for _, f := range frags {
			if f.id >= 0 {
				next = append(next, f)
				continue
			}
			s := f.text
			for {
				i := strings.Index(s, tok)
				if i < 0 {
					break
				}
				left := s[:i]
				if attr&attrLStrip != 0 {
					left = strings.TrimRightFunc(left, unicode.IsSpace)
				}
				if left != "" {
					next = append(next, fragment{id: -1, text: left})
				}
				next = append(next, fragment{id: id})
				s = s[i+len(tok):]
				if attr&attrRStrip != 0 {
					s = strings.TrimLeftFunc(s, unicode.IsSpace)
				}
			}
			if s != "" {
				next = append(next, fragment{id: -1, text: s})
			}
		}
		frags = next
	}
	return frags
}

// Encode turns text into token ids. addSpecial adds BOS/EOS as the
// vocabulary asks; parseSpecial lets control tokens written in text (e.g.
// "<|im_end|>") become their ids; without it they are plain text.
// User-defined tokens always match.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	out := make([]int32, 0, len(text)/4+2)
	if addSpecial && t.addBOS && t.bos >= 0 {
		out = append(out, t.bos)
	}
	prevSpecial := true
	for _, f := range t.splitSpecial(text, parseSpecial) {
		if f.id >= 0 {
			out = append(out, f.id)
			prevSpecial = true
			continue
		}
		s := f.text
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		if t.opt.normalize != nil {
			s = t.opt.normalize(s)
		}
		if t.kind == kindSPM {
			if t.addSpacePrefix && prevSpecial {
				s = " " + s
			}
			out = t.spmEncode(s, out)
		} else {
			t.pre.split(s, func(piece string) { out = t.bpe.encode(piece, out) })
		}
		prevSpecial = false
	}
	if addSpecial && t.addEOS && t.eos >= 0 {
		out = append(out, t.eos)
	}
	return out
}

// TokenBytes returns the raw bytes token id stands for: byte pieces give
// one byte, "▁" is a space (SentencePiece) and byte-mapped text is unmapped
// (byte-level BPE). Control and unknown tokens and out-of-range ids give
// nothing. The slice must not be modified.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.tokBytes) {
		return nil
	}
	return t.tokBytes[id]
}

// Decode turns ids back into text: the bytes of all tokens joined, then
// read as UTF-8 (an invalid byte becomes U+FFFD). Control tokens are
// skipped. With the SentencePiece dummy prefix on, one leading space is
// dropped from the first token that yields text (SentencePiece's rule, so
// [BOS, ▁Hello] gives "Hello"). Byte-level vocabularies whose llama.cpp
// decoding cleans spaces ("gpt-2", "llama-bpe", …) remove the space before
// ? ! . , and some apostrophes, as llama.cpp does.
func (t *Tokenizer) Decode(ids []int32) string {
	var buf []byte
	first := true
	for _, id := range ids {
		b := t.TokenBytes(id)
		if len(b) == 0 {
			continue
		}
		if first && t.stripSpace && b[0] == ' ' {
			b = b[1:]
		}
		first = false
		buf = append(buf, b...)
	}
	if t.clean {
		buf = cleanSpaces(buf)
	}
	return validString(buf)
}

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.v.Tokens) }

// BOS is the beginning-of-sequence id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// AddBOS reports whether Encode with addSpecial puts BOS first.
func (t *Tokenizer) AddBOS() bool { return t.addBOS && t.bos >= 0 }

// IsEOG reports whether id ends a generation: EOS, EOT, EOM or a
// well-known end-of-turn token (<|eot_id|>, <|im_end|>, <|end|>, …).
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// TokenText is the piece of id as the vocabulary stores it ("▁Hello",
// "Ġworld", "<|im_end|>"); "" when out of range.
func (t *Tokenizer) TokenText(id int32) string {
	if id < 0 || int(id) >= len(t.v.Tokens) {
		return ""
	}
	return t.v.Tokens[id]
}

// TokenID finds the id of a piece as the vocabulary stores it.
func (t *Tokenizer) TokenID(piece string) (int32, bool) {
	id, ok := t.ids[piece]
	return id, ok
}
