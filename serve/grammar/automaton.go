package grammar

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"
)

// Grammar is a compiled constraint: a byte-level pushdown automaton.
//
// The program is a flat array of positions (elem). A rule is a list of
// alternatives, each a run of positions ended by eEnd; a position is a byte
// set (eTerm) or a call of a rule (eRef). A parse is a stack of positions:
// its top is the byte set the next byte must be in, the frames below are
// where to continue when the called rules end. Stacks are interned as
// (position, parent stack) nodes, so one stack is one int32, and an
// automaton state — every stack still alive after the bytes so far — is a
// sorted set of node ids, itself interned as a State. Calls in tail position
// push no frame, so loops (x*, recursion on the right) keep stacks flat.
// Transitions are memoised per (State, byte).
//
// A Grammar is safe for concurrent use; its tables grow with the states
// visited and are freed with it.
type Grammar struct {
	elems []elem
	rules [][]int32
	sets  []byteSet
	live  []bool // positions the rest of whose alternative can match
	root  int32
	names []string

	mu       sync.Mutex
	nodes    []stackNode
	nodeIdx  map[uint64]int32
	states   []*dstate
	stateIdx map[string]int32
	start    int32
	masks    map[*Vocabulary]*maskCache

	scratch  []int32
	visited  map[uint64]struct{}
	budget   int  // expansions left in this step
	overflow bool // the budget ran out: the state was truncated
}

// maxExpansions bounds the work of one step (and the size of a state):
// past it, the state keeps the parses found so far. Those are all real
// parses, so masks stay sound (never allow a wrong byte); they may
// allow fewer bytes than the grammar does. Grammars whose start state
// overflows are refused with ErrTooLarge.
const maxExpansions = 1 << 18

// stackNode is one interned stack: the position on top and the stack
// below it. Node 0 is the empty stack (the input may end here).
type stackNode struct {
	pos, parent, depth int32
}

// dstate is one interned automaton state.
type dstate struct {
	nodes  []int32 // sorted stack node ids; 0 means the input may end
	canEnd bool
	trans  *[256]int32 // next State + 1 per byte; 0: not computed yet
}

// State is an automaton state of one Grammar: compact and comparable
// (equal States are the same set of parses).
type State int32

// deadState is the state with no parse left.
const deadState = 0

// maxStackDepth bounds nesting: deeper parses are dropped.
const maxStackDepth = 4096

func newGrammar(elems []elem, rules [][]int32, sets []byteSet, live []bool, root int32, names []string) (*Grammar, error) {
	g := &Grammar{
		elems: elems, rules: rules, sets: sets, live: live, root: root, names: names,
		nodeIdx:  map[uint64]int32{},
		stateIdx: map[string]int32{},
		masks:    map[*Vocabulary]*maskCache{},
		visited:  map[uint64]struct{}{},
	}
	g.nodes = append(g.nodes, stackNode{pos: -1, parent: -1})
	g.internState(nil) // the dead state, id 0
	g.resetStep()
	for _, a := range g.rules[root] {
		g.expand(a, 0, 0)
	}
	if g.overflow {
		return nil, fmt.Errorf("%w: the start state has more than %d parses", ErrTooLarge, maxExpansions)
	}
	g.start = g.internState(g.scratch)
	return g, nil
}

func (g *Grammar) resetStep() {
	g.scratch = g.scratch[:0]
	clear(g.visited)
	g.budget, g.overflow = maxExpansions, false
}

// Start returns the state before any input.
func (g *Grammar) Start() State { return State(g.start) }

// Advance returns the state after byte c, and false when no parse accepts c.
func (g *Grammar) Advance(s State, c byte) (State, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.step(int32(s), c)
	return State(n), n != deadState
}

// CanEnd reports whether the input may end in state s.
func (g *Grammar) CanEnd(s State) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.states[s].canEnd
}

// Match reports whether the whole of input is in the grammar's language.
func (g *Grammar) Match(input []byte) bool {
	s, ok := g.Start(), true
	for _, c := range input {
		if s, ok = g.Advance(s, c); !ok {
			return false
		}
	}
	return g.CanEnd(s)
}

// step is Advance with g.mu held.
func (g *Grammar) step(s int32, c byte) int32 {
	st := g.states[s]
	if st.trans == nil {
		st.trans = new([256]int32)
	}
	if t := st.trans[c]; t != 0 {
		return t - 1
	}
	g.resetStep()
	for _, id := range st.nodes {
		if id == 0 {
			continue
		}
		n := g.nodes[id]
		if g.sets[g.elems[n.pos].arg].has(c) {
			g.expand(n.pos+1, n.parent, n.depth)
		}
	}
	next := g.internState(g.scratch)
	st.trans[c] = next + 1
	return next
}

// expand adds to g.scratch every stack reachable from position pos (above
// stack parent of the given depth) without consuming a byte.
func (g *Grammar) expand(pos, parent, depth int32) {
	key := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if _, seen := g.visited[key]; seen {
		return
	}
	g.visited[key] = struct{}{}
	if !g.live[pos] {
		return
	}
	if g.budget--; g.budget < 0 {
		g.overflow = true
		return
	}
	e := g.elems[pos]
	switch e.kind {
	case eTerm:
		if id, ok := g.internNode(pos, parent, depth); ok {
			g.scratch = append(g.scratch, id)
		}
	case eEnd:
		if parent == 0 {
			g.scratch = append(g.scratch, 0)
			return
		}
		p := g.nodes[parent]
		g.expand(p.pos, p.parent, p.depth)
	case eRef:
		ret, rdepth := parent, depth
		if g.elems[pos+1].kind != eEnd {
			var ok bool
			if ret, ok = g.internNode(pos+1, parent, depth); !ok {
				return
			}
			rdepth = depth + 1
		}
		for _, a := range g.rules[e.arg] {
			g.expand(a, ret, rdepth)
		}
	}
}

// internNode returns the id of stack (pos, parent), false past the depth
// limit.
func (g *Grammar) internNode(pos, parent, depth int32) (int32, bool) {
	if depth >= maxStackDepth {
		return 0, false
	}
	key := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if id, ok := g.nodeIdx[key]; ok {
		return id, true
	}
	id := int32(len(g.nodes))
	g.nodes = append(g.nodes, stackNode{pos: pos, parent: parent, depth: depth})
	g.nodeIdx[key] = id
	return id, true
}

// internState returns the id of the state made of the stacks ids (which it
// sorts and deduplicates in place).
func (g *Grammar) internState(ids []int32) int32 {
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var key string
	if len(ids) > 0 {
		key = unsafe.String((*byte)(unsafe.Pointer(&ids[0])), len(ids)*4)
	}
	if id, ok := g.stateIdx[key]; ok {
		return id
	}
	nodes := slices.Clone(ids)
	id := int32(len(g.states))
	g.states = append(g.states, &dstate{nodes: nodes, canEnd: len(nodes) > 0 && nodes[0] == 0})
	if len(nodes) > 0 {
		key = unsafe.String((*byte)(unsafe.Pointer(&nodes[0])), len(nodes)*4)
	}
	g.stateIdx[key] = id
	return id
}

// checkLeftRecursion fails when a rule can call itself before consuming a
// byte: the automaton would expand it forever.
func checkLeftRecursion(l *lowerer) error {
	nullable := make([]bool, len(l.rules))
	altNullable := func(start int32) bool {
		for p := start; ; p++ {
			switch e := l.elems[p]; e.kind {
			case eEnd:
				return true
			case eTerm:
				return false
			case eRef:
				if !nullable[e.arg] {
					return false
				}
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for r, alts := range l.rules {
			if nullable[r] {
				continue
			}
			for _, a := range alts {
				if altNullable(a) {
					nullable[r], changed = true, true
					break
				}
			}
		}
	}
	// Calls made before consuming a byte form a graph. A cycle through a
	// call in tail position only is harmless (it pushes no frame and the
	// expansion deduplicates it); a cycle with any other call would grow
	// the stack forever. Tarjan's algorithm finds the strongly connected
	// components; a non-tail edge inside one is left recursion.
	type edge struct {
		to   int32
		tail bool
	}
	out := make([][]edge, len(l.rules))
	for r, alts := range l.rules {
		for _, a := range alts {
			for p := a; l.elems[p].kind == eRef; p++ {
				c := l.elems[p].arg
				out[r] = append(out[r], edge{c, l.elems[p+1].kind == eEnd})
				if !nullable[c] {
					break
				}
			}
		}
	}
	index := make([]int32, len(l.rules))
	low := make([]int32, len(l.rules))
	comp := make([]int32, len(l.rules))
	onStack := make([]bool, len(l.rules))
	for i := range index {
		index[i] = -1
	}
	var stack []int32
	next, ncomp := int32(0), int32(0)
	var connect func(v int32)
	connect = func(v int32) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, e := range out[v] {
			if index[e.to] < 0 {
				connect(e.to)
				low[v] = min(low[v], low[e.to])
			} else if onStack[e.to] {
				low[v] = min(low[v], index[e.to])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = ncomp
				if w == v {
					break
				}
			}
			ncomp++
		}
	}
	for r := range l.rules {
		if index[r] < 0 {
			connect(int32(r))
		}
	}
	for r, es := range out {
		for _, e := range es {
			if !e.tail && comp[e.to] == comp[r] {
				return fmt.Errorf("%w: rule %q calls itself before consuming input", ErrLeftRecursion, ruleName(l.b.names[e.to]))
			}
		}
	}
	return nil
}

// ruleName is the user-facing name of a rule (auxiliary rules are shown
// as "(anonymous)").
func ruleName(n string) string {
	for i := 0; i < len(n); i++ {
		if n[i] == '#' {
			return "(anonymous)"
		}
	}
	return n
}
