package tokenizer

import (
	"fmt"
	"strings"
	"sync"
)

// mergeInfo is one merge rule: its rank and the symbol it produces.
type mergeInfo struct {
	rank, result int32
}

// bpeModel is byte-level BPE over raw bytes. Symbol ids below nTok are
// token ids; higher ones stand for merge results that are not tokens.
type bpeModel struct {
	nTok    int32
	raw     map[string]int32 // raw bytes → symbol id
	synth   []string         // text of symbol nTok+i
	merges  map[uint64]mergeInfo
	byteSym [256]int32 // initial symbol of each byte (-1: none)
	byteTok [256]int32 // token emitted for a lone byte (-1: none)
	// tiktoken: no merge list; a pair's rank is the id of its concatenation.
	tiktoken     bool
	ignoreMerges bool

	cache pieceCache
}

// pieceCache remembers the ids of encoded pieces; it is cleared when full.
type pieceCache struct {
	mu sync.Mutex
	m  map[string][]int32
}

func (c *pieceCache) get(k string) ([]int32, bool) {
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	return v, ok
}

func (c *pieceCache) put(k string, ids []int32) {
	v := append([]int32(nil), ids...)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheLimit {
		c.m = make(map[string][]int32)
	}
	c.m[k] = v
	c.mu.Unlock()
}

// cacheLimit bounds the per-tokenizer cache of encoded pieces.
const cacheLimit = 1 << 16

func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

// newBPEModel builds the merge tables. rawTok holds the raw bytes of every
// token that takes part in BPE ("" for the others).
func newBPEModel(rawTok []string, merges []string, tiktoken bool, unk int32) (*bpeModel, error) {
	m := &bpeModel{nTok: int32(len(rawTok)), raw: make(map[string]int32, len(rawTok)), tiktoken: tiktoken}
	for id, r := range rawTok {
		if r != "" {
			m.raw[r] = int32(id)
		}
	}
	sym := func(text string) int32 {
		if id, ok := m.raw[text]; ok {
			return id
		}
		id := m.nTok + int32(len(m.synth))
		m.synth = append(m.synth, text)
		m.raw[text] = id
		return id
	}
	if !tiktoken {
		m.merges = make(map[uint64]mergeInfo, len(merges))
		for rank, line := range merges {
			l, r, ok := splitMerge(line)
			if !ok {
				return nil, fmt.Errorf("%w: merge %d %q has no separating space", ErrInvalid, rank, line)
			}
			lr, ok1 := byteUnmap(l)
			rr, ok2 := byteUnmap(r)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: merge %d %q is not byte-mapped text", ErrInvalid, rank, line)
			}
			k := pairKey(sym(lr), sym(rr))
			if _, dup := m.merges[k]; !dup {
				m.merges[k] = mergeInfo{rank: int32(rank), result: sym(lr + rr)}
			}
		}
	}
	for b := 0; b < 256; b++ {
		s := string([]byte{byte(b)})
		m.byteSym[b], m.byteTok[b] = -1, unk
		if id, ok := m.raw[s]; ok {
			m.byteSym[b] = id
			if id < m.nTok {
				m.byteTok[b] = id
			}
		} else if !tiktoken {
			m.byteSym[b] = sym(s)
		}
	}
	return m, nil
}

// splitMerge splits "left right" at the first space at index ≥ 1.
func splitMerge(line string) (l, r string, ok bool) {
	if len(line) < 3 {
		return "", "", false
	}
	i := strings.IndexByte(line[1:], ' ')
	if i < 0 {
		return "", "", false
	}
	return line[:i+1], line[i+2:], true
}

// encode appends the ids of one pre-tokenized piece (raw bytes) to out.
func (m *bpeModel) encode(piece string, out []int32) []int32 {
	if piece == "" {
		return out
	}
	if m.ignoreMerges || m.tiktoken {
		if id, ok := m.raw[piece]; ok && id < m.nTok {
			return append(out, id)
		}
	}
	if len(piece) == 1 {
		if id := m.byteTok[piece[0]]; id >= 0 {
			out = append(out, id)
		}
		return out
	}
	if ids, ok := m.cache.get(piece); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = m.merge(piece, out)
	m.cache.put(piece, out[start:])
	return out
}

// rank looks up the merge of symbols l and r.
func (m *bpeModel) rank(piece string, syms []symbol, l, r int32) (mergeInfo, bool) {
	if m.tiktoken {
		id, ok := m.raw[piece[syms[l].start:syms[r].start+syms[r].n]]
		if !ok || id >= m.nTok {
			return mergeInfo{}, false
		}
		return mergeInfo{rank: id, result: id}, true
	}
	if syms[l].sid < 0 || syms[r].sid < 0 {
		return mergeInfo{}, false
	}
	mi, ok := m.merges[pairKey(syms[l].sid, syms[r].sid)]
	return mi, ok
}

// merge runs BPE on piece: lowest rank first, leftmost on ties.
func (m *bpeModel) merge(piece string, out []int32) []int32 {
	syms := make([]symbol, len(piece))
	for i := range syms {
		syms[i] = symbol{prev: int32(i) - 1, next: int32(i) + 1, start: int32(i), n: 1, sid: m.byteSym[piece[i]]}
	}
	syms[len(syms)-1].next = -1
	h := make(bigramHeap, 0, len(syms))
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		if mi, ok := m.rank(piece, syms, l, r); ok {
			h.push(bigram{left: l, right: r, key: float64(mi.rank), aux: syms[l].sid, aux2: syms[r].sid})
		}
	}
	for i := 1; i < len(syms); i++ {
		try(int32(i-1), int32(i))
	}
	for len(h) > 0 {
		b := h.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.next != b.right || l.sid != b.aux || r.sid != b.aux2 {
			continue
		}
		mi, _ := m.rank(piece, syms, b.left, b.right)
		l.n += r.n
		l.sid = mi.result
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		s := syms[i]
		if s.sid >= 0 && s.sid < m.nTok {
			out = append(out, s.sid)
			continue
		}
		for j := s.start; j < s.start+s.n; j++ {
			if id := m.byteTok[piece[j]]; id >= 0 {
				out = append(out, id)
			}
		}
	}
	return out
}
