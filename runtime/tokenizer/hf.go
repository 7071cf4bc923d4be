package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// hfNode is any tokenizer.json component (normalizer, pre_tokenizer,
// post_processor, decoder): its type and whichever fields it uses.
type hfNode struct {
	Type           string            `json:"type"`
	Normalizers    []hfNode          `json:"normalizers"`
	PreTokenizers  []hfNode          `json:"pretokenizers"`
	Processors     []hfNode          `json:"processors"`
	Decoders       []hfNode          `json:"decoders"`
	Pattern        *hfPattern        `json:"pattern"`
	Content        *string           `json:"content"`
	Prepend        *string           `json:"prepend"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Replacement    string            `json:"replacement"`
	PrependScheme  string            `json:"prepend_scheme"`
	Start          int               `json:"start"`
	Single         []hfTemplateItem  `json:"single"`
	SpecialTokens  map[string]hfSpec `json:"special_tokens"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type hfTemplateItem struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type hfSpec struct {
	IDs []int32 `json:"ids"`
}

type hfAdded struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
	LStrip  bool   `json:"lstrip"`
	RStrip  bool   `json:"rstrip"`
}

type hfModel struct {
	Type         string           `json:"type"`
	Vocab        map[string]int32 `json:"vocab"`
	Merges       json.RawMessage  `json:"merges"`
	ByteFallback bool             `json:"byte_fallback"`
	IgnoreMerges bool             `json:"ignore_merges"`
	UnkToken     *string          `json:"unk_token"`
	ContPrefix   *string          `json:"continuing_subword_prefix"`
	EndSuffix    *string          `json:"end_of_word_suffix"`
}

type hfFile struct {
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  *hfNode         `json:"pre_tokenizer"`
	PostProcessor *hfNode         `json:"post_processor"`
	Decoder       *hfNode         `json:"decoder"`
	Model         hfModel         `json:"model"`
}

// hfConfig is the part of tokenizer_config.json that shapes tokenization.
type hfConfig struct {
	AddBOS    *bool           `json:"add_bos_token"`
	AddEOS    *bool           `json:"add_eos_token"`
	BOS       json.RawMessage `json:"bos_token"`
	EOS       json.RawMessage `json:"eos_token"`
	Clean     *bool           `json:"clean_up_tokenization_spaces"`
	PadToken  json.RawMessage `json:"pad_token"`
	UnkTokenC json.RawMessage `json:"unk_token"`
}

// tokenString reads a config token given as "text" or {"content": "text"}.
func tokenString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

// walk calls f on n and, depth first, on every component inside a Sequence.
func (n *hfNode) walk(f func(*hfNode) error) error {
	if n == nil {
		return nil
	}
	if err := f(n); err != nil {
		return err
	}
	for _, list := range [][]hfNode{n.Normalizers, n.PreTokenizers, n.Processors, n.Decoders} {
		for i := range list {
			if err := list[i].walk(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// FromHF builds a tokenizer from a Hugging Face tokenizer.json and, when
// not empty, its tokenizer_config.json. Only model BPE is supported: with
// a ByteLevel pre-tokenizer or decoder it becomes a byte-level ("gpt2")
// Vocab, otherwise (byte_fallback, Metaspace, a ▁ normaliser) a
// SentencePiece ("llama") Vocab whose scores follow the merge order.
func FromHF(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json: %v", ErrFormat, err)
	}
	var cfg hfConfig
	if len(tokenizerConfigJSON) > 0 {
		if err := json.Unmarshal(tokenizerConfigJSON, &cfg); err != nil {
			return nil, fmt.Errorf("%w: tokenizer_config.json: %v", ErrFormat, err)
		}
	}
	if f.Model.Type != "BPE" && !(f.Model.Type == "" && f.Model.Merges != nil) {
		return nil, fmt.Errorf("%w: tokenizer.json model %q", ErrUnsupported, f.Model.Type)
	}
	if (f.Model.ContPrefix != nil && *f.Model.ContPrefix != "") || (f.Model.EndSuffix != nil && *f.Model.EndSuffix != "") {
		return nil, fmt.Errorf("%w: BPE subword prefix/suffix", ErrUnsupported)
	}
	merges, err := hfMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	// Tokens: the model vocabulary, then the added tokens at their ids.
	n := 0
	for _, id := range f.Model.Vocab {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("%w: tokenizer.json vocab id %d", ErrFormat, id)
		}
		n = max(n, int(id)+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.ID > 1<<24 || a.Content == "" {
			return nil, fmt.Errorf("%w: tokenizer.json added token %d %q", ErrFormat, a.ID, a.Content)
		}
		n = max(n, int(a.ID)+1)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: tokenizer.json has no tokens", ErrFormat)
	}
	v := &Vocab{Tokens: make([]string, n), Types: make([]int32, n), BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1, EOM: -1}
	filled := make([]bool, n)
	for s, id := range f.Model.Vocab {
		v.Tokens[id], v.Types[id], filled[id] = s, TypeNormal, true
	}
	opt := options{attrs: map[int32]uint8{}}
	for _, a := range f.AddedTokens {
		v.Tokens[a.ID], filled[a.ID] = a.Content, true
		v.Types[a.ID] = TypeUserDefined
		if a.Special {
			v.Types[a.ID] = TypeControl
		}
		var at uint8
		if a.LStrip {
			at |= attrLStrip
		}
		if a.RStrip {
			at |= attrRStrip
		}
		if at != 0 {
			opt.attrs[a.ID] = at
		}
	}
	for i := range v.Tokens {
		if !filled[i] {
			v.Tokens[i], v.Types[i] = fmt.Sprintf("[PAD%d]", i), TypeUnused
		}
	}
	ids := make(map[string]int32, n)
	for i, s := range v.Tokens {
		ids[s] = int32(i)
	}
	if f.Model.UnkToken != nil {
		if id, ok := ids[*f.Model.UnkToken]; ok {
			v.UNK, v.Types[id] = id, TypeUnknown
		}
	}

	byteLevel := false
	for _, node := range []*hfNode{f.PreTokenizer, f.Decoder} {
		_ = node.walk(func(x *hfNode) error {
			byteLevel = byteLevel || x.Type == "ByteLevel"
			return nil
		})
	}
	if byteLevel {
		err = hfByteLevel(&f, v, &opt, merges)
	} else {
		err = hfSPM(&f, v, &opt, merges, ids)
	}
	if err != nil {
		return nil, err
	}

	// BOS/EOS: the post-processor template, then the config.
	if err := f.PostProcessor.walk(func(x *hfNode) error {
		if x.Type != "TemplateProcessing" || len(x.Single) == 0 {
			return nil
		}
		special := func(it hfTemplateItem) int32 {
			if it.SpecialToken == nil {
				return -1
			}
			if sp, ok := x.SpecialTokens[it.SpecialToken.ID]; ok && len(sp.IDs) == 1 && sp.IDs[0] >= 0 && int(sp.IDs[0]) < n {
				return sp.IDs[0]
			}
			if id, ok := ids[it.SpecialToken.ID]; ok {
				return id
			}
			return -1
		}
		first, last := special(x.Single[0]), special(x.Single[len(x.Single)-1])
		addBOS, addEOS := first >= 0, last >= 0 && len(x.Single) > 1
		v.AddBOS, v.AddEOS = &addBOS, &addEOS
		if addBOS {
			v.BOS = first
		}
		if addEOS {
			v.EOS = last
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if v.AddBOS == nil {
		no := false
		v.AddBOS, v.AddEOS = &no, &no
	}
	if id, ok := ids[tokenString(cfg.BOS)]; ok {
		v.BOS = id
	}
	if id, ok := ids[tokenString(cfg.EOS)]; ok {
		v.EOS = id
	}
	if id, ok := ids[tokenString(cfg.PadToken)]; ok {
		v.PAD = id
	}
	if cfg.AddBOS != nil {
		v.AddBOS = cfg.AddBOS
	}
	if cfg.AddEOS != nil {
		v.AddEOS = cfg.AddEOS
	}
	if id, ok := ids["<|eot_id|>"]; ok {
		v.EOT = id
	}
	if id, ok := ids["<|eom_id|>"]; ok {
		v.EOM = id
	}
	if cfg.Clean != nil && v.Model == "gpt2" {
		opt.cleanSpaces = cfg.Clean
	}
	return newTokenizer(v, opt)
}

// hfMerges reads legacy "a b" strings or [a, b] pairs into "a b" lines.
// A space inside a pair's token is written as U+0120, as GGUF does.
func hfMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var legacy []string
	if json.Unmarshal(raw, &legacy) == nil {
		out := legacy[:0]
		for _, m := range legacy {
			if strings.HasPrefix(m, "#version") {
				continue
			}
			if len(strings.Split(m, " ")) != 2 {
				return nil, fmt.Errorf("%w: tokenizer.json merge %q is not two tokens", ErrFormat, m)
			}
			out = append(out, m)
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json merges: %v", ErrFormat, err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || p[0] == "" || p[1] == "" {
			return nil, fmt.Errorf("%w: tokenizer.json merge %d is not a pair", ErrFormat, i)
		}
		out[i] = strings.ReplaceAll(p[0], " ", "\u0120") + " " + strings.ReplaceAll(p[1], " ", "\u0120")
	}
	return out, nil
}

// hfByteLevel fills v for a byte-level BPE tokenizer.json.
func hfByteLevel(f *hfFile, v *Vocab, opt *options, merges []string) error {
	v.Model, v.Merges = "gpt2", merges
	im := f.Model.IgnoreMerges
	v.IgnoreMerges = &im
	var patterns []string
	if err := f.PreTokenizer.walk(func(x *hfNode) error {
		switch x.Type {
		case "Sequence":
		case "Split":
			if x.Pattern == nil || x.Invert || (x.Behavior != "Isolated" && x.Behavior != "") {
				return fmt.Errorf("%w: Split pre-tokenizer behavior %q invert %v", ErrUnsupported, x.Behavior, x.Invert)
			}
			switch {
			case x.Pattern.Regex != nil:
				patterns = append(patterns, *x.Pattern.Regex)
			case x.Pattern.String != nil:
				patterns = append(patterns, regexp2.Escape(*x.Pattern.String))
			default:
				return fmt.Errorf("%w: Split pre-tokenizer without a pattern", ErrFormat)
			}
		case "ByteLevel":
			if x.UseRegex == nil || *x.UseRegex {
				patterns = append(patterns, patGPT2)
			}
			if x.AddPrefixSpace != nil && *x.AddPrefixSpace {
				return fmt.Errorf("%w: ByteLevel add_prefix_space", ErrUnsupported)
			}
		default:
			return fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, x.Type)
		}
		return nil
	}); err != nil {
		return err
	}
	v.Pre = namedPre(patterns)
	if v.Pre == "" {
		if patterns == nil {
			patterns = []string{}
		}
		opt.prePatterns = patterns
		v.Pre = "default"
	}
	var err error
	opt.normalize, opt.normJSON, err = hfNormalizer(f.Normalizer, false, nil)
	return err
}

// namedPre finds the pre-tokenizer name whose regexes are patterns.
func namedPre(patterns []string) string {
	if len(patterns) == 1 {
		switch patterns[0] {
		case patLlama3Alt:
			return "llama-bpe"
		case patQwen2Alt:
			return "qwen2"
		case patGPT2 + `|\s+`:
			return "gpt-2"
		}
	}
	names := make([]string, 0, len(prePatterns))
	for k := range prePatterns {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if strings.Join(prePatterns[k], "\x00") == strings.Join(patterns, "\x00") && len(patterns) > 0 {
			return k
		}
	}
	return ""
}

// hfSPM fills v for a SentencePiece-style BPE tokenizer.json (▁ for
// spaces, byte fallback). Scores follow merge order: the token made by
// merge r scores −r; other multi-character tokens score −1e9.
func hfSPM(f *hfFile, v *Vocab, opt *options, merges []string, ids map[string]int32) error {
	v.Model = "llama"
	prefix := false
	if err := f.PreTokenizer.walk(func(x *hfNode) error {
		switch x.Type {
		case "Sequence":
		case "Metaspace":
			if x.Replacement != "" && x.Replacement != "\u2581" {
				return fmt.Errorf("%w: Metaspace replacement %q", ErrUnsupported, x.Replacement)
			}
			prefix = x.PrependScheme != "never" && (x.AddPrefixSpace == nil || *x.AddPrefixSpace)
		default:
			return fmt.Errorf("%w: pre-tokenizer %q with a SentencePiece vocabulary", ErrUnsupported, x.Type)
		}
		return nil
	}); err != nil {
		return err
	}
	var err error
	opt.normalize, opt.normJSON, err = hfNormalizer(f.Normalizer, true, &prefix)
	if err != nil {
		return err
	}
	v.AddSpacePrefix = &prefix
	v.Scores = make([]float32, len(v.Tokens))
	for i, s := range v.Tokens {
		if v.Types[i] == TypeNormal && utf8.RuneCountInString(s) > 1 {
			v.Scores[i] = -1e9
		}
		if f.Model.ByteFallback && v.Types[i] == TypeNormal {
			if _, ok := parseByteToken(s); ok {
				v.Types[i] = TypeByte
			}
		}
	}
	for r := len(merges) - 1; r >= 0; r-- {
		l, rt, _ := splitMerge(merges[r])
		if id, ok := ids[l+rt]; ok {
			v.Scores[id] = -float32(r)
		}
	}
	strip := prefix
	_ = f.Decoder.walk(func(x *hfNode) error {
		if x.Type == "Strip" {
			strip = x.Start > 0
		}
		return nil
	})
	opt.stripSpace = &strip
	return nil
}

// hfNormalizer turns a normalizer into a function over text fragments. For
// a SentencePiece vocabulary, Prepend "▁" sets *prefix and Replace " "→"▁"
// is left to the model, which does both itself.
func hfNormalizer(raw json.RawMessage, spm bool, prefix *bool) (func(string) string, []byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var n hfNode
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, nil, fmt.Errorf("%w: normalizer: %v", ErrFormat, err)
	}
	var steps []func(string) string
	err := n.walk(func(x *hfNode) error {
		switch x.Type {
		case "Sequence":
		case "NFC":
			steps = append(steps, norm.NFC.String)
		case "NFD":
			steps = append(steps, norm.NFD.String)
		case "NFKC":
			steps = append(steps, norm.NFKC.String)
		case "NFKD":
			steps = append(steps, norm.NFKD.String)
		case "Lowercase":
			steps = append(steps, strings.ToLower)
		case "Prepend":
			if x.Prepend == nil {
				return fmt.Errorf("%w: Prepend normalizer without prepend", ErrFormat)
			}
			if spm && *x.Prepend == "\u2581" {
				*prefix = true
				return nil
			}
			p := *x.Prepend
			steps = append(steps, func(s string) string { return p + s })
		case "Replace":
			if x.Pattern == nil || x.Content == nil {
				return fmt.Errorf("%w: Replace normalizer without pattern or content", ErrFormat)
			}
			c := *x.Content
			switch {
			case x.Pattern.String != nil:
				p := *x.Pattern.String
				if spm && p == " " && c == "\u2581" {
					return nil
				}
				steps = append(steps, func(s string) string { return strings.ReplaceAll(s, p, c) })
			case x.Pattern.Regex != nil:
				re, err := regexp.Compile(*x.Pattern.Regex)
				if err != nil {
					return fmt.Errorf("%w: Replace regex %q: %v", ErrUnsupported, *x.Pattern.Regex, err)
				}
				steps = append(steps, func(s string) string { return re.ReplaceAllLiteralString(s, c) })
			default:
				return fmt.Errorf("%w: Replace normalizer without pattern", ErrFormat)
			}
		default:
			return fmt.Errorf("%w: normalizer %q", ErrUnsupported, x.Type)
		}
		return nil
	})
	if err != nil || len(steps) == 0 {
		return nil, nil, err
	}
	return func(s string) string {
		for _, f := range steps {
			s = f(s)
		}
		return s
	}, raw, nil
}
