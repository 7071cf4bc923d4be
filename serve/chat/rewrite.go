package chat

import (
	"strings"
)

// maxRewrites bounds the conditional-expression rewrites of one source (each pass rewrites
// one expression and lexes the source again).
const maxRewrites = 256

// rewriteSource rewrites, in every {{ … }} and {% … %} tag, each conditional expression that
// is an element of a parenthesised group, a list or a call's arguments:
//
//	(A if C else B)   →   (((C) and [A] or [B])[0])      the element A if C else B becomes
//	(A if C)          →   (((C) and [A] or [none])[0])   ((C) and [A] or [B])[0]
//
// gonja parses "A if C else B" only as the whole value of {{ … }} or {% set %}. The
// replacement is an expression gonja does parse, with the same value (a one-element list is
// always true, so B is chosen exactly when C is false) and the same laziness (only the chosen
// branch is evaluated). Text outside tags, strings and comments are left alone. Nested
// conditionals are rewritten one per pass, so "A if C else D if E else F" takes two.
func rewriteSource(src string) string {
	for range maxRewrites {
		out, changed := rewriteOneConditional(src)
		if !changed {
			return src
		}
		src = out
	}
	return src
}

// token is one lexeme inside a tag: its kind and its byte span in the source.
type token struct {
	kind       byte // 'n' name, 's' string, '0' number, or the punctuation byte itself
	start, end int
}

func (t token) text(src string) string { return src[t.start:t.end] }

// rewriteOneConditional rewrites the innermost-first conditional element it finds.
func rewriteOneConditional(src string) (string, bool) {
	for _, toks := range lexTags(src) {
		var stack []int
		for i, t := range toks {
			switch t.kind {
			case '(', '[', '{':
				stack = append(stack, i)
			case ')', ']', '}':
				if len(stack) == 0 {
					continue
				}
				open := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if toks[open].kind == '{' {
					continue
				}
				if out, ok := rewriteGroup(src, toks, open+1, i); ok {
					return out, true
				}
			}
		}
	}
	return src, false
}

// rewriteGroup looks at the comma-separated elements of toks[from:to] (the inside of one
// bracket pair) and rewrites the first that is a conditional expression.
func rewriteGroup(src string, toks []token, from, to int) (string, bool) {
	depth := 0
	elemStart := from
	for i := from; i <= to; i++ {
		if i < to {
			switch toks[i].kind {
			case '(', '[', '{':
				depth++
				continue
			case ')', ']', '}':
				depth--
				continue
			}
			if depth != 0 || toks[i].kind != ',' {
				continue
			}
		}
		if out, ok := rewriteElement(src, toks, elemStart, i); ok {
			return out, true
		}
		elemStart = i + 1
	}
	return src, false
}

// rewriteElement rewrites toks[from:to] if it is "A if C [else B]" (optionally "name=" first).
func rewriteElement(src string, toks []token, from, to int) (string, bool) {
	if to-from >= 2 && toks[from].kind == 'n' && toks[from+1].kind == '=' &&
		(from+2 >= to || toks[from+2].kind != '=') {
		from += 2 // keyword argument: name=value
	}
	ifAt, elseAt := -1, -1
	depth := 0
	for i := from; i < to; i++ {
		t := toks[i]
		switch t.kind {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case 'n':
			if depth != 0 || (i > from && toks[i-1].kind == '.') {
				continue
			}
			switch t.text(src) {
			case "if":
				if ifAt < 0 {
					ifAt = i
				}
			case "else":
				if ifAt >= 0 && elseAt < 0 {
					elseAt = i
				}
			}
		}
	}
	if ifAt <= from || ifAt == to-1 || (elseAt >= 0 && (elseAt == ifAt+1 || elseAt == to-1)) {
		return src, false
	}
	span := func(a, b int) string { return src[toks[a].start:toks[b-1].end] }
	a := span(from, ifAt)
	var c, b string
	if elseAt < 0 {
		c, b = span(ifAt+1, to), "none"
	} else {
		c, b = span(ifAt+1, elseAt), span(elseAt+1, to)
	}
	repl := "((" + c + ") and [" + a + "] or [" + b + "])[0]"
	return src[:toks[from].start] + repl + src[toks[to-1].end:], true
}

// lexTags returns the tokens of every expression or statement tag of src, one slice per tag.
// Comments and {% raw %} blocks are skipped.
func lexTags(src string) [][]token {
	var tags [][]token
	i := 0
	for {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			return tags
		}
		i += j
		switch src[i+1] {
		case '#':
			end := strings.Index(src[i+2:], "#}")
			if end < 0 {
				return tags
			}
			i += 2 + end + 2
		case '{', '%':
			closer := "}}"
			if src[i+1] == '%' {
				closer = "%}"
			}
			toks, next := lexTag(src, i+2, closer)
			if isRawTag(src, toks) {
				end := indexEndRaw(src, next)
				if end < 0 {
					return tags
				}
				next = end
			} else {
				tags = append(tags, toks)
			}
			i = next
		default:
			i++
		}
		if i >= len(src) {
			return tags
		}
	}
}

func isRawTag(src string, toks []token) bool {
	return len(toks) == 1 && toks[0].kind == 'n' && toks[0].text(src) == "raw"
}

// indexEndRaw returns the offset just past the {% endraw %} tag at or after i, or -1.
func indexEndRaw(src string, i int) int {
	for {
		j := strings.Index(src[i:], "{%")
		if j < 0 {
			return -1
		}
		toks, next := lexTag(src, i+j+2, "%}")
		if len(toks) == 1 && toks[0].kind == 'n' && toks[0].text(src) == "endraw" {
			return next
		}
		i += j + 2
	}
}

// lexTag lexes from i (just after the opening delimiter) to the closing delimiter and returns
// the tokens and the offset just past the closer (len(src) when the tag is unterminated).
func lexTag(src string, i int, closer string) ([]token, int) {
	var toks []token
	if i < len(src) && (src[i] == '-' || src[i] == '+') {
		i++
	}
	for i < len(src) {
		c := src[i]
		switch {
		case strings.HasPrefix(src[i:], closer):
			return toks, i + len(closer)
		case (c == '-' || c == '+') && strings.HasPrefix(src[i+1:], closer):
			return toks, i + 1 + len(closer)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(src))
			toks = append(toks, token{'s', i, end})
			i = end
		case isNameStart(c):
			j := i + 1
			for j < len(src) && (isNameStart(src[j]) || isDigit(src[j])) {
				j++
			}
			toks = append(toks, token{'n', i, j})
			i = j
		case isDigit(c):
			j := i + 1
			for j < len(src) && (isDigit(src[j]) || src[j] == '.' || src[j] == '_' || isNameStart(src[j])) {
				j++
			}
			toks = append(toks, token{'0', i, j})
			i = j
		default:
			toks = append(toks, token{c, i, i + 1})
			i++
		}
	}
	return toks, len(src)
}

func isNameStart(c byte) bool { return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || c >= 0x80 }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
