package grammar

import (
	"bytes"
	"slices"
)

// TokenSource is what a Vocabulary is built from; *tokenizer.Tokenizer
// satisfies it.
type TokenSource interface {
	VocabSize() int
	TokenBytes(id int32) []byte
	IsEOG(id int32) bool
}

// Vocabulary is a tokenizer's tokens organised as a trie of their bytes,
// laid out in depth-first order so one linear scan walks it and a rejected
// byte skips its whole subtree. Build it once per tokenizer; it is
// read-only and safe for concurrent use.
type Vocabulary struct {
	size     int
	label    []byte  // per trie node: the byte on the edge into it
	depth    []int32 // per trie node: its depth (1 for the root's children)
	end      []int32 // per trie node: one past the last node of its subtree
	tokStart []int32 // tokens ending at node i: toks[tokStart[i]:tokStart[i+1]]
	toks     []int32
	maxDepth int
	eog      []int32
	tokBytes [][]byte
	isEOG    []bool
}

// NewVocabulary builds the trie of src's tokens. End-of-generation tokens
// are kept apart (allowed exactly when the grammar may end), and tokens
// with no bytes (control tokens) are never allowed.
func NewVocabulary(src TokenSource) *Vocabulary {
	n := src.VocabSize()
	v := &Vocabulary{size: n, tokBytes: make([][]byte, n), isEOG: make([]bool, n)}
	ids := make([]int32, 0, n)
	for id := int32(0); int(id) < n; id++ {
		b := src.TokenBytes(id)
		v.tokBytes[id] = b
		if src.IsEOG(id) {
			v.isEOG[id] = true
			v.eog = append(v.eog, id)
			continue
		}
		if len(b) > 0 {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := bytes.Compare(v.tokBytes[a], v.tokBytes[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	var path []int32 // node index per depth-1
	var prev []byte
	for _, id := range ids {
		b := v.tokBytes[id]
		common := 0
		for common < len(prev) && common < len(b) && prev[common] == b[common] {
			common++
		}
		for len(path) > common {
			v.end[path[len(path)-1]] = int32(len(v.label))
			path = path[:len(path)-1]
		}
		for d := common; d < len(b); d++ {
			i := int32(len(v.label))
			v.label = append(v.label, b[d])
			v.depth = append(v.depth, int32(d+1))
			v.end = append(v.end, 0)
			v.tokStart = append(v.tokStart, int32(len(v.toks)))
			path = append(path, i)
		}
		v.toks = append(v.toks, id)
		v.maxDepth = max(v.maxDepth, len(b))
		prev = b
	}
	for _, i := range path {
		v.end[i] = int32(len(v.label))
	}
	v.tokStart = append(v.tokStart, int32(len(v.toks)))
	return v
}

// Size returns the number of token ids.
func (v *Vocabulary) Size() int { return v.size }

// Words returns the length of a mask over v in uint64 words.
func (v *Vocabulary) Words() int { return (v.size + 63) / 64 }

// walk sets in dst the bit of every token whose bytes g accepts from
// state s. g.mu must be held.
func (v *Vocabulary) walk(g *Grammar, s int32, dst []uint64) {
	clear(dst)
	stk := make([]int32, v.maxDepth+1)
	stk[0] = s
	n := int32(len(v.label))
	for i := int32(0); i < n; {
		d := v.depth[i]
		from := g.states[stk[d-1]]
		c := v.label[i]
		var next int32
		if from.trans != nil && from.trans[c] != 0 {
			next = from.trans[c] - 1
		} else {
			next = g.step(stk[d-1], c)
		}
		if next == deadState {
			i = v.end[i]
			continue
		}
		stk[d] = next
		for _, t := range v.toks[v.tokStart[i]:v.tokStart[i+1]] {
			dst[t>>6] |= 1 << (t & 63)
		}
		i++
	}
	if g.states[s].canEnd {
		for _, t := range v.eog {
			dst[t>>6] |= 1 << (t & 63)
		}
	}
}
