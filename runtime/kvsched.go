package runtime

import (
	"errors"
	"fmt"
	"slices"

	"github.com/memra-ai/memra/runtime/kv"
)

// How a queued sequence fared at admission (takePages).
type admission int

const (
	admitted admission = iota // it holds the pages of its prompt: it runs
	waiting                   // a running sequence is writing its next prompt page: it waits for the cache
	noPages                   // the pool cannot give its prompt's pages now
)

// The KV pages of a sequence follow one policy, which keeps every
// running sequence going and loses nothing:
//
//   - Admission reserves the pages of the prompt (less what the prefix
//     cache holds), and only while the pool keeps a page in reserve for
//     each running sequence beyond that (their next page as they decode).
//   - A running sequence takes a page whenever its tokens cross into one.
//     When the pool has none left (free or cached), the most recently
//     admitted running sequence is preempted: its full pages are published
//     to the prefix cache, all are released, and it goes back to the front
//     of the queue with its prompt and the tokens it generated. Readmitted,
//     it finds its pages in the cache (unless they were evicted meanwhile)
//     and recomputes the rest; its stream goes on where it stopped.
//   - Full pages are published to the prefix cache as soon as they are
//     written, prompt and generated tokens alike, and stay there after
//     their sequence ends until the pool needs them (least recently used
//     first).

// takePages admits s if it can: the longest run of its prompt pages the
// prefix cache holds (all but the last token's page at most: its logits
// must be computed), then fresh pages for the rest of its tokens. running
// sequences hold a page of reserve each. Called with e.mu held.
func (e *Engine) takePages(s *sequence, running int) admission {
	size := e.pool.PageSize()
	var hit []int32
	if s.keys != nil {
		// at least the last two tokens are computed: a prompt's last chunk
		// is never a lone token (promptChunk)
		reuse := max(0, len(s.all)-2) / size
		hit = e.pool.Lookup(s.keys, reuse)
		if n := len(hit); n < min(reuse, len(s.keys)) {
			if w := e.inflight[s.keys[n]]; w != nil && w != s {
				e.pool.Release(hit)
				return waiting
			}
		}
	}
	need := e.pool.PagesFor(len(s.all)) - len(hit)
	if e.pool.Available()-need < running {
		e.pool.Release(hit)
		return noPages
	}
	fresh, err := e.pool.Alloc(need)
	if err != nil {
		e.pool.Release(hit)
		return noPages
	}
	s.pages = append(hit, fresh...)
	s.cached = len(hit) * size
	s.published = len(hit)
	s.admitted = true
	if !s.started {
		s.started = true
		s.hit = s.cached
		e.stats.CachedTokens += int64(s.hit)
	}
	for i := len(hit); i < len(s.keys) && i*size+size <= len(s.req.Prompt); i++ {
		if e.inflight[s.keys[i]] == nil {
			e.inflight[s.keys[i]] = s
		}
	}
	return admitted
}

// growPages gives each running sequence the pages of the tokens it feeds
// next (at most one step's worth: one token decoding, its prompt pages
// were taken at admission), preempting the most recently admitted
// sequences while the pool has none. It returns the sequences that go on.
func (e *Engine) growPages(running []*sequence) []*sequence {
	for i := 0; i < len(running); i++ {
		s := running[i]
		// its next token, and its drafts after it
		need := e.pool.PagesFor(min(len(s.all), s.cached+1)+len(s.spec.drafts)) - len(s.pages)
		for need > 0 {
			more, err := e.pool.Alloc(need)
			if err == nil {
				s.pages = append(s.pages, more...)
				break
			}
			if !errors.Is(err, kv.ErrNoPages) {
				panic(fmt.Sprintf("BUG: page allocation: %v", err))
			}
			// the youngest sequence gives its pages back: s itself when it is
			// the youngest
			v := running[len(running)-1]
			v.spec.drafts = v.spec.drafts[:0]
			e.preempt(v)
			running = running[:len(running)-1]
			if v == s {
				break
			}
		}
	}
	return running
}

// preempt gives s's pages back and requeues it first, to resume from its
// tokens so far.
func (e *Engine) preempt(s *sequence) {
	e.dropPages(s)
	s.cached = 0
	e.mu.Lock()
	e.queue = slices.Insert(e.queue, 0, s)
	e.stats.Preemptions++
	e.mu.Unlock()
}

// publish records the pages s filled in its last step in the prefix cache.
func (e *Engine) publish(s *sequence) {
	if s.keys == nil {
		return
	}
	size := e.pool.PageSize()
	for ; s.published < s.cached/size; s.published++ {
		i := s.published
		for len(s.keys) <= i {
			prev := s.root
			if n := len(s.keys); n > 0 {
				prev = s.keys[n-1]
			}
			n := len(s.keys)
			s.keys = append(s.keys, prev.Next(s.all[n*size:(n+1)*size]))
		}
		e.pool.Publish(s.pages[i], s.keys[i])
		if e.inflight[s.keys[i]] == s {
			delete(e.inflight, s.keys[i])
		}
	}
}

// dropPages releases s's pages (published ones stay cached) and its
// backend sequence, and its claims on prompt pages others wait for.
func (e *Engine) dropPages(s *sequence) {
	if !s.admitted {
		return
	}
	e.b.Free(s.id)
	if e.spec.Draft != nil {
		e.spec.Draft.Free(s.id)
		s.spec.draftFed = 0
	}
	e.pool.Release(s.pages)
	s.pages, s.published, s.admitted = nil, 0, false
	for _, k := range s.keys {
		if e.inflight[k] == s {
			delete(e.inflight, k)
		}
	}
}
