package tokenizer

import "unicode/utf8"

// cleanSpaces is llama.cpp's clean-up of decoded byte-level text: it drops
// the space before ? ! . , and before 's 'm 're 've, and the spaces around
// an apostrophe that stands alone (" ' "). It works in place on ASCII bytes
// and keeps everything else.
func cleanSpaces(text []byte) []byte {
	// Pass 1: " ?", " !", " .", " ,".
	out := text[:0:0]
	for i := 0; i < len(text); i++ {
		x := text[i]
		if x == ' ' && i+1 < len(text) {
			switch text[i+1] {
			case '?', '!', '.', ',':
				continue
			}
		}
		out = append(out, x)
	}
	text = out
	// Pass 2: " ' " becomes "'".
	out = make([]byte, 0, len(text))
	for i := 0; i < len(text); i++ {
		x := text[i]
		if x == '\'' && i > 0 && i+1 < len(text) && text[i-1] == ' ' && text[i+1] == ' ' && len(out) > 0 &&
			out[len(out)-1] == ' ' {
			out[len(out)-1] = '\''
			i++ // the space after is dropped too
			continue
		}
		out = append(out, x)
	}
	text = out
	// Pass 3: " 's", " 'm", " 're", " 've".
	out = make([]byte, 0, len(text))
	for i := 0; i < len(text); i++ {
		x := text[i]
		if x == ' ' && i+2 < len(text) && text[i+1] == '\'' {
			c := text[i+2]
			if c == 's' || c == 'm' {
				continue
			}
			if i+3 < len(text) && ((c == 'r' || c == 'v') && text[i+3] == 'e') {
				continue
			}
		}
		out = append(out, x)
	}
	return out
}

// cleanSafe reports whether decoded text may be cut after b[:c] without
// changing what cleanSpaces does: every rule looks at most three bytes past
// a space or a lone apostrophe.
func cleanSafe(b []byte, c int) bool {
	for i := max(0, c-4); i < c; i++ {
		if b[i] == ' ' || b[i] == '\'' {
			return false
		}
	}
	return true
}

// StreamDecoder turns ids, one at a time, into text. It holds back bytes
// until they form whole UTF-8 characters (a character may span byte-level
// tokens or a run of <0xNN> pieces), drops the SentencePiece leading space
// once per sequence, and applies the same clean-up as Decode, so the
// concatenation of everything Add and Flush return equals Decode of all ids.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
	started bool
}

// NewDecoder starts a streaming decoder for one sequence.
func (t *Tokenizer) NewDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Add appends one id and returns the text that is now final (possibly "").
func (d *StreamDecoder) Add(id int32) string {
	b := d.t.TokenBytes(id)
	if len(b) == 0 {
		return ""
	}
	if !d.started {
		d.started = true
		if d.t.stripSpace && b[0] == ' ' {
			b = b[1:]
		}
	}
	d.pending = append(d.pending, b...)
	// Walk whole characters (an invalid byte counts as one); stop before
	// an incomplete sequence at the end.
	cut := 0
	for i := 0; i < len(d.pending); {
		if !utf8.FullRune(d.pending[i:]) {
			break
		}
		_, n := utf8.DecodeRune(d.pending[i:])
		i += n
		if !d.t.clean || cleanSafe(d.pending, i) {
			cut = i
		}
	}
	if cut == 0 {
		return ""
	}
	chunk := d.pending[:cut]
	if d.t.clean {
		chunk = cleanSpaces(chunk)
	}
	s := validString(chunk)
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return s
}

// Flush returns whatever is held back (invalid bytes as U+FFFD) and starts
// a new sequence.
func (d *StreamDecoder) Flush() string {
	chunk := d.pending
	if d.t.clean {
		chunk = cleanSpaces(chunk)
	}
	s := validString(chunk)
	d.pending = d.pending[:0]
	d.started = false
	return s
}
