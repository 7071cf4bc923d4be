package main

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"unicode/utf8"
)

// maxStates bounds the DFA built lazily from one expression.
const maxStates = 20000

var (
	errRegex    = errors.New("regex")
	errTooLarge = errors.New("regex: DFA too large")
)

// dfa is a lazily built byte-level DFA of a regexp/syntax program. A DFA
// state is a set of program counters waiting to read a rune (before their
// empty-width closure) plus the bytes of a partly read UTF-8 rune.
type dfa struct {
	prog   *syntax.Prog
	keys   map[string]int32
	states []dstate
	err    error // set once the DFA outgrew maxStates: every step is dead
}

type dstate struct {
	pcs     []uint32
	pending []byte     // an incomplete UTF-8 encoding read so far
	start   bool       // no byte read yet (^ holds)
	next    [256]int32 // memoised transitions: 0 unknown, −1 dead, else state+1
	canEnd  int8       // 0 unknown, 1 yes, −1 no
}

// compile parses expr (Perl syntax, whole-output match) into a dfa. Word
// boundaries and multi-line anchors are refused; ^ and $ hold only at the
// start and end of the output.
func compile(expr string) (*dfa, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errRegex, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errRegex, err)
	}
	for _, in := range prog.Inst {
		if in.Op == syntax.InstEmptyWidth && syntax.EmptyOp(in.Arg)&^(syntax.EmptyBeginText|syntax.EmptyEndText) != 0 {
			return nil, fmt.Errorf("%w: word boundaries and multi-line anchors are not supported", errRegex)
		}
	}
	d := &dfa{prog: prog, keys: map[string]int32{}}
	d.intern([]uint32{uint32(prog.Start)}, nil, true)
	return d, nil
}

func (d *dfa) intern(pcs []uint32, pending []byte, start bool) int32 {
	slices.Sort(pcs)
	pcs = slices.Compact(pcs)
	key := make([]byte, 0, 4*len(pcs)+len(pending)+2)
	if start {
		key = append(key, 1)
	} else {
		key = append(key, 0)
	}
	key = append(key, byte(len(pending)))
	key = append(key, pending...)
	for _, pc := range pcs {
		key = append(key, byte(pc), byte(pc>>8), byte(pc>>16), byte(pc>>24))
	}
	if id, ok := d.keys[string(key)]; ok {
		return id
	}
	if len(d.states) >= maxStates {
		d.err = errTooLarge
		return -1
	}
	id := int32(len(d.states))
	d.states = append(d.states, dstate{pcs: pcs, pending: pending, start: start})
	d.keys[string(key)] = id
	return id
}

// closure follows the empty transitions of pcs; atEnd says $ holds.
// It returns the reached rune-reading pcs and whether Match was reached.
func (d *dfa) closure(pcs []uint32, atStart, atEnd bool) ([]uint32, bool) {
	seen := map[uint32]bool{}
	var out []uint32
	match := false
	stack := slices.Clone(pcs)
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		in := &d.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Out, in.Arg)
		case syntax.InstCapture, syntax.InstNop:
			stack = append(stack, in.Out)
		case syntax.InstEmptyWidth:
			op := syntax.EmptyOp(in.Arg)
			if (op&syntax.EmptyBeginText == 0 || atStart) && (op&syntax.EmptyEndText == 0 || atEnd) {
				stack = append(stack, in.Out)
			}
		case syntax.InstMatch:
			match = true
		case syntax.InstFail:
		default: // rune instructions
			out = append(out, pc)
		}
	}
	return out, match
}

// Start implements sdk.Grammar.
func (d *dfa) Start() int32 { return 0 }

// Next implements sdk.Grammar.
func (d *dfa) Next(s int32, b byte) int32 {
	if s < 0 || d.err != nil {
		return -1
	}
	if t := d.states[s].next[b]; t != 0 {
		if t < 0 {
			return -1
		}
		return t - 1
	}
	t := d.advance(s, b)
	if t < 0 {
		d.states[s].next[b] = -1
	} else {
		d.states[s].next[b] = t + 1
	}
	return t
}

func (d *dfa) advance(s int32, b byte) int32 {
	st := &d.states[s]
	buf := append(slices.Clone(st.pending), b)
	if !utf8.FullRune(buf) {
		lo, hi, ok := prefixRange(buf)
		if !ok {
			return -1
		}
		pcs, _ := d.closure(st.pcs, st.start, false)
		for _, pc := range pcs {
			if mayMatch(&d.prog.Inst[pc], lo, hi) {
				return d.intern(slices.Clone(st.pcs), buf, st.start)
			}
		}
		return -1 // no rune starting with these bytes can continue
	}
	r, size := utf8.DecodeRune(buf)
	if r == utf8.RuneError && size <= 1 {
		return -1
	}
	pcs, _ := d.closure(st.pcs, st.start, false)
	var next []uint32
	for _, pc := range pcs {
		if d.prog.Inst[pc].MatchRune(r) {
			next = append(next, d.prog.Inst[pc].Out)
		}
	}
	if len(next) == 0 {
		return -1
	}
	return d.intern(next, nil, false)
}

// CanEnd implements sdk.Grammar.
func (d *dfa) CanEnd(s int32) bool {
	if s < 0 || d.err != nil {
		return false
	}
	st := &d.states[s]
	if st.canEnd == 0 {
		st.canEnd = -1
		if len(st.pending) == 0 {
			if _, m := d.closure(st.pcs, st.start, true); m {
				st.canEnd = 1
			}
		}
	}
	return st.canEnd == 1
}

// prefixRange returns the runes whose UTF-8 encoding starts with the
// incomplete prefix p.
func prefixRange(p []byte) (lo, hi rune, ok bool) {
	var n int
	var min rune
	switch c := p[0]; {
	case c >= 0xc2 && c <= 0xdf:
		n, min, lo = 2, 0x80, rune(c&0x1f)
	case c >= 0xe0 && c <= 0xef:
		n, min, lo = 3, 0x800, rune(c&0x0f)
	case c >= 0xf0 && c <= 0xf4:
		n, min, lo = 4, 0x10000, rune(c&0x07)
	default:
		return 0, 0, false
	}
	for _, c := range p[1:] {
		if c&0xc0 != 0x80 {
			return 0, 0, false
		}
		lo = lo<<6 | rune(c&0x3f)
	}
	hi = lo
	for range n - len(p) {
		lo, hi = lo<<6, hi<<6|0x3f
	}
	lo, hi = max(lo, min), minRune(hi, utf8.MaxRune)
	return lo, hi, lo <= hi
}

func minRune(a, b rune) rune {
	if a < b {
		return a
	}
	return b
}

// mayMatch reports whether rune instruction in could match a rune in
// [lo, hi] (conservatively true under case folding).
func mayMatch(in *syntax.Inst, lo, hi rune) bool {
	switch in.Op {
	case syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
		return true
	case syntax.InstRune1:
		return in.Rune[0] >= lo && in.Rune[0] <= hi
	case syntax.InstRune:
		if syntax.Flags(in.Arg)&syntax.FoldCase != 0 {
			return true
		}
		if len(in.Rune) == 1 {
			return in.Rune[0] >= lo && in.Rune[0] <= hi
		}
		for i := 0; i+1 < len(in.Rune); i += 2 {
			if in.Rune[i] <= hi && in.Rune[i+1] >= lo {
				return true
			}
		}
	}
	return false
}
