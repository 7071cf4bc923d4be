package grammar

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"unicode"
)

var errTooManyRepeats = errors.New("repetition count too large")

type unsupportedRegex struct{ op syntax.Op }

func (e *unsupportedRegex) Error() string {
	return fmt.Sprintf("regular-expression operator %v is not supported here", e.op)
}

func simpleFold(r rune) rune { return unicode.SimpleFold(r) }

// jsonChars matches one character from rs as it is written inside a JSON
// string: plain where JSON allows it, escaped for '"', '\\' and control
// characters (one canonical escape each).
func jsonChars(rs []cpRange) *node {
	rs = removeSurrogates(normalizeRanges(rs))
	special := []cpRange{one('"'), one('\\'), rng(0, 0x1F)}
	plain := intersectRanges(rs, complementRanges(normalizeRanges(special)))
	var alts []*node
	if len(plain) > 0 {
		alts = append(alts, &node{kind: nClass, ranges: plain})
	}
	short := map[rune]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\t': `\t`, '\r': `\r`, '\b': `\b`, '\f': `\f`}
	for _, r := range rs {
		for c := r.lo; c <= min(r.hi, '\\'); c++ {
			if c > 0x1F && c != '"' && c != '\\' {
				continue
			}
			if s, ok := short[c]; ok {
				alts = append(alts, lit(s))
			} else {
				alts = append(alts, lit(fmt.Sprintf(`\u%04x`, c)))
			}
		}
	}
	return alt(alts...)
}

// intersectRanges returns the code points in both normalized a and b.
func intersectRanges(a, b []cpRange) []cpRange {
	var out []cpRange
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo <= hi {
			out = append(out, cpRange{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}
