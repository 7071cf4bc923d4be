package plugin

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync"
)

// TokenSource is the vocabulary a grammar plugin masks over;
// *tokenizer.Tokenizer satisfies it. It must be comparable (a pointer):
// instances are pooled per (plugin, TokenSource).
type TokenSource interface {
	VocabSize() int
	TokenBytes(id int32) []byte // empty for control tokens (never allowed)
	IsEOG(id int32) bool        // end-of-generation: allowed exactly when the grammar may end
}

// GrammarPlugin is a grammar implemented by a wasm module. NewMatcher
// gives each sequence its own Matcher (a handle inside a pooled instance).
// It is safe for concurrent use.
type GrammarPlugin struct {
	m *module

	mu     sync.Mutex
	pools  map[TokenSource]*vocabPool
	closed bool
}

// vocabPool is the instances of one plugin that hold one vocabulary.
type vocabPool struct {
	p       *GrammarPlugin
	payload []byte // memra_grammar_set_vocab's input
	size    int
	isEOG   []bool
	eog     []int32

	mu    sync.Mutex // guards insts, stats; taken after a gInstance's mu, never before
	insts []*gInstance
	stats Stats
}

// gInstance is a grammar instance; mu serialises calls into it.
type gInstance struct {
	mu      sync.Mutex
	in      *instance
	handles int
}

// LoadGrammarFile reads and loads a grammar plugin from path.
func (h *Host) LoadGrammarFile(ctx context.Context, name, path string) (*GrammarPlugin, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: grammar plugin %q: %v", ErrConfig, name, err)
	}
	return h.LoadGrammar(ctx, name, wasm)
}

// LoadGrammar compiles wasm and checks its exports and ABI version.
// Instances are started per vocabulary, on the first NewMatcher.
func (h *Host) LoadGrammar(ctx context.Context, name string, wasm []byte) (*GrammarPlugin, error) {
	m, err := h.compile(ctx, name, kindGrammar, wasm)
	if err != nil {
		return nil, err
	}
	in, err := m.checkVersion(ctx)
	if err != nil {
		m.close()
		return nil, err
	}
	in.kill()
	p := &GrammarPlugin{m: m, pools: map[TokenSource]*vocabPool{}}
	if err := h.track(p); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Name returns the name the plugin was loaded under.
func (p *GrammarPlugin) Name() string { return p.m.name }

// Stats sums the counters of every vocabulary's pool.
func (p *GrammarPlugin) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s Stats
	for _, vp := range p.pools {
		vp.mu.Lock()
		s.Live += vp.stats.Live
		s.Created += vp.stats.Created
		s.Discarded += vp.stats.Discarded
		s.Handles += vp.stats.Handles
		vp.mu.Unlock()
	}
	return s
}

// Close closes every instance and the compiled module; open Matchers fail
// from then on. It is idempotent.
func (p *GrammarPlugin) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	pools := p.pools
	p.mu.Unlock()
	for _, vp := range pools {
		vp.mu.Lock()
		insts := slices.Clone(vp.insts)
		vp.mu.Unlock()
		for _, gi := range insts {
			gi.mu.Lock()
			vp.drop(gi, false)
			gi.mu.Unlock()
		}
	}
	p.m.close()
	return nil
}

func (p *GrammarPlugin) pool(tok TokenSource) (*vocabPool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("%w: grammar plugin %q", ErrClosed, p.m.name)
	}
	if vp := p.pools[tok]; vp != nil {
		return vp, nil
	}
	n := tok.VocabSize()
	vp := &vocabPool{p: p, size: n, isEOG: make([]bool, n)}
	payload := binary.LittleEndian.AppendUint32(nil, uint32(n))
	for id := int32(0); int(id) < n; id++ {
		var b []byte
		if tok.IsEOG(id) {
			vp.isEOG[id] = true
			vp.eog = append(vp.eog, id)
		} else {
			b = tok.TokenBytes(id)
		}
		payload = binary.LittleEndian.AppendUint32(payload, uint32(len(b)))
		payload = append(payload, b...)
	}
	vp.payload = payload
	p.pools[tok] = vp
	return vp, nil
}

// words is the mask length in uint64 words.
func (vp *vocabPool) words() int { return (vp.size + 63) / 64 }

// start instantiates a new instance holding the vocabulary.
func (vp *vocabPool) start() (*gInstance, error) {
	m := vp.p.m
	in, err := m.instantiate(context.Background())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.host.lim.InitTimeout)
	defer cancel()
	ptr, err := in.write(ctx, vp.payload)
	if err == nil {
		var rc uint64
		if rc, err = in.call(ctx, expSetVocab, uint64(ptr), uint64(len(vp.payload))); err == nil {
			if int32(rc) != 0 {
				err = fmt.Errorf("%w: grammar plugin %q refused the vocabulary: %s", ErrPluginError, m.name, in.lastError(ctx))
			} else {
				_, err = in.call(ctx, expFree, uint64(ptr))
			}
		}
	}
	if err != nil {
		in.kill()
		return nil, err
	}
	return &gInstance{in: in}, nil
}

// acquire returns a live instance with room for one more handle, starting
// one when all are full and the pool may grow; gi.mu is held on return.
func (vp *vocabPool) acquire() (*gInstance, error) {
	lim := vp.p.m.host.lim
	for range 3 {
		vp.mu.Lock()
		var best *gInstance
		for _, gi := range vp.insts {
			if best == nil || gi.handles < best.handles {
				best = gi
			}
		}
		if best == nil || (best.handles >= lim.MaxHandles && len(vp.insts) < lim.MaxInstances) {
			gi, err := vp.start()
			if err != nil {
				vp.mu.Unlock()
				return nil, err
			}
			vp.insts = append(vp.insts, gi)
			vp.stats.Live++
			vp.stats.Created++
			best = gi
		}
		best.handles++ // reserve before unlocking so others spread out
		vp.stats.Handles++
		vp.mu.Unlock()
		best.mu.Lock()
		if !best.in.dead.Load() {
			return best, nil
		}
		best.mu.Unlock()
		vp.mu.Lock()
		best.handles--
		vp.stats.Handles--
		vp.mu.Unlock()
	}
	return nil, fmt.Errorf("%w: grammar plugin %q: instances keep dying", ErrPluginTrap, vp.p.m.name)
}

// release gives back a handle slot of gi. gi.mu must be held.
func (vp *vocabPool) release(gi *gInstance) {
	vp.mu.Lock()
	gi.handles--
	vp.stats.Handles--
	vp.mu.Unlock()
}

// drop removes a dead (or closing) instance from the pool. gi.mu must be
// held; failed says whether it is counted as discarded.
func (vp *vocabPool) drop(gi *gInstance, failed bool) {
	gi.in.kill()
	vp.mu.Lock()
	defer vp.mu.Unlock()
	if i := slices.Index(vp.insts, gi); i >= 0 {
		vp.insts = slices.Delete(vp.insts, i, i+1)
		vp.stats.Live--
		if failed {
			vp.stats.Discarded++
		}
	}
}
