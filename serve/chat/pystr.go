package chat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyStr is Python's str(v) for template values: what {{ v }} prints. A JSON null prints
// "None" (an undefined name prints nothing, as in jinja2), lists and dicts print their repr.
func pyStr(v *exec.Value) string {
	switch {
	case v == nil || v.IsNil():
		if isPyNone(v) {
			return "None"
		}
		return ""
	case v.IsString():
		return v.String()
	case v.IsList(), v.IsDict(), v.IsBool(), v.IsFloat():
		var b strings.Builder
		writeRepr(&b, v, 0)
		return b.String()
	}
	return v.String()
}

// writeRepr writes Python's repr(v).
func writeRepr(b *strings.Builder, v *exec.Value, depth int) {
	if depth > maxJSONDepth {
		b.WriteString("...")
		return
	}
	switch {
	case v == nil || v.IsNil():
		b.WriteString("None")
	case v.IsString():
		b.WriteString(pyStringRepr(v.String()))
	case v.IsBool():
		if v.Bool() {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case v.IsInteger():
		b.WriteString(strconv.Itoa(v.Integer()))
	case v.IsFloat():
		b.WriteString(pyFloatRepr(v.Float()))
	case v.IsList():
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, listItem(v, i), depth+1)
		}
		b.WriteByte(']')
	case v.IsDict():
		b.WriteByte('{')
		for i, p := range dictPairs(v) {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, p.Key, depth+1)
			b.WriteString(": ")
			writeRepr(b, p.Value, depth+1)
		}
		b.WriteByte('}')
	default:
		b.WriteString(v.String())
	}
}

// pyStringRepr is Python's repr(str): single quotes unless the text has a single quote and no
// double quote; backslash escapes for the quote, backslash, \n, \r, \t and other
// non-printable characters.
func pyStringRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || (r < 0x7f && r >= 0x20):
			b.WriteRune(r)
		case r < 0x100 && !isPyPrintable(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case !isPyPrintable(r) && r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		case !isPyPrintable(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// isPyPrintable approximates Python's str.isprintable for one character: not a control,
// format, separator (other than space), surrogate, private-use or unassigned character.
func isPyPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if r == unicode.ReplacementChar {
		return true
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// isPySpace is Python's str.isspace for one character (Go's unicode.IsSpace plus the
// information separators U+001C…U+001F).
func isPySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// filterStr prints a value the way jinja2 does ({{ v }}); the tree rewrite wraps every output
// expression in it.
func filterStr(_ *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	if in.IsError() || in.IsString() {
		return in
	}
	return exec.AsValue(pyStr(in))
}

// filterString is jinja2's |string.
func filterString(_ *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	if in.IsError() || in.IsString() {
		return in
	}
	return exec.AsValue(pyStr(in))
}

// filterTrim is jinja2's |trim(chars=None): str(value).strip(chars).
func filterTrim(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var chars *exec.Value
	switch {
	case len(params.Args) == 1 && len(params.KwArgs) == 0:
		chars = params.Args[0]
	case len(params.Args) == 0 && len(params.KwArgs) == 1 && params.KwArgs["chars"] != nil:
		chars = params.KwArgs["chars"]
	case len(params.Args) == 0 && len(params.KwArgs) == 0:
	default:
		return typeErr("trim() takes at most one argument, chars")
	}
	s := pyStr(in)
	if chars == nil || chars.IsNil() {
		return exec.AsValue(strings.TrimFunc(s, isPySpace))
	}
	return exec.AsValue(strings.Trim(s, chars.String()))
}
