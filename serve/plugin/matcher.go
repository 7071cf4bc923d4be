package plugin

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"runtime"

	memra "github.com/memra-ai/memra/runtime"
)

var _ memra.Mask = (*Matcher)(nil)

// Matcher is one sequence's grammar state in a plugin: a handle inside a
// pooled instance. It implements the sampler's mask hook (runtime.Mask):
// Apply sets to -Inf every token the plugin's mask does not allow, and
// end-of-generation tokens unless the grammar may end here; Accept records
// the sampled token, which reaches the plugin at the next Apply.
//
// The hook returns no errors, so a failure (the plugin rejected a token,
// trapped or timed out) is recorded (Err) and from then on only
// end-of-generation tokens are allowed, ending the generation. When another
// sequence's call kills the shared instance, the Matcher replays its tokens
// into a fresh instance and goes on.
//
// Close frees the handle; call it when the generation ends (a cleanup
// frees it too if the Matcher is dropped unclosed). A Matcher is used from
// one goroutine at a time.
type Matcher struct {
	vp      *vocabPool
	source  string
	b       *binding
	history []int32 // text tokens accepted
	sent    int     // how many of history the bound handle has seen
	mayEnd  bool
	ended   bool
	err     error
	saved   []float32 // EOG logits kept across the mask
	cleanup runtime.Cleanup
}

// binding is where the Matcher's handle lives; kept apart from Matcher so
// the cleanup can free it.
type binding struct {
	vp *vocabPool
	gi *gInstance
	h  int32
}

// NewMatcher starts a sequence of the grammar source over tok's
// vocabulary. A source the plugin refuses gives ErrPluginError with the
// plugin's message.
func (p *GrammarPlugin) NewMatcher(tok TokenSource, source string) (*Matcher, error) {
	vp, err := p.pool(tok)
	if err != nil {
		return nil, err
	}
	m := &Matcher{vp: vp, source: source, b: &binding{vp: vp}}
	if err := m.bind(); err != nil {
		return nil, err
	}
	m.cleanup = runtime.AddCleanup(m, (*binding).free, m.b)
	return m, nil
}

// bind creates the handle in a live instance and replays history into it.
// On return b.gi.mu is not held.
func (m *Matcher) bind() error {
	gi, err := m.vp.acquire()
	if err != nil {
		return err
	}
	defer gi.mu.Unlock()
	lim := m.vp.p.m.host.lim
	ctx, cancel := context.WithTimeout(context.Background(), lim.StepTimeout)
	defer cancel()
	h, err := m.newHandle(ctx, gi)
	if err != nil {
		m.vp.release(gi)
		return err
	}
	m.b.gi, m.b.h, m.sent = gi, h, 0
	return nil
}

func (m *Matcher) newHandle(ctx context.Context, gi *gInstance) (int32, error) {
	in := gi.in
	ptr, err := in.write(ctx, []byte(m.source))
	if err == nil {
		var v uint64
		if v, err = in.call(ctx, expGrammarNew, uint64(ptr), uint64(len(m.source))); err == nil {
			if h := int32(v); h == 0 {
				err = fmt.Errorf("%w: grammar plugin %q: %s", ErrPluginError, m.vp.p.m.name, in.lastError(ctx))
			} else if _, err = in.call(ctx, expFree, uint64(ptr)); err == nil {
				return h, nil
			}
		}
	}
	if in.dead.Load() {
		m.vp.drop(gi, true)
	}
	return 0, err
}

// Err returns the failure that ended the sequence, if any.
func (m *Matcher) Err() error { return m.err }

// MayEnd reports whether, at the last Apply, the output could end.
func (m *Matcher) MayEnd() bool { return m.mayEnd }

// Close frees the handle; it is idempotent.
func (m *Matcher) Close() {
	m.cleanup.Stop()
	m.b.free()
}

func (b *binding) free() {
	gi := b.gi
	if gi == nil {
		return
	}
	b.gi = nil
	gi.mu.Lock()
	defer gi.mu.Unlock()
	if !gi.in.dead.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), b.vp.p.m.host.lim.StepTimeout)
		_, err := gi.in.call(ctx, expGrammarFree, uint64(b.h))
		cancel()
		if err != nil {
			b.vp.drop(gi, true)
		}
	}
	b.vp.release(gi)
}

func (m *Matcher) fail(err error) {
	if m.err == nil {
		m.err = err
	}
	m.b.free()
}

// Apply implements runtime.Mask.
func (m *Matcher) Apply(logits []float32) {
	if m.err != nil || m.ended {
		m.onlyEOG(logits)
		return
	}
	if gi := m.b.gi; gi == nil || gi.in.dead.Load() {
		m.b.free() // the instance died under another sequence: start over
		if err := m.bind(); err != nil {
			m.fail(err)
			m.onlyEOG(logits)
			return
		}
	}
	gi := m.b.gi
	gi.mu.Lock()
	err := m.step(gi, logits)
	gi.mu.Unlock()
	if err != nil {
		m.fail(err)
		m.onlyEOG(logits)
	}
}

// step sends the tokens the handle has not seen, then applies the mask of
// the state reached. gi.mu is held.
func (m *Matcher) step(gi *gInstance, logits []float32) error {
	in, name := gi.in, m.vp.p.m.name
	if in.dead.Load() {
		return fmt.Errorf("%w: grammar plugin %q: instance discarded", ErrPluginTrap, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.vp.p.m.host.lim.StepTimeout)
	defer cancel()
	var res uint64
	for {
		tok := int32(-1)
		if m.sent < len(m.history) {
			tok = m.history[m.sent]
		}
		v, err := in.call(ctx, expGrammarStep, uint64(m.b.h), uint64(uint32(tok)))
		if err != nil {
			m.vp.drop(gi, true)
			return err
		}
		if flags, _ := unpack(v); flags&flagError != 0 {
			return fmt.Errorf("%w: grammar plugin %q: %s", ErrPluginError, name, in.lastError(ctx))
		}
		res = v
		if tok < 0 {
			break
		}
		m.sent++
		if m.sent == len(m.history) {
			break
		}
	}
	flags, ptr := unpack(res)
	m.mayEnd = flags&flagMayEnd != 0
	words := m.vp.words()
	view, err := in.read("mask", ptr, uint32(words*8))
	if err != nil {
		m.vp.drop(gi, true)
		return err
	}
	m.applyMask(view, logits)
	return nil
}

// applyMask sets to -Inf the logits of tokens whose bit is clear in the
// little-endian u64 words of view, EOG tokens unless the output may end,
// and ids past the vocabulary.
func (m *Matcher) applyMask(view []byte, logits []float32) {
	negInf := float32(math.Inf(-1))
	n := min(len(logits), m.vp.size)
	m.saved = m.saved[:0]
	for _, id := range m.vp.eog {
		if int(id) < n {
			m.saved = append(m.saved, logits[id])
		}
	}
	for w := 0; w*64 < n; w++ {
		word := binary.LittleEndian.Uint64(view[w*8:])
		if word == math.MaxUint64 {
			continue
		}
		base := w * 64
		if word == 0 && base+64 <= n {
			for i := base; i < base+64; i++ {
				logits[i] = negInf
			}
			continue
		}
		for z := ^word; z != 0; z &= z - 1 {
			if i := base + bits.TrailingZeros64(z); i < n {
				logits[i] = negInf
			}
		}
	}
	j := 0
	for _, id := range m.vp.eog {
		if int(id) < n {
			if m.mayEnd {
				logits[id] = m.saved[j]
			} else {
				logits[id] = negInf
			}
			j++
		}
	}
	for i := n; i < len(logits); i++ {
		logits[i] = negInf
	}
}

// onlyEOG leaves only end-of-generation tokens possible.
func (m *Matcher) onlyEOG(logits []float32) {
	negInf := float32(math.Inf(-1))
	for i := range logits {
		if i >= m.vp.size || !m.vp.isEOG[i] {
			logits[i] = negInf
		}
	}
}

// Accept implements runtime.Mask. A text token is sent to the plugin at the
// next Apply (which fails the sequence if the plugin rejects it); an
// end-of-generation token ends the sequence, and fails it when the grammar
// could not end there.
func (m *Matcher) Accept(token int32) {
	if m.err != nil || m.ended {
		return
	}
	switch {
	case token < 0 || int(token) >= m.vp.size:
		m.fail(fmt.Errorf("%w: grammar plugin %q: token %d outside the vocabulary of %d", ErrPluginError, m.vp.p.m.name, token, m.vp.size))
	case m.vp.isEOG[token]:
		m.ended = true
		if !m.mayEnd {
			m.fail(fmt.Errorf("%w: grammar plugin %q: end of generation before the grammar is complete", ErrPluginError, m.vp.p.m.name))
		}
	default:
		m.history = append(m.history, token)
	}
}
