package tokenizer

import (
	"fmt"

	"github.com/dlclark/regexp2"
)

// Pre-tokenizer regexes, applied in order: each splits the pieces the
// previous one left, and text between matches stays a piece of its own.
const (
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	// patLlama3 is the Llama 3 tokenizer.json spelling; patLlama3Alt the
	// same rule without the case-insensitive group.
	patLlama3    = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patLlama3Alt = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2     = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2Alt  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patCJK       = `[一-龥ࠀ-一가-퟿]+`
)

// prePatterns lists the regexes of each canonical pre-tokenizer name.
var prePatterns = map[string][]string{
	"gpt-2":     {patGPT2},
	"default":   {`[\p{P}\$\+<=>\^~\|]+`, patGPT2, `\p{N}+`, `[0-9][0-9][0-9]`},
	"llama-bpe": {patLlama3},
	"qwen2":     {patQwen2},
	"deepseek-llm": {
		`[\r\n]`,
		`\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+`,
		`\s?[!-/:-~！-／：-～‘-‟　-。]+`,
		`\s+$`,
		patCJK,
		`\p{N}+`,
	},
	"deepseek-coder": {`[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, patCJK, `\p{N}`},
	"starcoder":      {`\p{N}`, patGPT2},
	"falcon":         {"[\\p{P}\\$\\+<=>\\^~\\|`]+", patGPT2, `[0-9][0-9][0-9]`},
}

// preAliases maps the other names GGUF files use to a canonical name.
var preAliases = map[string]string{
	"": "default", "phi-2": "gpt-2", "roberta-bpe": "gpt-2", "gigachat": "gpt-2", "mpt": "gpt-2",
	"olmo": "gpt-2", "jais": "gpt-2", "jina-v1-en": "gpt-2", "jina-v2-es": "gpt-2", "jina-v2-de": "gpt-2",
	"jina-v2-code": "gpt-2", "jina-es": "gpt-2", "jina-de": "gpt-2",
	"llama3": "llama-bpe", "llama-v3": "llama-bpe", "falcon3": "llama-bpe", "dbrx": "llama-bpe",
	"smaug-bpe":        "llama-bpe",
	"deepseek-r1-qwen": "qwen2", "megrez": "qwen2", "stablelm2": "qwen2",
	"refact": "starcoder", "command-r": "starcoder", "smollm": "starcoder", "codeshell": "starcoder",
	"exaone": "starcoder", "minerva-7b": "starcoder",
}

// canonicalPre resolves a GGUF pre-tokenizer name to a key of prePatterns.
func canonicalPre(pre string) (string, bool) {
	if a, ok := preAliases[pre]; ok {
		pre = a
	}
	_, ok := prePatterns[pre]
	return pre, ok
}

// preTokenizer splits text into the pieces BPE runs on.
type preTokenizer struct {
	patterns []string
	res      []*regexp2.Regexp
	// fast[i], when not nil, is a hand-written splitter that gives the
	// same pieces as res[i] (see pretok_fast.go); res[i] is kept as the
	// reference.
	fast []splitFunc
}

// newPreTokenizer compiles patterns; a pattern with a hand-written
// splitter uses it instead of the regex.
func newPreTokenizer(patterns []string) (*preTokenizer, error) {
	p, err := newRegexPreTokenizer(patterns)
	if err != nil {
		return nil, err
	}
	for i, pat := range patterns {
		p.fast[i] = fastSplitters[pat]
	}
	return p, nil
}

// newRegexPreTokenizer compiles patterns and uses regexp2 for all of them.
func newRegexPreTokenizer(patterns []string) (*preTokenizer, error) {
	p := &preTokenizer{patterns: patterns, fast: make([]splitFunc, len(patterns))}
	for _, pat := range patterns {
		re, err := regexp2.Compile(pat, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("%w: pre-tokenizer regex %q: %v", ErrInvalid, pat, err)
		}
		p.res = append(p.res, re)
	}
	return p, nil
}

// split calls emit for every piece of text, in order; pieces are
// substrings of text. An invalid UTF-8 byte counts as one U+FFFD.
func (p *preTokenizer) split(text string, emit func(string)) {
	if len(p.res) == 0 {
		if text != "" {
			emit(text)
		}
		return
	}
	p.splitLevel(0, text, emit)
}

func (p *preTokenizer) splitLevel(level int, text string, emit func(string)) {
	if level == len(p.res) {
		emit(text)
		return
	}
	if f := p.fast[level]; f != nil {
		if level+1 == len(p.res) {
			f(text, emit)
		} else {
			f(text, func(piece string) { p.splitLevel(level+1, piece, emit) })
		}
		return
	}
	runes := make([]rune, 0, len(text))
	// off[i] is the byte offset of rune i (regexp2 reports rune offsets);
	// ranging over text keeps invalid bytes one byte wide.
	off := make([]int, 0, len(text)+1)
	for i, r := range text {
		runes = append(runes, r)
		off = append(off, i)
	}
	off = append(off, len(text))
	last := 0
	m, err := p.res[level].FindRunesMatch(runes)
	for m != nil && err == nil {
		if m.Index > last {
			p.splitLevel(level+1, text[off[last]:off[m.Index]], emit)
		}
		if m.Length > 0 {
			p.splitLevel(level+1, text[off[m.Index]:off[m.Index+m.Length]], emit)
		}
		last = m.Index + m.Length
		m, err = p.res[level].FindNextMatch(m)
	}
	if last < len(runes) {
		p.splitLevel(level+1, text[off[last]:], emit)
	}
}
