package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/memra-ai/memra/serve/grammar"
)

// Tool is one entry of a request's tools.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// ParseTools reads a request's tools array (null or absent: none).
func ParseTools(raw json.RawMessage) ([]Tool, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var ts []Tool
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil, fmt.Errorf("%w: tools must be an array of {type, function} objects: %v", ErrBadTools, err)
	}
	seen := map[string]bool{}
	for i, t := range ts {
		if t.Type != "function" {
			return nil, fmt.Errorf("%w: tools[%d].type is %q; only \"function\" is supported", ErrBadTools, i, t.Type)
		}
		if t.Function.Name == "" {
			return nil, fmt.Errorf("%w: tools[%d].function.name is required", ErrBadTools, i)
		}
		if seen[t.Function.Name] {
			return nil, fmt.Errorf("%w: tools[%d].function.name %q is given twice", ErrBadTools, i, t.Function.Name)
		}
		seen[t.Function.Name] = true
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && string(p) != "null" && p[0] != '{' {
			return nil, fmt.Errorf("%w: tools[%d].function.parameters must be a JSON schema object", ErrBadTools, i)
		}
	}
	return ts, nil
}

// CheckSchemas checks every tool's parameters schema, whatever the
// tool_choice: one that is not a valid JSON schema (malformed JSON, a
// keyword of the wrong type, an unknown type name) gives ErrBadTools
// naming the tool and the fault. A valid schema beyond the subset that
// decoding can enforce (grammar.ErrUnsupported) passes here: only
// CallGrammars, for tool_choice required or a named function, needs it.
func CheckSchemas(ts []Tool) error {
	for i, t := range ts {
		params := bytes.TrimSpace(t.Function.Parameters)
		if len(params) == 0 || string(params) == "null" {
			continue
		}
		_, err := grammar.FromJSONSchema(params)
		if errors.Is(err, grammar.ErrInvalidSchema) || errors.Is(err, grammar.ErrSyntax) {
			return fmt.Errorf("%w: tools[%d].function.parameters (function %q) is not a valid JSON schema: %w",
				ErrBadTools, i, t.Function.Name, err)
		}
	}
	return nil
}

// Choice is a request's tool_choice.
type Choice struct {
	Mode string // "auto", "none", "required" or "function"
	Name string // the function of Mode "function"
}

// ParseChoice reads tool_choice: absent means "auto" with tools.
func ParseChoice(raw json.RawMessage) (Choice, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return Choice{Mode: "auto"}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return Choice{Mode: s}, nil
		}
		return Choice{}, fmt.Errorf("%w: tool_choice %q is not one of auto, none, required", ErrBadTools, s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Type != "function" || obj.Function.Name == "" {
		return Choice{}, fmt.Errorf("%w: tool_choice must be auto, none, required or "+
			`{"type":"function","function":{"name":…}}`, ErrBadTools)
	}
	return Choice{Mode: "function", Name: obj.Function.Name}, nil
}

// CallGrammars returns the phases of the constraint that makes the model
// write exactly one call in f's syntax: to one of tools, or to the one
// named (name != ""). Each function's parameters schema constrains its
// arguments. Run the phases in order with NewChainMask. Schema errors wrap
// the grammar package's (grammar.ErrUnsupported, …).
func CallGrammars(f Family, tools []Tool, name string) ([]*grammar.Grammar, error) {
	argsKey := "arguments"
	if f == Llama3 {
		argsKey = "parameters"
	}
	var alts []string
	for _, t := range tools {
		if name != "" && t.Function.Name != name {
			continue
		}
		params := bytes.TrimSpace(t.Function.Parameters)
		if len(params) == 0 || string(params) == "null" {
			params = []byte(`{"type":"object"}`)
		}
		q, _ := json.Marshal(t.Function.Name)
		alts = append(alts, fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%s},%q:%s},`+
			`"required":["name",%q],"additionalProperties":false}`, q, argsKey, params, argsKey))
	}
	if len(alts) == 0 {
		if name != "" {
			return nil, fmt.Errorf("%w: tool_choice names function %q, which is not in tools", ErrBadTools, name)
		}
		return nil, fmt.Errorf("%w: tool_choice requires a call but tools is empty", ErrBadTools)
	}
	call := alts[0]
	if len(alts) > 1 {
		call = `{"anyOf":[` + strings.Join(alts, ",") + `]}`
	}
	var prefix, suffix string
	switch f {
	case Hermes:
		prefix, suffix = hermesOpen+"\n", "\n"+hermesClose
	case Llama3:
	case Mistral:
		prefix = mistralTag
		call = `{"type":"array","items":` + call + `,"minItems":1,"maxItems":1}`
	default:
		return nil, ErrNoSyntax
	}
	body, err := grammar.FromJSONSchema([]byte(call))
	if err != nil {
		return nil, fmt.Errorf("tool parameters: %w", err)
	}
	var phases []*grammar.Grammar
	for _, part := range []string{prefix, "", suffix} {
		if part == "" {
			continue
		}
		g, err := grammar.FromGBNF("root ::= " + gbnfLiteral(part))
		if err != nil {
			panic("BUG: literal grammar does not compile: " + err.Error())
		}
		phases = append(phases, g)
	}
	if prefix == "" {
		return append([]*grammar.Grammar{body}, phases...), nil
	}
	return append([]*grammar.Grammar{phases[0], body}, phases[1:]...), nil
}

// gbnfLiteral quotes s as a GBNF string literal.
func gbnfLiteral(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\' || r == '[' || r == ']':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ChainMask runs grammars one after another as one runtime.Mask: when
// one phase is complete and nothing can extend it, the next begins. A
// token never spans two phases. End-of-generation tokens (eog) are allowed
// only where the last phase may end. A rejected token leaves only eog.
type ChainMask struct {
	phases []*grammar.Matcher
	v      *grammar.Vocabulary
	cur    int
	eog    []int32
	err    error
}

// NewChainMask returns a mask over v running gs in order; eog lists the
// vocabulary's end-of-generation tokens.
func NewChainMask(v *grammar.Vocabulary, eog []int32, gs ...*grammar.Grammar) *ChainMask {
	if len(gs) == 0 {
		panic("BUG: NewChainMask without grammars")
	}
	c := &ChainMask{eog: eog, v: v}
	for _, g := range gs {
		c.phases = append(c.phases, grammar.NewMatcher(g, v))
	}
	return c
}

// Err returns the first rejected token's error, if any.
func (c *ChainMask) Err() error { return c.err }

// Apply implements runtime.Mask.
func (c *ChainMask) Apply(logits []float32) {
	negInf := float32(math.Inf(-1))
	if c.err != nil {
		keep := make(map[int32]bool, len(c.eog))
		for _, t := range c.eog {
			keep[t] = true
		}
		for i := range logits {
			if !keep[int32(i)] {
				logits[i] = negInf
			}
		}
		return
	}
	c.phases[c.cur].Apply(logits)
	if c.cur < len(c.phases)-1 {
		for _, t := range c.eog {
			if int(t) < len(logits) {
				logits[t] = negInf
			}
		}
	}
}

// AllowedBits implements runtime.BitsetMask: the tokens Apply leaves alone.
func (c *ChainMask) AllowedBits(dst []uint64) []uint64 {
	if w := c.v.Words(); cap(dst) < w {
		dst = make([]uint64, w)
	} else {
		dst = dst[:w]
	}
	if c.err != nil {
		clear(dst)
		for _, t := range c.eog {
			if int(t)>>6 < len(dst) {
				dst[t>>6] |= 1 << (t & 63)
			}
		}
		return dst
	}
	c.phases[c.cur].Mask(dst)
	if c.cur < len(c.phases)-1 {
		for _, t := range c.eog {
			if int(t)>>6 < len(dst) {
				dst[t>>6] &^= 1 << (t & 63)
			}
		}
	}
	return dst
}

// Accept implements runtime.Mask.
func (c *ChainMask) Accept(token int32) {
	if c.err != nil {
		return
	}
	if err := c.phases[c.cur].Accept(token); err != nil {
		c.err = err
		return
	}
	for c.cur < len(c.phases)-1 && c.phases[c.cur].Done() {
		c.cur++
	}
}
