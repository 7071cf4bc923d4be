package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written splitters for the GPT-2, Llama 3 and Qwen2 pre-tokenizer
// regexes. They walk code points and give exactly the pieces regexp2 gives
// for the pattern (a backtracking engine: alternatives are tried in order
// at each position, quantifiers are greedy), with regexp2's classes:
//
//	\s     unicode.IsSpace (the White_Space property)
//	\p{L}  unicode.IsLetter
//	\p{N}  unicode.IsNumber
//	(?i:)  the input code point goes through unicode.ToLower, so only
//	       ASCII letters fold onto the contraction letters ('ſ' does not)
//
// An invalid UTF-8 byte is one U+FFFD (a symbol), as ranging over a string
// gives it. Text between matches becomes a piece of its own, as in
// splitLevel.

// splitFunc calls emit for every piece of text, in order.
type splitFunc func(text string, emit func(string))

// fastSplitters maps a pattern to the splitter that replaces it.
var fastSplitters = map[string]splitFunc{
	patGPT2:            splitGPT2,
	patGPT2 + `|\s+`:   splitGPT2,
	patLlama3:          splitLlama3,
	patLlama3Alt:       splitLlama3,
	patQwen2:           splitQwen2,
	patQwen2Alt:        splitQwen2,
	patLlama3 + `|\s+`: splitLlama3, // the trailing \s+ is already there
	patQwen2 + `|\s+`:  splitQwen2,
}

// charClass is what the patterns tell apart: letters, numbers, white space
// and everything else ("other": punctuation, symbols, marks, controls).
type charClass uint8

const (
	clsOther charClass = iota
	clsLetter
	clsNumber
	clsSpace
)

// latin1Class caches classOf for code points below 256.
var latin1Class = func() (t [256]charClass) {
	for r := range t {
		t[r] = slowClass(rune(r))
	}
	return t
}()

func slowClass(r rune) charClass {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

func classOf(r rune) charClass {
	if r < 256 {
		return latin1Class[r]
	}
	return slowClass(r)
}

// at decodes the code point at byte offset i: its class, the rune and its
// width. At the end of text it gives clsOther, -1 and 0.
func at(text string, i int) (charClass, rune, int) {
	if i >= len(text) {
		return clsOther, -1, 0
	}
	if b := text[i]; b < utf8.RuneSelf {
		return latin1Class[b], rune(b), 1
	}
	r, w := utf8.DecodeRuneInString(text[i:])
	return classOf(r), r, w
}

// skipClass returns the end of the run of class c starting at i.
func skipClass(text string, i int, c charClass) int {
	for i < len(text) {
		if b := text[i]; b < utf8.RuneSelf {
			if latin1Class[b] != c {
				return i
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(text[i:])
		if classOf(r) != c {
			return i
		}
		i += w
	}
	return i
}

// skipNewlines returns the end of the run of '\r' and '\n' starting at i.
func skipNewlines(text string, i int) int {
	for i < len(text) && (text[i] == '\r' || text[i] == '\n') {
		i++
	}
	return i
}

// contraction returns the length of the contraction ('s 't 're 've 'm
// 'll 'd) at i, which holds an apostrophe, or 0. With fold, ASCII
// upper-case letters match too.
func contraction(text string, i int, fold bool) int {
	lower := func(j int) byte {
		if j >= len(text) {
			return 0
		}
		b := text[j]
		if fold && 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		return b
	}
	switch lower(i + 1) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return 3
		}
	}
	return 0
}

// spaceRun scans the white-space run starting at i and returns its end,
// the start of its last code point, the end of its last '\r' or '\n' (0
// if none) and whether it holds more than one code point.
func spaceRun(text string, i int) (end, lastStart, nlEnd int, multi bool) {
	end, lastStart = i, i
	for {
		c, r, w := at(text, end)
		if c != clsSpace {
			return end, lastStart, nlEnd, lastStart > i
		}
		if r == '\r' || r == '\n' {
			nlEnd = end + w
		}
		lastStart = end
		end += w
	}
}

// splitGPT2 splits like
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
// (with or without a final |\s+, which only names the gaps).
func splitGPT2(text string, emit func(string)) {
	for i := 0; i < len(text); {
		c, r, w := at(text, i)
		var end int
		switch {
		case r == '\'' && contraction(text, i, false) > 0:
			end = i + contraction(text, i, false)
		case c != clsSpace:
			end = skipClass(text, i+w, c)
		default:
			if nc, _, nw := at(text, i+w); r == ' ' && nw > 0 && nc != clsSpace {
				// " ?X+" with the optional space.
				end = skipClass(text, i+w+nw, nc)
				break
			}
			// \s+(?!\S): the whole run at the end of text, else all but
			// its last code point; a lone one before a non-space is a gap.
			runEnd, lastStart, _, multi := spaceRun(text, i)
			end = runEnd
			if runEnd < len(text) && multi {
				end = lastStart
			}
		}
		if end <= i {
			panic("BUG: pre-tokenizer splitter made no progress")
		}
		emit(text[i:end])
		i = end
	}
}

// splitLlama3 splits like the Llama 3 pattern (digit runs of up to 3).
func splitLlama3(text string, emit func(string)) { splitLlamaLike(text, 3, emit) }

// splitQwen2 splits like the Qwen2 pattern (single digits).
func splitQwen2(text string, emit func(string)) { splitLlamaLike(text, 1, emit) }

// splitLlamaLike splits like
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Every position matches some alternative, so there are no gaps.
func splitLlamaLike(text string, maxDigits int, emit func(string)) {
	for i := 0; i < len(text); {
		c, r, w := at(text, i)
		var end int
		switch {
		case r == '\'' && contraction(text, i, true) > 0:
			end = i + contraction(text, i, true)
		case c == clsLetter:
			end = skipClass(text, i+w, clsLetter)
		case c == clsNumber:
			end = i + w
			for n := 1; n < maxDigits; n++ {
				nc, _, nw := at(text, end)
				if nc != clsNumber {
					break
				}
				end += nw
			}
		default:
			nc, _, nw := at(text, i+w)
			switch {
			case nc == clsLetter && nw > 0 && r != '\r' && r != '\n':
				// [^\r\n\p{L}\p{N}]\p{L}+ (c is not a number here).
				end = skipClass(text, i+w+nw, clsLetter)
			case c == clsOther:
				end = skipNewlines(text, skipClass(text, i+w, clsOther))
			case r == ' ' && nc == clsOther && nw > 0:
				end = skipNewlines(text, skipClass(text, i+w+nw, clsOther))
			default:
				// c is white space: \s*[\r\n]+ ends after the run's last
				// newline; \s+(?!\S) takes the run at the end of text, else
				// all but its last code point; \s+ takes a lone one.
				runEnd, lastStart, nlEnd, multi := spaceRun(text, i)
				switch {
				case nlEnd > 0:
					end = nlEnd
				case runEnd < len(text) && multi:
					end = lastStart
				default:
					end = runEnd
				}
			}
		}
		if end <= i {
			panic("BUG: pre-tokenizer splitter made no progress")
		}
		emit(text[i:end])
		i = end
	}
}
