package tools

import (
	"strings"
	"unicode"
)

// Think tags.
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// PromptOpensThinking reports whether a rendered prompt leaves the model
// inside a reasoning block (it ends with <think>, as DeepSeek-R1 distills
// and some Qwen3 settings render), so the output starts as reasoning.
func PromptOpensThinking(prompt string) bool {
	return strings.HasSuffix(strings.TrimRightFunc(prompt, unicode.IsSpace), thinkOpen)
}

// SplitReasoning splits a whole output into reasoning and content; it gives
// exactly what a Reasoner fed the same text in any pieces gives.
func SplitReasoning(text string, startInside bool) (reasoning, content string) {
	r := NewReasoner(startInside)
	r1, c1 := r.Add(text)
	r2, c2 := r.Flush()
	return r1 + r2, c1 + c2
}

type reasonState int

const (
	reasonStart   reasonState = iota // has the output opened <think>?
	reasonInside                     // in the reasoning block
	reasonAfter                      // just closed: leading whitespace dropped
	reasonContent                    // everything else is content
)

// Reasoner splits streamed output into reasoning (a leading
// <think>…</think> block, or everything up to </think> when the prompt
// opened the block) and content. Partial tags are held back.
type Reasoner struct {
	state reasonState
	buf   string
	lead  bool // reasoning has not started: leading whitespace dropped
}

// NewReasoner returns a splitter; startInside when the prompt opened the
// reasoning block (PromptOpensThinking).
func NewReasoner(startInside bool) *Reasoner {
	if startInside {
		return &Reasoner{state: reasonInside, lead: true}
	}
	return &Reasoner{}
}

// Add consumes the next piece of output.
func (r *Reasoner) Add(text string) (reasoning, content string) {
	r.buf += text
	var rb, cb strings.Builder
	for {
		switch r.state {
		case reasonStart:
			t := strings.TrimLeftFunc(r.buf, unicode.IsSpace)
			switch {
			case strings.HasPrefix(t, thinkOpen):
				r.buf = t[len(thinkOpen):]
				r.state, r.lead = reasonInside, true
				continue
			case strings.HasPrefix(thinkOpen, t):
				return rb.String(), cb.String()
			}
			r.state = reasonContent
		case reasonInside:
			if r.lead {
				r.buf = strings.TrimLeftFunc(r.buf, unicode.IsSpace)
				if r.buf == "" {
					return rb.String(), cb.String()
				}
				r.lead = false
			}
			if i := strings.Index(r.buf, thinkClose); i >= 0 {
				rb.WriteString(r.buf[:i])
				r.buf = r.buf[i+len(thinkClose):]
				r.state = reasonAfter
				continue
			}
			held := partialSuffix(r.buf, thinkClose)
			rb.WriteString(r.buf[:len(r.buf)-held])
			r.buf = r.buf[len(r.buf)-held:]
			return rb.String(), cb.String()
		case reasonAfter:
			r.buf = strings.TrimLeftFunc(r.buf, unicode.IsSpace)
			if r.buf == "" {
				return rb.String(), cb.String()
			}
			r.state = reasonContent
		case reasonContent:
			cb.WriteString(r.buf)
			r.buf = ""
			return rb.String(), cb.String()
		}
	}
}

// Flush ends the output: an unclosed reasoning block is all reasoning.
func (r *Reasoner) Flush() (reasoning, content string) {
	defer func() { r.buf = "" }()
	switch r.state {
	case reasonStart, reasonContent:
		return "", r.buf
	case reasonInside:
		return r.buf, ""
	}
	return "", ""
}
