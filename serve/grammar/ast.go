package grammar

import (
	"slices"
	"unicode/utf8"
)

// nodeKind says what an expression node is.
type nodeKind uint8

const (
	nLit    nodeKind = iota // the bytes lit, in order
	nClass                  // one code point from ranges
	nSeq                    // kids in order
	nAlt                    // one of kids (none: never matches)
	nRef                    // the rule numbered rule
	nRepeat                 // kids[0] between min and max times (max < 0: unbounded)
)

// cpRange is an inclusive range of Unicode code points.
type cpRange struct{ lo, hi rune }

// node is one expression of the grammar every source compiles to before it
// is lowered to the byte automaton.
type node struct {
	kind     nodeKind
	lit      []byte
	ranges   []cpRange
	kids     []*node
	rule     int
	min, max int
}

// maxRepeat bounds a counted repetition ({m,n}, minLength, maxItems…):
// each count costs automaton positions.
const maxRepeat = 10000

func lit(s string) *node            { return &node{kind: nLit, lit: []byte(s)} }
func seq(kids ...*node) *node       { return &node{kind: nSeq, kids: kids} }
func alt(kids ...*node) *node       { return &node{kind: nAlt, kids: kids} }
func ref(rule int) *node            { return &node{kind: nRef, rule: rule} }
func never() *node                  { return &node{kind: nAlt} }
func empty() *node                  { return &node{kind: nSeq} }
func opt(x *node) *node             { return rep(x, 0, 1) }
func star(x *node) *node            { return rep(x, 0, -1) }
func plus(x *node) *node            { return rep(x, 1, -1) }
func rep(x *node, mn, mx int) *node { return &node{kind: nRepeat, kids: []*node{x}, min: mn, max: mx} }

// class returns a node matching one code point in rs (or, negated, one
// valid code point outside rs). Surrogates are never matched.
func class(negated bool, rs ...cpRange) *node {
	n := &node{kind: nClass, ranges: normalizeRanges(rs)}
	if negated {
		n.ranges = complementRanges(n.ranges)
	}
	n.ranges = removeSurrogates(n.ranges)
	return n
}

// rng returns the range lo–hi.
func rng(lo, hi rune) cpRange { return cpRange{lo, hi} }

// one returns the range holding only r.
func one(r rune) cpRange { return cpRange{r, r} }

// normalizeRanges sorts and merges rs.
func normalizeRanges(rs []cpRange) []cpRange {
	out := make([]cpRange, 0, len(rs))
	for _, r := range rs {
		if r.lo > r.hi {
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b cpRange) int { return int(a.lo - b.lo) })
	merged := out[:0]
	for _, r := range out {
		if k := len(merged); k > 0 && r.lo <= merged[k-1].hi+1 {
			merged[k-1].hi = max(merged[k-1].hi, r.hi)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// complementRanges returns [0, MaxRune] minus the normalized rs.
func complementRanges(rs []cpRange) []cpRange {
	var out []cpRange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, cpRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, cpRange{next, utf8.MaxRune})
	}
	return out
}

// removeSurrogates clips rs to valid scalar values.
func removeSurrogates(rs []cpRange) []cpRange {
	var out []cpRange
	for _, r := range rs {
		r.hi = min(r.hi, utf8.MaxRune)
		if r.lo < 0 {
			r.lo = 0
		}
		if r.lo > r.hi {
			continue
		}
		if r.hi < 0xD800 || r.lo > 0xDFFF {
			out = append(out, r)
			continue
		}
		if r.lo < 0xD800 {
			out = append(out, cpRange{r.lo, 0xD7FF})
		}
		if r.hi > 0xDFFF {
			out = append(out, cpRange{0xE000, r.hi})
		}
	}
	return out
}

// utf8Pieces splits the code point range r into pieces each of which is a
// product of byte ranges (one per encoded byte), calling emit for each.
func utf8Pieces(r cpRange, emit func(lo, hi []byte)) {
	bounds := []rune{0x7F, 0x7FF, 0xFFFF, utf8.MaxRune}
	for _, b := range bounds {
		if r.lo <= b && r.hi > b {
			utf8Pieces(cpRange{r.lo, b}, emit)
			utf8Pieces(cpRange{b + 1, r.hi}, emit)
			return
		}
	}
	n := utf8.RuneLen(r.lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if r.lo&^m != r.hi&^m {
			if r.lo&m != 0 {
				utf8Pieces(cpRange{r.lo, r.lo | m}, emit)
				utf8Pieces(cpRange{(r.lo | m) + 1, r.hi}, emit)
				return
			}
			if r.hi&m != m {
				utf8Pieces(cpRange{r.lo, (r.hi &^ m) - 1}, emit)
				utf8Pieces(cpRange{r.hi &^ m, r.hi}, emit)
				return
			}
		}
	}
	lo := utf8.AppendRune(nil, r.lo)
	hi := utf8.AppendRune(nil, r.hi)
	emit(lo, hi)
}

// builder collects named rules while a source compiles.
type builder struct {
	names  []string
	bodies []*node
	index  map[string]int
}

func newBuilder() *builder { return &builder{index: map[string]int{}} }

// rule returns the number of the rule called name, creating it undefined.
func (b *builder) rule(name string) int {
	if id, ok := b.index[name]; ok {
		return id
	}
	id := len(b.names)
	b.names = append(b.names, name)
	b.bodies = append(b.bodies, nil)
	b.index[name] = id
	return id
}

// define sets the body of rule id.
func (b *builder) define(id int, body *node) { b.bodies[id] = body }

// fresh returns a new rule named after base that no source can name.
func (b *builder) fresh(base string, body *node) int {
	id := b.rule(base + "#" + itoa(len(b.names)))
	b.define(id, body)
	return id
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}
