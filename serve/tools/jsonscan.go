package tools

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// lexState is where a jsonLexer is in a JSON text.
type lexState uint8

const (
	lxValue        lexState = iota // a value must come (after ':', or ',' in an array)
	lxValueOrClose                 // after '[': a value or ']'
	lxKeyOrClose                   // after '{': a key or '}'
	lxKey                          // after ',' in an object: a key
	lxColon                        // after a key: ':'
	lxAfter                        // after a value: ',' or a closing bracket
	lxString                       // inside a string
	lxEscape                       // after '\' in a string
	lxHex                          // inside \uXXXX
	lxMinus                        // number: after '-'
	lxZero                         // number: a leading 0
	lxInt                          // number: integer digits
	lxDot                          // number: after '.'
	lxFrac                         // number: fraction digits
	lxExp                          // number: after 'e'
	lxExpSign                      // number: after the exponent's sign
	lxExpDigit                     // number: exponent digits
	lxLiteral                      // inside true, false or null
	lxDone                         // the top-level value is complete
)

// jsonLexer checks one JSON value byte by byte, so a streamed text is
// known to be a valid prefix at every byte. It does not check UTF-8 (as
// encoding/json's Valid does not).
type jsonLexer struct {
	st     lexState
	stack  []byte // open containers: '{' or '['
	key    bool   // the string being read is an object key
	hex    int    // hex digits left in \uXXXX
	lit    string // the literal being read
	litPos int
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// inString reports whether the lexer is inside a string (escapes included).
func (l *jsonLexer) inString() bool { return l.st == lxString || l.st == lxEscape || l.st == lxHex }

// depth is the number of open containers.
func (l *jsonLexer) depth() int { return len(l.stack) }

// afterValue moves past a complete value.
func (l *jsonLexer) afterValue() {
	if len(l.stack) == 0 {
		l.st = lxDone
	} else {
		l.st = lxAfter
	}
}

// beginValue starts the value that c opens.
func (l *jsonLexer) beginValue(c byte) bool {
	switch {
	case c == '{':
		l.stack = append(l.stack, '{')
		l.st = lxKeyOrClose
	case c == '[':
		l.stack = append(l.stack, '[')
		l.st = lxValueOrClose
	case c == '"':
		l.st, l.key = lxString, false
	case c == '-':
		l.st = lxMinus
	case c == '0':
		l.st = lxZero
	case c >= '1' && c <= '9':
		l.st = lxInt
	case c == 't' || c == 'f' || c == 'n':
		l.lit = "null"
		if c == 't' {
			l.lit = "true"
		} else if c == 'f' {
			l.lit = "false"
		}
		l.litPos, l.st = 1, lxLiteral
	default:
		return false
	}
	return true
}

// close pops the container that c closes.
func (l *jsonLexer) close(c byte) bool {
	n := len(l.stack)
	if n == 0 || (c == '}') != (l.stack[n-1] == '{') {
		return false
	}
	l.stack = l.stack[:n-1]
	l.afterValue()
	return true
}

// step consumes c; false means the text is not a JSON prefix any more (the
// lexer is then unchanged).
func (l *jsonLexer) step(c byte) bool {
	switch l.st {
	case lxValue, lxValueOrClose, lxKeyOrClose, lxKey, lxColon, lxAfter:
		if isJSONSpace(c) {
			return true
		}
	}
	switch l.st {
	case lxValue:
		return l.beginValue(c)
	case lxValueOrClose:
		if c == ']' {
			return l.close(c)
		}
		return l.beginValue(c)
	case lxKeyOrClose, lxKey:
		if c == '}' && l.st == lxKeyOrClose {
			return l.close(c)
		}
		if c != '"' {
			return false
		}
		l.st, l.key = lxString, true
	case lxColon:
		if c != ':' {
			return false
		}
		l.st = lxValue
	case lxAfter:
		switch c {
		case ',':
			if l.stack[len(l.stack)-1] == '{' {
				l.st = lxKey
			} else {
				l.st = lxValue
			}
		case '}', ']':
			return l.close(c)
		default:
			return false
		}
	case lxString:
		switch {
		case c == '"':
			if l.key {
				l.st = lxColon
			} else {
				l.afterValue()
			}
		case c == '\\':
			l.st = lxEscape
		case c < 0x20:
			return false
		}
	case lxEscape:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			l.st = lxString
		case 'u':
			l.st, l.hex = lxHex, 4
		default:
			return false
		}
	case lxHex:
		if !isDigit(c) && (c|0x20 < 'a' || c|0x20 > 'f') {
			return false
		}
		if l.hex--; l.hex == 0 {
			l.st = lxString
		}
	case lxMinus:
		switch {
		case c == '0':
			l.st = lxZero
		case isDigit(c):
			l.st = lxInt
		default:
			return false
		}
	case lxZero, lxInt, lxFrac, lxExpDigit:
		switch {
		case isDigit(c) && l.st != lxZero:
		case c == '.' && (l.st == lxZero || l.st == lxInt):
			l.st = lxDot
		case (c == 'e' || c == 'E') && l.st != lxExpDigit:
			l.st = lxExp
		default:
			// The number ended; c belongs to what follows it.
			saved := l.st
			l.afterValue()
			if l.st == lxDone || !l.step(c) {
				l.st = saved
				return false
			}
		}
	case lxDot:
		if !isDigit(c) {
			return false
		}
		l.st = lxFrac
	case lxExp:
		switch {
		case c == '+' || c == '-':
			l.st = lxExpSign
		case isDigit(c):
			l.st = lxExpDigit
		default:
			return false
		}
	case lxExpSign:
		if !isDigit(c) {
			return false
		}
		l.st = lxExpDigit
	case lxLiteral:
		if c != l.lit[l.litPos] {
			return false
		}
		if l.litPos++; l.litPos == len(l.lit) {
			l.afterValue()
		}
	default: // lxDone
		return false
	}
	return true
}

// closing returns the shortest text that completes the containers opened
// beyond depth base into valid JSON. It assumes a comma just read was not
// passed on (see callScan), so after one nothing more is needed.
func (l *jsonLexer) closing(base int) string {
	var b strings.Builder
	switch l.st {
	case lxEscape:
		b.WriteString(`\"`)
	case lxHex:
		b.WriteString(strings.Repeat("0", l.hex) + `"`)
	case lxString:
		b.WriteByte('"')
	case lxMinus, lxDot, lxExp, lxExpSign:
		b.WriteByte('0')
	case lxLiteral:
		b.WriteString(l.lit[l.litPos:])
	case lxColon:
		b.WriteString(":null")
	case lxValue:
		if l.stack[len(l.stack)-1] == '{' {
			b.WriteString("null") // after ':'
		}
	}
	if l.inString() && l.key {
		b.WriteString(":null")
	}
	for i := len(l.stack) - 1; i >= base; i-- {
		if l.stack[i] == '{' {
			b.WriteByte('}')
		} else {
			b.WriteByte(']')
		}
	}
	return b.String()
}

// argsState is how far a callScan is with the arguments value.
type argsState uint8

const (
	argsNone   argsState = iota // not seen yet
	argsStream                  // an object, streaming
	argsDone                    // the streamed object is complete
	argsHeld                    // seen, but not streamable (a string, or before the name)
)

// callScan follows one call object {"name": …, "arguments": {…}} as it is
// written. Once the name is known and the arguments object has begun (so
// the text is a valid JSON prefix that can only be a call), the call is
// committed: its arguments stream compacted, as json.Compact would write
// them, a comma held back until what follows it is known valid.
type callScan struct {
	lx      jsonLexer
	raw     strings.Builder // the object as written
	reading int             // 1: a depth-1 key, 2: the name's value
	tok     []byte
	key     string // the last depth-1 key
	name    string
	args    argsState
	comma   bool   // a comma of the arguments held back
	frag    []byte // arguments text not yet reported
	commit  bool   // the name and the arguments' start were seen
	started bool   // set on the byte that commits; the caller clears it
}

// feed consumes c, the next byte of the object (the first is '{'); false
// means the object is malformed at c (which is then not consumed).
func (s *callScan) feed(c byte) bool {
	before, depth := s.lx.st, s.lx.depth()
	if !s.lx.step(c) {
		return false
	}
	s.raw.WriteByte(c)
	switch {
	case s.reading != 0:
		s.tok = append(s.tok, c)
		if !s.lx.inString() {
			var v string
			_ = json.Unmarshal(s.tok, &v) // the lexer checked it
			if s.reading == 1 {
				s.key = v
			} else {
				s.name = v
			}
			s.reading = 0
		}
	case depth == 1 && c == '"' && (before == lxKeyOrClose || before == lxKey):
		s.reading, s.tok = 1, append(s.tok[:0], c)
	case depth == 1 && before == lxValue && isJSONSpace(c):
	case depth == 1 && before == lxValue && s.key == "name" && s.args == argsNone:
		if c == '"' {
			s.reading, s.tok = 2, append(s.tok[:0], c)
		}
	case depth == 1 && before == lxValue && (s.key == "arguments" || s.key == "parameters") && s.args == argsNone:
		if c == '{' && s.name != "" {
			s.args, s.commit, s.started = argsStream, true, true
			s.frag = append(s.frag, c)
		} else {
			s.args = argsHeld
		}
	case s.args == argsStream:
		switch {
		case isJSONSpace(c) && !s.lx.inString():
		case c == ',' && !s.lx.inString():
			s.comma = true
		default:
			if s.comma {
				s.frag = append(s.frag, ',')
				s.comma = false
			}
			s.frag = append(s.frag, c)
		}
		if s.lx.depth() == 1 {
			s.args = argsDone
		}
	}
	return true
}

// done reports whether the object is complete.
func (s *callScan) done() bool { return s.lx.st == lxDone }

// closeArgs ends streamed arguments that were cut (malformed text or the
// end of output) with the shortest valid completion.
func (s *callScan) closeArgs() {
	if s.args != argsStream {
		return
	}
	s.comma = false
	s.frag = append(s.frag, s.lx.closing(1)...)
	s.args = argsDone
}

// takeFrag returns the arguments text not yet reported, less an
// incomplete UTF-8 sequence at its end while the arguments go on (a
// fragment must be text on its own: JSON encoding would spoil half a rune).
func (s *callScan) takeFrag() string {
	n := len(s.frag)
	if s.args == argsStream {
		for k := 1; k <= min(3, n); k++ {
			if utf8.RuneStart(s.frag[n-k]) {
				if !utf8.FullRune(s.frag[n-k:]) {
					n -= k
				}
				break
			}
		}
	}
	f := string(s.frag[:n])
	s.frag = append(s.frag[:0], s.frag[n:]...)
	return f
}
