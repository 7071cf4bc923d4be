package tools

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
)

// Delta is one piece of parsed output: content text, or one whole call.
type Delta struct {
	Content string
	Call    *Call
}

// Parse splits a whole output into content and calls. A call that does not
// parse is returned as content, markers included. It gives exactly what a
// Parser fed the same text in any pieces gives.
func Parse(f Family, text string) (content string, calls []Call) {
	p := NewParser(f)
	var b strings.Builder
	for _, d := range append(p.Add(text), p.Flush()...) {
		if d.Call != nil {
			calls = append(calls, *d.Call)
		} else {
			b.WriteString(d.Content)
		}
	}
	return b.String(), calls
}

// parserMode is where a Parser is in the output.
type parserMode int

const (
	modeStart   parserMode = iota // nothing decided yet (Llama3: leading JSON?)
	modeContent                   // plain text, watching for a call marker
	modeCall                      // inside a Hermes <tool_call> block
	modeTail                      // the rest of the output is calls (Llama3, Mistral)
	modePlain                     // the rest of the output is content
)

// Parser splits streamed output into content and calls. Text that may be
// the start of a call marker, and whitespace next to calls, is held back
// until decided; a call is reported once it is complete.
type Parser struct {
	f         Family
	mode      parserMode
	buf       string // undecided text
	ws        string // trailing whitespace of content, held
	afterCall bool   // no content since the last call: leading whitespace is dropped
	calls     int
}

// NewParser returns a streaming parser for f (None: everything is content).
func NewParser(f Family) *Parser {
	p := &Parser{f: f}
	switch f {
	case None:
		p.mode = modePlain
	case Hermes, Mistral:
		p.mode = modeContent
	}
	return p
}

// Calls returns how many calls were reported so far.
func (p *Parser) Calls() int { return p.calls }

// Add consumes the next piece of output.
func (p *Parser) Add(text string) []Delta {
	if p.mode == modePlain {
		if text == "" {
			return nil
		}
		return []Delta{{Content: text}}
	}
	p.buf += text
	var out []Delta
	for {
		switch p.mode {
		case modeStart:
			t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
			switch {
			case t == "" || (len(t) < len(pythonTag) && strings.HasPrefix(pythonTag, t)):
				return out
			case strings.HasPrefix(t, "{") || strings.HasPrefix(t, pythonTag):
				p.mode = modeTail
			default:
				p.mode = modePlain
				out = append(out, Delta{Content: p.buf})
				p.buf = ""
				return out
			}
		case modeContent:
			marker := hermesOpen
			if p.f == Mistral {
				marker = mistralTag
			}
			if i := strings.Index(p.buf, marker); i >= 0 {
				out = p.content(out, p.buf[:i], true)
				p.buf = p.buf[i+len(marker):]
				if p.f == Mistral {
					p.mode = modeTail
				} else {
					p.mode = modeCall
				}
				continue
			}
			held := partialSuffix(p.buf, marker)
			out = p.content(out, p.buf[:len(p.buf)-held], false)
			p.buf = p.buf[len(p.buf)-held:]
			return out
		case modeCall:
			i := strings.Index(p.buf, hermesClose)
			if i < 0 {
				return out
			}
			body := p.buf[:i]
			p.buf = p.buf[i+len(hermesClose):]
			p.mode = modeContent
			out = p.block(out, body, hermesOpen+body+hermesClose)
		case modeTail:
			return out
		}
	}
}

// Flush ends the output and returns what was held back.
func (p *Parser) Flush() []Delta {
	var out []Delta
	switch p.mode {
	case modeStart:
		out = p.content(out, p.buf, false)
	case modeContent:
		out = p.content(out, p.buf, false)
	case modeCall:
		out = p.block(out, p.buf, hermesOpen+p.buf)
	case modeTail:
		var raw string
		var calls []Call
		var ok bool
		if p.f == Mistral {
			raw = mistralTag + p.buf
			calls, ok = parseMistral(p.buf)
		} else {
			raw = p.buf
			calls, ok = parseLlama(p.buf)
		}
		if ok {
			p.ws = ""
			for i := range calls {
				out = append(out, Delta{Call: &calls[i]})
				p.calls++
			}
		} else {
			out = p.content(out, raw, false)
		}
	}
	p.buf = ""
	if p.ws != "" && !p.afterCall {
		out = append(out, Delta{Content: p.ws})
	}
	p.ws = ""
	p.mode = modePlain
	return out
}

// block reports one Hermes call body, or raw as content when it does not parse.
func (p *Parser) block(out []Delta, body, raw string) []Delta {
	c, ok := parseCallJSON(strings.TrimSpace(body))
	if !ok {
		return p.content(out, raw, false)
	}
	p.ws = ""
	p.afterCall = true
	p.calls++
	return append(out, Delta{Call: &c})
}

// content emits text as content: leading whitespace right after a call is
// dropped, trailing whitespace is held until more content (or dropped
// when a call follows: beforeCall).
func (p *Parser) content(out []Delta, text string, beforeCall bool) []Delta {
	if p.afterCall {
		text = strings.TrimLeftFunc(text, unicode.IsSpace)
		if text == "" {
			if beforeCall {
				p.ws = ""
			}
			return out
		}
		p.afterCall = false
	}
	body := strings.TrimRightFunc(text, unicode.IsSpace)
	if body != "" {
		out = append(out, Delta{Content: p.ws + body})
		p.ws = ""
	}
	p.ws += text[len(body):]
	if beforeCall {
		p.ws = ""
	}
	return out
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of marker.
func partialSuffix(s, marker string) int {
	for k := min(len(marker)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, marker[:k]) {
			return k
		}
	}
	return 0
}

// callJSON is one call object as models write it.
type callJSON struct {
	Name       *string         `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
}

// parseCallJSON reads {"name": …, "arguments"|"parameters": …}.
func parseCallJSON(s string) (Call, bool) {
	var c callJSON
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&c); err != nil || dec.More() {
		return Call{}, false
	}
	return c.call()
}

func (c callJSON) call() (Call, bool) {
	if c.Name == nil || *c.Name == "" {
		return Call{}, false
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	a, ok := normalizeArgs(args)
	if !ok {
		return Call{}, false
	}
	return Call{Name: *c.Name, Arguments: a}, true
}

// normalizeArgs turns an arguments value into compact JSON object text: an
// object as written, a string holding an object decoded, absent → {}.
func normalizeArgs(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		raw = json.RawMessage(strings.TrimSpace(s))
	}
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
}

// parseLlama reads [<|python_tag|>] call (';' call)*.
func parseLlama(s string) ([]Call, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimSpace(strings.TrimPrefix(s, pythonTag))
	dec := json.NewDecoder(strings.NewReader(s))
	var calls []Call
	for {
		var c callJSON
		if err := dec.Decode(&c); err != nil {
			return nil, false
		}
		call, ok := c.call()
		if !ok {
			return nil, false
		}
		calls = append(calls, call)
		rest := strings.TrimSpace(s[dec.InputOffset():])
		if rest == "" {
			return calls, true
		}
		if rest[0] != ';' {
			return nil, false
		}
		rest = strings.TrimSpace(rest[1:])
		if rest == "" {
			return calls, true
		}
		s = rest
		dec = json.NewDecoder(strings.NewReader(s))
	}
}

// parseMistral reads the JSON array (or single object) after [TOOL_CALLS].
func parseMistral(s string) ([]Call, bool) {
	s = strings.TrimSpace(s)
	var list []callJSON
	if strings.HasPrefix(s, "{") {
		var one callJSON
		if !strictDecode(s, &one) {
			return nil, false
		}
		list = []callJSON{one}
	} else if !strictDecode(s, &list) || len(list) == 0 {
		return nil, false
	}
	calls := make([]Call, 0, len(list))
	for _, c := range list {
		call, ok := c.call()
		if !ok {
			return nil, false
		}
		calls = append(calls, call)
	}
	return calls, true
}

// strictDecode decodes exactly one JSON value filling s.
func strictDecode(s string, v any) bool {
	dec := json.NewDecoder(strings.NewReader(s))
	if dec.Decode(v) != nil {
		return false
	}
	_, err := dec.Token()
	return err != nil // io.EOF: nothing after the value
}
