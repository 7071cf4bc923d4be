package grammar

import (
	"fmt"
	"math"
	"math/bits"
)

// DefaultMaskCache is how many masks a (Grammar, Vocabulary) pair keeps:
// at 128k tokens a mask is 16 KiB, so the default bounds a pair at 8 MiB.
const DefaultMaskCache = 512

// maskCache is a bounded LRU of token masks keyed by automaton state.
type maskCache struct {
	cap        int
	entries    map[int32]*maskEntry
	head, tail *maskEntry // head: most recently used
}

type maskEntry struct {
	state      int32
	mask       []uint64
	prev, next *maskEntry
}

func (c *maskCache) get(s int32) *maskEntry {
	e := c.entries[s]
	if e != nil && c.head != e {
		c.unlink(e)
		c.pushFront(e)
	}
	return e
}

func (c *maskCache) put(s int32, words int) *maskEntry {
	var e *maskEntry
	if len(c.entries) >= c.cap && c.tail != nil {
		e = c.tail
		c.unlink(e)
		delete(c.entries, e.state)
	} else {
		e = &maskEntry{mask: make([]uint64, words)}
	}
	e.state = s
	c.entries[s] = e
	c.pushFront(e)
	return e
}

func (c *maskCache) unlink(e *maskEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *maskCache) pushFront(e *maskEntry) {
	e.next = c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
}

// Matcher follows one sequence through a Grammar and gives the tokens of a
// Vocabulary allowed next. Masks are computed by one walk of the token
// trie and cached per automaton state in an LRU shared by every Matcher of
// the same Grammar and Vocabulary. A Matcher is not safe for concurrent
// use; distinct Matchers are.
type Matcher struct {
	g     *Grammar
	v     *Vocabulary
	cache *maskCache
	state int32
	ended bool // an end-of-generation token was accepted
}

// NewMatcher returns a Matcher at the start of g.
func NewMatcher(g *Grammar, v *Vocabulary) *Matcher {
	g.mu.Lock()
	c := g.masks[v]
	if c == nil {
		c = &maskCache{cap: DefaultMaskCache, entries: map[int32]*maskEntry{}}
		g.masks[v] = c
	}
	g.mu.Unlock()
	return &Matcher{g: g, v: v, cache: c, state: g.start}
}

// State returns the automaton state the Matcher is in.
func (m *Matcher) State() State { return State(m.state) }

// CanEnd reports whether the output so far is complete, so an
// end-of-generation token is allowed.
func (m *Matcher) CanEnd() bool {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.g.states[m.state].canEnd
}

// Done reports whether nothing but end-of-generation can follow: an EOG
// token was accepted, or the output is complete and no byte may extend it.
func (m *Matcher) Done() bool {
	if m.ended {
		return true
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	st := m.g.states[m.state]
	return st.canEnd && len(st.nodes) == 1
}

// mask returns the cached mask of the current state, computing it on a
// miss. g.mu must be held; the slice is valid until g.mu is released.
func (m *Matcher) mask() []uint64 {
	if e := m.cache.get(m.state); e != nil {
		return e.mask
	}
	e := m.cache.put(m.state, m.v.Words())
	m.v.walk(m.g, m.state, e.mask)
	return e.mask
}

// Mask writes into dst (at least Vocabulary.Words() words) the set of
// tokens allowed next: bit id%64 of dst[id/64] is set when token id is.
// After an end-of-generation token nothing is allowed.
func (m *Matcher) Mask(dst []uint64) {
	if m.ended {
		clear(dst)
		return
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	copy(dst, m.mask())
}

// Allowed reports whether token may come next.
func (m *Matcher) Allowed(token int32) bool {
	if m.ended || token < 0 || int(token) >= m.v.size {
		return false
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.mask()[token>>6]&(1<<(token&63)) != 0
}

// Apply sets to -Inf the logit of every token not allowed next, including
// ids past the vocabulary (padded output layers).
func (m *Matcher) Apply(logits []float32) {
	negInf := float32(math.Inf(-1))
	if m.ended {
		for i := range logits {
			logits[i] = negInf
		}
		return
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	mask := m.mask()
	n := min(len(logits), m.v.size)
	for w := 0; w*64 < n; w++ {
		base := w * 64
		switch word := mask[w]; {
		case word == math.MaxUint64:
		case word == 0 && base+64 <= n:
			for i := base; i < base+64; i++ {
				logits[i] = negInf
			}
		default:
			for z := ^word; z != 0; z &= z - 1 {
				if i := base + bits.TrailingZeros64(z); i < n {
					logits[i] = negInf
				}
			}
		}
	}
	for i := n; i < len(logits); i++ {
		logits[i] = negInf
	}
}

// Accept advances past token. It fails with ErrRejected (and does not
// move) when the token is not allowed.
func (m *Matcher) Accept(token int32) error {
	if m.ended {
		return fmt.Errorf("%w: token %d after end of generation", ErrRejected, token)
	}
	if token < 0 || int(token) >= m.v.size {
		return fmt.Errorf("%w: token %d outside the vocabulary of %d", ErrRejected, token, m.v.size)
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	if m.v.isEOG[token] {
		if !m.g.states[m.state].canEnd {
			return fmt.Errorf("%w: end-of-generation token %d before the output is complete", ErrRejected, token)
		}
		m.ended = true
		return nil
	}
	b := m.v.tokBytes[token]
	if len(b) == 0 {
		return fmt.Errorf("%w: control token %d", ErrRejected, token)
	}
	s := m.state
	for i, c := range b {
		if s = m.g.step(s, c); s == deadState {
			return fmt.Errorf("%w: token %d (%q) fails at byte %d", ErrRejected, token, b, i)
		}
	}
	m.state = s
	return nil
}

// SamplerMask adapts a Matcher to the engine's runtime.Mask hook (Apply
// before sampling, Accept after). The hook's Accept returns no error, so a
// rejected token is recorded (Err) and from then on only end-of-generation
// tokens are allowed, ending the generation.
type SamplerMask struct {
	m   *Matcher
	err error
}

// NewSamplerMask returns the runtime.Mask of a new Matcher over g and v.
func NewSamplerMask(g *Grammar, v *Vocabulary) *SamplerMask {
	return &SamplerMask{m: NewMatcher(g, v)}
}

// Matcher returns the underlying Matcher.
func (s *SamplerMask) Matcher() *Matcher { return s.m }

// Err returns the first Accept failure, if any.
func (s *SamplerMask) Err() error { return s.err }

// Apply implements runtime.Mask.
func (s *SamplerMask) Apply(logits []float32) {
	if s.err == nil {
		s.m.Apply(logits)
		return
	}
	negInf := float32(math.Inf(-1))
	for i := range logits {
		if i >= s.m.v.size || !s.m.v.isEOG[i] {
			logits[i] = negInf
		}
	}
}

// Accept implements runtime.Mask.
func (s *SamplerMask) Accept(token int32) {
	if s.err != nil {
		return
	}
	if err := s.m.Accept(token); err != nil {
		s.err = err
	}
}
