package runtime

import "strings"

// textDecoder turns a sequence's tokens into whole UTF-8 text
// (tokenizer.StreamDecoder).
type textDecoder interface {
	Add(id int32) string
	Flush() string
}

// pendingToken is a generated token whose text is not yet released; end is
// the offset in textStream.pending where its text ends.
type pendingToken struct {
	tok GeneratedToken
	end int
}

// textStream turns one request's tokens into the text its events carry. It
// holds back any suffix of the pending text that is a prefix of a stop
// string, so a stop string split over several tokens is still matched and
// never emitted; once the match fails the held text is released.
type textStream struct {
	dec     textDecoder
	stops   []string
	pending string
	toks    []pendingToken
}

func newTextStream(dec textDecoder, stops []string) *textStream {
	return &textStream{dec: dec, stops: stops}
}

// add appends the text of tok and returns the text and tokens that can be
// released now, and whether a stop string matched (then the text before the
// match is released and the stream is finished).
func (t *textStream) add(id int32, tok GeneratedToken) (string, []GeneratedToken, bool) {
	t.pending += t.dec.Add(id)
	t.toks = append(t.toks, pendingToken{tok: tok, end: len(t.pending)})
	if m := t.match(); m >= 0 {
		text, toks := t.releaseStopped(m)
		return text, toks, true
	}
	text, toks := t.release(len(t.pending) - t.holdBack())
	return text, toks, false
}

// finish flushes the decoder and releases whatever is left: the text before
// a stop string if the flushed bytes complete one, else all of it.
func (t *textStream) finish() (string, []GeneratedToken, bool) {
	t.pending += t.dec.Flush()
	if m := t.match(); m >= 0 {
		text, toks := t.releaseStopped(m)
		return text, toks, true
	}
	text, toks := t.release(len(t.pending))
	return text, toks, false
}

// match returns the offset of the earliest stop string in pending, or -1.
func (t *textStream) match() int {
	best := -1
	for _, s := range t.stops {
		if i := strings.Index(t.pending, s); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

// holdBack returns the length of the longest suffix of pending that is a
// proper prefix of some stop string.
func (t *textStream) holdBack() int {
	hold := 0
	for _, s := range t.stops {
		for n := min(len(s)-1, len(t.pending)); n > hold; n-- {
			if strings.HasSuffix(t.pending, s[:n]) {
				hold = n
				break
			}
		}
	}
	return hold
}

// release returns pending[:cut] with the tokens whose text ends by cut, and
// keeps the rest pending.
func (t *textStream) release(cut int) (string, []GeneratedToken) {
	text := t.pending[:cut]
	t.pending = t.pending[cut:]
	n := 0
	for n < len(t.toks) && t.toks[n].end <= cut {
		n++
	}
	toks := make([]GeneratedToken, n)
	for i := range n {
		toks[i] = t.toks[i].tok
	}
	rest := t.toks[:0]
	for _, p := range t.toks[n:] {
		p.end -= cut
		rest = append(rest, p)
	}
	t.toks = rest
	return text, toks
}

// releaseStopped returns the text before a stop string matched at m, with
// the tokens that contributed to it, and drops everything else.
func (t *textStream) releaseStopped(m int) (string, []GeneratedToken) {
	text := t.pending[:m]
	var toks []GeneratedToken
	start := 0
	for _, p := range t.toks {
		if start < m {
			toks = append(toks, p.tok)
		}
		start = p.end
	}
	t.pending, t.toks = "", nil
	return text, toks
}
