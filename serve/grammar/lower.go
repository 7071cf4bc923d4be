package grammar

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// elemKind says what one automaton position holds.
type elemKind uint8

const (
	eEnd  elemKind = iota // end of an alternative: return to the caller
	eTerm                 // one byte from the byte set arg
	eRef                  // call rule arg
)

// elem is one position of the flat automaton program.
type elem struct {
	kind elemKind
	arg  int32
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s[c>>6] |= 1 << (c & 63)
	}
}

func (s *byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }

// maxElems bounds the size of one compiled grammar.
const maxElems = 4 << 20

// lowerer turns builder rules into the flat program of a Grammar.
type lowerer struct {
	b       *builder
	elems   []elem
	rules   [][]int32 // per rule: the positions its alternatives start at
	sets    []byteSet
	setIdx  map[byteSet]int32
	classes map[string]int32 // class key → aux rule
	done    []bool           // rules already lowered
	err     error
}

// lower compiles the rules of b, starting at rule root, into a Grammar.
func lower(b *builder, root int) (*Grammar, error) {
	for id, body := range b.bodies {
		if body == nil {
			return nil, fmt.Errorf("%w: rule %q is used but not defined", ErrSyntax, b.names[id])
		}
	}
	l := &lowerer{b: b, setIdx: map[byteSet]int32{}, classes: map[string]int32{}}
	l.rules = make([][]int32, len(b.bodies))
	l.done = make([]bool, len(b.bodies))
	for id := 0; id < len(b.bodies); id++ { // aux rules append to b.bodies as we go
		if l.done[id] {
			continue
		}
		l.lowerRule(id, b.bodies[id])
		if l.err != nil {
			return nil, l.err
		}
	}
	if err := checkLeftRecursion(l); err != nil {
		return nil, err
	}
	live := livePositions(l)
	if len(l.rules[root]) == 0 || !slices.ContainsFunc(l.rules[root], func(a int32) bool { return live[a] }) {
		return nil, fmt.Errorf("%w: no finite output matches rule %q", ErrEmpty, b.names[root])
	}
	return newGrammar(l.elems, l.rules, l.sets, live, int32(root), b.names)
}

// livePositions marks the positions from which the rest of their
// alternative can match some finite input. The automaton never enters the
// others, so every state it reaches can still be completed (up to the
// stack-depth limit).
func livePositions(l *lowerer) []bool {
	productive := make([]bool, len(l.rules))
	live := make([]bool, len(l.elems))
	for changed := true; changed; {
		changed = false
		for p := len(l.elems) - 1; p >= 0; p-- {
			e := l.elems[p]
			v := e.kind == eEnd || live[p+1] && (e.kind == eTerm || productive[e.arg])
			if v != live[p] {
				live[p], changed = v, true
			}
		}
		for r, alts := range l.rules {
			if productive[r] {
				continue
			}
			for _, a := range alts {
				if live[a] {
					productive[r], changed = true, true
					break
				}
			}
		}
	}
	return live
}

// newRule reserves a rule number for an auxiliary rule.
func (l *lowerer) newRule(body *node) int32 {
	id := l.b.fresh("aux", body)
	l.rules = append(l.rules, nil)
	l.done = append(l.done, false)
	return int32(id)
}

func (l *lowerer) lowerRule(id int, body *node) {
	alts := []*node{body}
	if body.kind == nAlt {
		alts = body.kids
	}
	starts := make([]int32, 0, len(alts))
	for _, a := range alts {
		var buf []elem
		buf = l.seqElems(a, buf)
		starts = append(starts, int32(len(l.elems)))
		l.elems = append(l.elems, buf...)
		l.elems = append(l.elems, elem{kind: eEnd})
	}
	if len(l.elems) > maxElems && l.err == nil {
		l.err = fmt.Errorf("%w: grammar needs more than %d positions", ErrTooLarge, maxElems)
	}
	l.rules[id] = starts
}

// set returns the index of the byte set s.
func (l *lowerer) set(s byteSet) int32 {
	if i, ok := l.setIdx[s]; ok {
		return i
	}
	i := int32(len(l.sets))
	l.sets = append(l.sets, s)
	l.setIdx[s] = i
	return i
}

func (l *lowerer) term(lo, hi byte) elem {
	var s byteSet
	s.add(lo, hi)
	return elem{kind: eTerm, arg: l.set(s)}
}

// seqElems appends the positions matching n to buf.
func (l *lowerer) seqElems(n *node, buf []elem) []elem {
	if l.err != nil || len(buf) > maxElems {
		if l.err == nil {
			l.err = fmt.Errorf("%w: grammar needs more than %d positions", ErrTooLarge, maxElems)
		}
		return buf
	}
	switch n.kind {
	case nLit:
		for _, c := range n.lit {
			buf = append(buf, l.term(c, c))
		}
	case nClass:
		buf = append(buf, l.classElem(n.ranges))
	case nSeq:
		for _, k := range n.kids {
			buf = l.seqElems(k, buf)
		}
	case nAlt:
		if len(n.kids) == 1 {
			return l.seqElems(n.kids[0], buf)
		}
		buf = append(buf, elem{kind: eRef, arg: l.newRule(n)})
	case nRef:
		buf = append(buf, elem{kind: eRef, arg: int32(n.rule)})
	case nRepeat:
		buf = l.repeatElems(n, buf)
	default:
		panic("BUG: grammar: unknown node kind " + strconv.Itoa(int(n.kind)))
	}
	return buf
}

// classElem returns one position matching a code point in rs: a byte set
// when rs is ASCII only, else a call of an auxiliary rule whose
// alternatives are the UTF-8 byte sequences.
func (l *lowerer) classElem(rs []cpRange) elem {
	var ascii byteSet
	asciiOnly, any := true, false
	for _, r := range rs {
		if r.lo <= 0x7F {
			ascii.add(byte(r.lo), byte(min(r.hi, 0x7F)))
			any = true
		}
		if r.hi > 0x7F {
			asciiOnly = false
		}
	}
	if asciiOnly {
		return elem{kind: eTerm, arg: l.set(ascii)}
	}
	var key strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&key, "%x-%x,", r.lo, r.hi)
	}
	if id, ok := l.classes[key.String()]; ok {
		return elem{kind: eRef, arg: id}
	}
	id := l.newRule(never()) // alternatives built directly below
	l.done[id] = true
	l.classes[key.String()] = id
	var starts []int32
	if any {
		starts = append(starts, int32(len(l.elems)))
		l.elems = append(l.elems, elem{kind: eTerm, arg: l.set(ascii)}, elem{kind: eEnd})
	}
	for _, r := range rs {
		if r.hi <= 0x7F {
			continue
		}
		utf8Pieces(cpRange{max(r.lo, 0x80), r.hi}, func(lo, hi []byte) {
			starts = append(starts, int32(len(l.elems)))
			for i := range lo {
				l.elems = append(l.elems, l.term(lo[i], hi[i]))
			}
			l.elems = append(l.elems, elem{kind: eEnd})
		})
	}
	l.rules[id] = starts
	return elem{kind: eRef, arg: id}
}

// repeatElems appends kids[0] repeated min..max times. Repetitions past
// the minimum use right-recursive auxiliary rules, so the automaton's
// stacks do not grow with the count.
func (l *lowerer) repeatElems(n *node, buf []elem) []elem {
	if n.min > maxRepeat || n.max > maxRepeat {
		l.err = fmt.Errorf("%w: repetition count above %d", ErrTooLarge, maxRepeat)
		return buf
	}
	item := l.seqElems(n.kids[0], nil)
	if len(item) != 1 {
		item = []elem{{kind: eRef, arg: l.newRule(n.kids[0])}}
	}
	for i := 0; i < n.min; i++ {
		buf = append(buf, item...)
	}
	switch {
	case n.max < 0:
		// S ::= item S | ε
		s := l.newRule(never())
		l.lowered(s, [][]elem{append(append([]elem{}, item...), elem{kind: eRef, arg: s}), nil})
		buf = append(buf, elem{kind: eRef, arg: s})
	case n.max > n.min:
		// O1 ::= item | ε; Ok ::= item O(k-1) | ε
		prev := int32(-1)
		for k := 1; k <= n.max-n.min; k++ {
			o := l.newRule(never())
			first := append([]elem{}, item...)
			if prev >= 0 {
				first = append(first, elem{kind: eRef, arg: prev})
			}
			l.lowered(o, [][]elem{first, nil})
			prev = o
		}
		buf = append(buf, elem{kind: eRef, arg: prev})
	}
	return buf
}

// lowered stores rule id's alternatives, already as positions, and marks
// the rule so lower does not lower it again.
func (l *lowerer) lowered(id int32, alts [][]elem) {
	var starts []int32
	for _, a := range alts {
		starts = append(starts, int32(len(l.elems)))
		l.elems = append(l.elems, a...)
		l.elems = append(l.elems, elem{kind: eEnd})
	}
	l.rules[id] = starts
	l.done[id] = true
}
