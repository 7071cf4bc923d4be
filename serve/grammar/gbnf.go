package grammar

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxNesting bounds parenthesis and schema nesting while parsing.
const maxNesting = 256

// FromGBNF compiles a grammar in GBNF (the llama.cpp grammar format):
// rules "name ::= alternatives", "|" between alternatives, groups "( )",
// postfix "*", "+", "?", "{m}", "{m,}", "{m,n}", string literals with
// escapes, character classes "[a-z]" and "[^…]" over code points, "." for
// any character, "#" comments; the rule "root" is the start. Errors are
// ErrSyntax (with line:column), ErrLeftRecursion or ErrTooLarge.
func FromGBNF(src string) (*Grammar, error) {
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("%w: grammar is not valid UTF-8", ErrSyntax)
	}
	p := &gbnfParser{src: src, b: newBuilder(), defined: map[string]bool{}, used: map[string]int{}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	root, ok := p.b.index["root"]
	if !ok || !p.defined["root"] {
		return nil, fmt.Errorf("%w: no rule named root", ErrSyntax)
	}
	for name, at := range p.used {
		if !p.defined[name] {
			return nil, fmt.Errorf("%w: %s: rule %q is not defined", ErrSyntax, p.where(at), name)
		}
	}
	return lower(p.b, root)
}

type gbnfParser struct {
	src     string
	pos     int
	b       *builder
	defined map[string]bool
	used    map[string]int // rule name → offset of first use
	depth   int
}

// where renders offset off as line:column (1-based, columns in bytes).
func (p *gbnfParser) where(off int) string {
	line, col := 1, 1
	for i := 0; i < off && i < len(p.src); i++ {
		if p.src[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return strconv.Itoa(line) + ":" + strconv.Itoa(col)
}

func (p *gbnfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrSyntax, p.where(p.pos), fmt.Sprintf(format, args...))
}

// space skips blanks and comments, and newlines when newlines is set.
func (p *gbnfParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == '\n' && newlines:
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *gbnfParser) parse() error {
	for {
		p.space(true)
		if p.pos >= len(p.src) {
			return nil
		}
		start := p.pos
		name := p.name()
		if name == "" {
			return p.errorf("expected a rule name, found %q", p.peekRune())
		}
		if p.defined[name] {
			p.pos = start
			return p.errorf("rule %q defined twice", name)
		}
		p.space(false)
		if len(p.src)-p.pos < 3 || p.src[p.pos:p.pos+3] != "::=" {
			return p.errorf("expected ::= after rule name %q", name)
		}
		p.pos += 3
		p.space(true)
		body, err := p.alternatives(false)
		if err != nil {
			return err
		}
		p.defined[name] = true
		p.b.define(p.b.rule(name), body)
		p.space(false)
		if p.pos < len(p.src) && p.src[p.pos] != '\n' {
			return p.errorf("unexpected %q", p.peekRune())
		}
	}
}

func (p *gbnfParser) peekRune() string {
	if p.pos >= len(p.src) {
		return "end of input"
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return string(r)
}

// alternatives parses seq ("|" seq)*; nested: inside parentheses, where
// newlines are blanks.
func (p *gbnfParser) alternatives(nested bool) (*node, error) {
	var alts []*node
	for {
		s, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		p.space(nested)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			p.space(true)
			continue
		}
		if len(alts) == 1 {
			return alts[0], nil
		}
		return alt(alts...), nil
	}
}

func (p *gbnfParser) sequence(nested bool) (*node, error) {
	var items []*node
	for {
		p.space(nested)
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		var item *node
		var err error
		switch {
		case c == '"':
			item, err = p.literal()
		case c == '[':
			item, err = p.charClass()
		case c == '.':
			p.pos++
			item = class(true)
		case c == '(':
			if p.depth >= maxNesting {
				return nil, p.errorf("groups nested deeper than %d", maxNesting)
			}
			p.pos++
			p.depth++
			p.space(true)
			item, err = p.alternatives(true)
			p.depth--
			if err == nil {
				p.space(true)
				if p.pos >= len(p.src) || p.src[p.pos] != ')' {
					return nil, p.errorf("expected )")
				}
				p.pos++
			}
		case isNameByte(c):
			start := p.pos
			name := p.name()
			rest := p.pos
			p.space(false)
			if len(p.src)-p.pos >= 3 && p.src[p.pos:p.pos+3] == "::=" {
				p.pos = start // next rule starts here: the sequence ends
				if !nested {
					return seq(items...), nil
				}
				return nil, p.errorf("rule definition inside a group")
			}
			p.pos = rest
			if _, ok := p.used[name]; !ok {
				p.used[name] = start
			}
			item = ref(p.b.rule(name))
		default:
			return seq(items...), nil
		}
		if err != nil {
			return nil, err
		}
		if item, err = p.postfix(item); err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	return seq(items...), nil
}

func (p *gbnfParser) postfix(item *node) (*node, error) {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '*':
			item = star(item)
		case '+':
			item = plus(item)
		case '?':
			item = opt(item)
		case '{':
			p.pos++
			p.space(false)
			mn, ok := p.number()
			if !ok {
				return nil, p.errorf("expected a count after {")
			}
			mx := mn
			p.space(false)
			if p.pos < len(p.src) && p.src[p.pos] == ',' {
				p.pos++
				p.space(false)
				if n, ok := p.number(); ok {
					mx = n
				} else {
					mx = -1
				}
				p.space(false)
			}
			if p.pos >= len(p.src) || p.src[p.pos] != '}' {
				return nil, p.errorf("expected }")
			}
			if mx >= 0 && mx < mn {
				return nil, p.errorf("repetition {%d,%d} has max below min", mn, mx)
			}
			if mn > maxRepeat || mx > maxRepeat {
				return nil, p.errorf("repetition count above %d", maxRepeat)
			}
			item = rep(item, mn, mx)
		default:
			return item, nil
		}
		p.pos++
	}
	return item, nil
}

func (p *gbnfParser) number() (int, bool) {
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	if p.pos == start || p.pos-start > 7 {
		return 0, false
	}
	n, err := strconv.Atoi(p.src[start:p.pos])
	return n, err == nil
}

// char reads one possibly escaped code point of a literal or class.
func (p *gbnfParser) char() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, p.errorf("unexpected end of input")
	}
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += size
	if r != '\\' {
		return r, nil
	}
	if p.pos >= len(p.src) {
		return 0, p.errorf("unexpected end of input after \\")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '\'':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if len(p.src)-p.pos < n {
			return 0, p.errorf("short \\%c escape", c)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errorf("bad \\%c escape", c)
		}
		p.pos += n
		return rune(v), nil
	}
	p.pos--
	return 0, p.errorf("unknown escape \\%c", c)
}

func (p *gbnfParser) literal() (*node, error) {
	p.pos++ // opening quote
	var buf []byte
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return nil, p.errorf("unterminated string literal")
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return &node{kind: nLit, lit: buf}, nil
		}
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		if r >= 0xD800 && r <= 0xDFFF {
			return nil, p.errorf("surrogate code point in literal")
		}
		buf = utf8.AppendRune(buf, r)
	}
}

func (p *gbnfParser) charClass() (*node, error) {
	p.pos++ // [
	negated := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		negated = true
		p.pos++
	}
	var rs []cpRange
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return nil, p.errorf("unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			return class(negated, rs...), nil
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if len(p.src)-p.pos >= 2 && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf("class range %q-%q is reversed", lo, hi)
			}
		}
		rs = append(rs, cpRange{lo, hi})
	}
}
