package tools

import (
	"strings"
	"unicode"
)

// Delta is one piece of parsed output; exactly one field is set: content
// text, the start of a call (its function name), or a fragment of the
// arguments of the call started last. A call's fragments, joined, are its
// arguments as compact JSON text.
type Delta struct {
	Content string
	Name    string
	Args    string
}

// Parse splits a whole output into content and calls. It gives exactly
// what a Parser fed the same text in any pieces gives.
func Parse(f Family, text string) (content string, calls []Call) {
	p := NewParser(f)
	var b strings.Builder
	for _, d := range append(p.Add(text), p.Flush()...) {
		switch {
		case d.Name != "":
			calls = append(calls, Call{Name: d.Name})
		case d.Args != "":
			calls[len(calls)-1].Arguments += d.Args
		default:
			b.WriteString(d.Content)
		}
	}
	return b.String(), calls
}

// parserMode is where a Parser is in the output.
type parserMode int

const (
	modeStart   parserMode = iota // nothing decided yet (Llama3: leading JSON?)
	modeContent                   // content, watching for a call marker
	modeRegion                    // call syntax, calls streamed as written
	modeBlock                     // a Hermes block decided at its close tag
	modeTail                      // Llama3, Mistral calls decided at the end
	modePlain                     // the rest of the output is content
)

// regionPhase is where a Parser is inside modeRegion.
type regionPhase int

const (
	phWant  regionPhase = iota // before a call object
	phObj                      // inside a call object
	phAfter                    // after a streamed call: a close tag or separator
	phSkip                     // after a malformed streamed call: dropped
)

// Parser splits streamed output into content and calls. Text that may be
// the start of a call marker, and whitespace next to calls, is held back
// until decided. A call is reported as soon as it is certain: its name
// once the name is read and its arguments object has begun (the text so
// far a valid JSON prefix of a call), then its arguments as they are
// written. A call whose arguments are not an object, or whose name comes
// after them, is reported whole when complete; one that turns out
// malformed before it was reported is content, as written.
//
// A reported call cannot be taken back: when its JSON breaks, or the
// output ends inside it, its arguments are closed with the shortest text
// that makes them valid JSON, and the rest of the malformed call (Hermes:
// up to its </tool_call>; Llama 3, Mistral: the rest of the output) is
// dropped.
type Parser struct {
	f         Family
	mode      parserMode
	buf       string // undecided text
	ws        string // trailing whitespace of content, held
	afterCall bool   // no content since the last call: leading whitespace is dropped
	calls     int

	phase   regionPhase
	region  strings.Builder // the region as written, while none of its calls was reported
	emitted bool            // a call of the region was reported
	objects int             // call objects begun in the region
	tagOK   bool            // Llama3: <|python_tag|> may still come
	inArray bool            // Mistral: inside the [ … ] of calls
	scan    *callScan
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
	return p.run(nil, false)
}

// Flush ends the output and returns what was held back.
func (p *Parser) Flush() []Delta {
	out := p.run(nil, true)
	p.buf = ""
	if p.ws != "" && !p.afterCall {
		out = append(out, Delta{Content: p.ws})
	}
	p.ws = ""
	p.mode = modePlain
	return out
}

// marker is the text that opens calls amid content ("" for Llama3, whose
// calls come only at the start).
func (p *Parser) marker() string {
	switch p.f {
	case Hermes:
		return hermesOpen
	case Mistral:
		return mistralTag
	}
	return ""
}

// run processes buf as far as it is decided (all of it when final).
func (p *Parser) run(out []Delta, final bool) []Delta {
	for {
		switch p.mode {
		case modePlain:
			if p.buf != "" {
				out = append(out, Delta{Content: p.buf})
				p.buf = ""
			}
			return out
		case modeStart:
			t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
			undecided := t == "" || (len(t) < len(pythonTag) && strings.HasPrefix(pythonTag, t))
			switch {
			case undecided && !final:
				return out
			case undecided:
				out = p.content(out, p.buf, false)
				p.buf = ""
				return out
			case t[0] == '{' || strings.HasPrefix(t, pythonTag):
				p.enterRegion()
			default:
				p.mode = modePlain
			}
		case modeContent:
			marker := p.marker()
			if i := strings.Index(p.buf, marker); marker != "" && i >= 0 {
				out = p.content(out, p.buf[:i], true)
				p.buf = p.buf[i+len(marker):]
				p.enterRegion()
				continue
			}
			held := 0
			if marker != "" && !final {
				held = partialSuffix(p.buf, marker)
			}
			out = p.content(out, p.buf[:len(p.buf)-held], false)
			p.buf = p.buf[len(p.buf)-held:]
			return out
		case modeBlock:
			i := strings.Index(p.buf, hermesClose)
			if i < 0 && !final {
				return out
			}
			if i < 0 {
				out = p.block(out, p.buf, hermesOpen+p.buf)
				p.buf = ""
			} else {
				body := p.buf[:i]
				p.buf = p.buf[i+len(hermesClose):]
				out = p.block(out, body, hermesOpen+body+hermesClose)
			}
			p.mode = modeContent
		case modeTail:
			if !final {
				return out
			}
			return p.tail(out)
		case modeRegion:
			var more bool
			if out, more = p.regionStep(out, final); !more {
				return out
			}
		}
	}
}

// enterRegion starts call syntax: after a marker, or at a Llama3 start.
func (p *Parser) enterRegion() {
	p.mode, p.phase = modeRegion, phWant
	p.region.Reset()
	p.emitted, p.objects, p.inArray, p.scan = false, 0, false, nil
	p.tagOK = p.f == Llama3
}

// consume moves n bytes of buf into the region.
func (p *Parser) consume(n int) {
	if !p.emitted {
		p.region.WriteString(p.buf[:n])
	}
	p.buf = p.buf[n:]
}

// fallback decides the region as a whole instead, as written: it holds
// no streamed call, and its first call cannot be streamed.
func (p *Parser) fallback() {
	p.buf = p.region.String() + p.buf
	p.region.Reset()
	p.scan = nil
	if p.f == Hermes {
		p.mode = modeBlock
	} else {
		p.mode = modeTail
	}
}

// regionStep advances through the call region; more reports that the
// mode or phase changed and run should go on.
func (p *Parser) regionStep(out []Delta, final bool) ([]Delta, bool) {
	switch p.phase {
	case phWant:
		t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
		lead := len(p.buf) - len(t)
		switch {
		case t == "" && !final:
			return out, false
		case t == "" && !p.emitted:
			p.fallback()
		case t == "":
			p.buf, p.mode = "", modeContent
		case p.tagOK && strings.HasPrefix(t, pythonTag):
			p.consume(lead + len(pythonTag))
			p.tagOK = false
		case p.tagOK && len(t) < len(pythonTag) && strings.HasPrefix(pythonTag, t) && !final:
			return out, false
		case p.f == Mistral && p.objects == 0 && !p.inArray && t[0] == '[':
			p.consume(lead + 1)
			p.inArray = true
		case t[0] == '{':
			p.consume(lead)
			p.scan, p.phase = &callScan{}, phObj
			p.objects++
		default:
			p.unexpected()
		}
		p.tagOK = p.tagOK && p.phase == phWant && p.mode == modeRegion && p.objects == 0
		return out, true
	case phObj:
		return p.scanObject(out, final)
	case phAfter:
		return p.afterCallObject(out, final)
	}
	// phSkip
	if p.f != Hermes {
		p.buf = ""
		return out, false
	}
	if i := strings.Index(p.buf, hermesClose); i >= 0 {
		p.buf, p.mode = p.buf[i+len(hermesClose):], modeContent
		return out, true
	}
	if final {
		p.buf, p.mode = "", modeContent
		return out, true
	}
	p.buf = p.buf[len(p.buf)-partialSuffix(p.buf, hermesClose):]
	return out, false
}

// unexpected handles text that cannot start or continue the calls.
func (p *Parser) unexpected() {
	switch {
	case !p.emitted:
		p.fallback()
	case p.f == Llama3:
		p.mode = modeContent // text after the calls
	default:
		p.phase = phSkip
	}
}

// scanObject feeds buf to the call object being read.
func (p *Parser) scanObject(out []Delta, final bool) ([]Delta, bool) {
	sc := p.scan
	for i := 0; i < len(p.buf); i++ {
		if !sc.feed(p.buf[i]) {
			p.consume(i)
			return p.endObject(out, false), true
		}
		if sc.started {
			sc.started = false
			out = p.begin(out, sc.name)
		}
		if sc.args == argsHeld && !p.emitted {
			p.consume(i + 1)
			p.fallback()
			return out, true
		}
		if sc.done() {
			p.consume(i + 1)
			return p.endObject(out, true), true
		}
	}
	p.consume(len(p.buf))
	if final {
		return p.endObject(out, false), true
	}
	return p.fragment(out), false
}

// endObject ends the call object read: complete, or cut (malformed or at
// the end of the output).
func (p *Parser) endObject(out []Delta, complete bool) []Delta {
	sc := p.scan
	p.scan = nil
	switch {
	case sc.commit:
		if !complete {
			sc.closeArgs()
		}
		out = p.fragmentOf(out, sc)
	case !p.emitted:
		p.fallback()
		return out
	case complete:
		if c, ok := parseCallJSON(sc.raw.String()); ok {
			out = p.whole(out, c)
		} else {
			complete = false
		}
	}
	if complete {
		p.phase = phAfter
	} else {
		p.phase = phSkip
	}
	return out
}

// afterCallObject reads what follows a reported call: Hermes its close
// tag, Llama3 ';', Mistral ',' or ']'.
func (p *Parser) afterCallObject(out []Delta, final bool) ([]Delta, bool) {
	t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
	if t == "" {
		if !final {
			return out, false
		}
		p.buf, p.mode = "", modeContent
		return out, true
	}
	switch p.f {
	case Hermes:
		switch {
		case strings.HasPrefix(t, hermesClose):
			p.buf, p.mode = t[len(hermesClose):], modeContent
		case strings.HasPrefix(hermesClose, t) && !final:
			return out, false
		default:
			p.phase = phSkip // junk inside the block, such as an extra '}'
		}
	case Llama3:
		if t[0] == ';' {
			p.buf, p.phase = t[1:], phWant
		} else {
			p.mode = modeContent
		}
	case Mistral:
		switch {
		case p.inArray && t[0] == ',':
			p.buf, p.phase = t[1:], phWant
		case p.inArray && t[0] == ']':
			p.buf, p.mode, p.inArray = t[1:], modeContent, false
		case !p.inArray:
			p.mode = modeContent
		default:
			p.phase = phSkip
		}
	}
	return out, true
}

// tail decides a Llama3 or Mistral region that was not streamed.
func (p *Parser) tail(out []Delta) []Delta {
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
	p.buf, p.mode = "", modePlain
	if !ok {
		return p.content(out, raw, false)
	}
	for _, c := range calls {
		out = p.whole(out, c)
	}
	return out
}

// begin reports the start of a call.
func (p *Parser) begin(out []Delta, name string) []Delta {
	p.ws = ""
	p.afterCall = true
	p.calls++
	p.emitted = true
	p.region.Reset()
	return append(out, Delta{Name: name})
}

// whole reports a call decided at once.
func (p *Parser) whole(out []Delta, c Call) []Delta {
	return append(p.begin(out, c.Name), Delta{Args: c.Arguments})
}

// fragment reports the arguments streamed since the last report.
func (p *Parser) fragment(out []Delta) []Delta {
	if p.scan == nil {
		return out
	}
	return p.fragmentOf(out, p.scan)
}

func (p *Parser) fragmentOf(out []Delta, sc *callScan) []Delta {
	if f := sc.takeFrag(); f != "" {
		out = append(out, Delta{Args: f})
	}
	return out
}

// block reports one Hermes call body, or raw as content when it does not parse.
func (p *Parser) block(out []Delta, body, raw string) []Delta {
	c, ok := parseCallJSON(strings.TrimSpace(body))
	if !ok {
		return p.content(out, raw, false)
	}
	return p.whole(out, c)
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
