package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// spmEncode appends the SentencePiece-BPE ids of text (already prefixed
// with a space when the dummy prefix applies) to out.
func (t *Tokenizer) spmEncode(text string, out []int32) []int32 {
	if text == "" {
		return out
	}
	s := strings.ReplaceAll(text, " ", "\u2581")
	if !t.spmSplit {
		return t.spmMerge(s, out)
	}
	// No token holds "▁" after another character, so no merge crosses
	// the start of a "▁" run: encode each word on its own (and cache it).
	for len(s) > 0 {
		i := nextWordStart(s)
		out = t.spmWord(s[:i], out)
		s = s[i:]
	}
	return out
}

// nextWordStart is the end of the first word of s: the first "▁" that
// follows a character other than "▁", or len(s).
func nextWordStart(s string) int {
	const sp = "\u2581"
	i := 0
	for i < len(s) && strings.HasPrefix(s[i:], sp) {
		i += len(sp)
	}
	j := strings.Index(s[i:], sp)
	if j < 0 {
		return len(s)
	}
	return i + j
}

// spmWord encodes one word through the piece cache.
func (t *Tokenizer) spmWord(w string, out []int32) []int32 {
	if ids, ok := t.cache.get(w); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = t.spmMerge(w, out)
	t.cache.put(w, out[start:])
	return out
}

// spmMerge runs the SentencePiece merge loop over s ("▁" for spaces).
func (t *Tokenizer) spmMerge(s string, out []int32) []int32 {
	syms := make([]symbol, 0, len(s))
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		k := int32(len(syms))
		syms = append(syms, symbol{prev: k - 1, next: k + 1, start: int32(i), n: int32(n)})
		i += n
	}
	syms[len(syms)-1].next = -1
	h := make(bigramHeap, 0, len(syms))
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		end := syms[r].start + syms[r].n
		id, ok := t.ids[s[syms[l].start:end]]
		if !ok {
			return
		}
		var score float32
		if int(id) < len(t.scores) {
			score = t.scores[id]
		}
		h.push(bigram{left: l, right: r, key: -float64(score), aux: end - syms[l].start})
	}
	for i := 1; i < len(syms); i++ {
		try(int32(i-1), int32(i))
	}
	for len(h) > 0 {
		b := h.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.aux {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		piece := s[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			if id := t.byteTok[piece[j]]; id >= 0 {
				out = append(out, id)
			}
		}
	}
	return out
}
