package tokenizer

// bigram is a candidate merge of two adjacent symbols.
type bigram struct {
	left, right int32
	// key orders candidates: SentencePiece uses the negated score, BPE the
	// merge rank; lower comes first.
	key float64
	// aux is the check that the candidate is still current: the total
	// length (SentencePiece) or the left symbol id (BPE).
	aux, aux2 int32
}

// bigramHeap is a binary min-heap on (key, left): ties go to the leftmost pair.
type bigramHeap []bigram

func (h bigramHeap) less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
	}
	return h[i].left < h[j].left
}

func (h *bigramHeap) push(b bigram) {
	*h = append(*h, b)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *bigramHeap) pop() bigram {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// symbol is one node of the linked list BPE merges; start and n are byte
// offsets into the text being merged.
type symbol struct {
	prev, next int32
	start, n   int32
	sid        int32 // BPE: current symbol id
}
