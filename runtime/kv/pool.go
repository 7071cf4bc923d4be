// Package kv manages a model's KV-cache memory as a pool of fixed-size
// pages. A sequence holds a page table: page i of it stores positions
// [i·PageSize, (i+1)·PageSize). The backends store the keys and values
// (runtime/cpu in host memory, runtime/cuda on the GPU) and read them
// through the page tables; this package only decides which page holds
// what.
//
// A full page can be published under a Key, the hash of its tokens chained
// to the key of the page before it, rooted in a tenant scope (Root). A
// published page outlives the sequence that wrote it: while unreferenced
// it waits in a least-recently-used list, and Lookup hands it to a later
// sequence whose tokens begin the same way in the same scope (the prefix
// cache). Alloc evicts the oldest such page when no free page is left.
//
// A Pool is safe for concurrent use.
package kv

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// ErrNoPages: the pool cannot give the pages asked for, even after
// evicting every unreferenced cached page.
var ErrNoPages = errors.New("kv: not enough free KV pages")

// Key names the contents of a full page: its tokens and, through the chain
// of parent keys, every token before them, in one tenant scope.
type Key [16]byte

// Root is the key a tenant scope's chains start from. Two scopes never
// share a page: their chains differ from the first page on.
func Root(scope string) Key {
	h := sha256.New()
	h.Write([]byte("memra kv scope\x00"))
	h.Write([]byte(scope))
	var k Key
	copy(k[:], h.Sum(nil))
	return k
}

// Next is the key of a page holding tokens after the page (or root) k.
func (k Key) Next(tokens []int32) Key {
	h := sha256.New()
	h.Write(k[:])
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	var n Key
	copy(n[:], h.Sum(nil))
	return n
}

// Chain returns the keys of the full pages of tokens from root: key i
// names tokens [0, (i+1)·size).
func Chain(root Key, tokens []int32, size int) []Key {
	keys := make([]Key, 0, len(tokens)/size)
	k := root
	for i := 0; i+size <= len(tokens); i += size {
		k = k.Next(tokens[i : i+size])
		keys = append(keys, k)
	}
	return keys
}

// page is the pool's record of one page.
type page struct {
	ref    int32 // sequences holding it
	cached bool  // published: key maps to it in the index
	key    Key
	// prev and next link the unreferenced cached pages, least recently
	// used first (-1: none); only meaningful while ref == 0 && cached
	prev, next int32
}

// Stats is a snapshot of a pool.
type Stats struct {
	Pages    int // all pages
	PageSize int // positions a page
	Used     int // referenced by at least one sequence
	Cached   int // published and unreferenced: reusable by Lookup, evictable
	Free     int // neither
	Shared   int // referenced by two sequences or more
	// Hits, Misses and Evictions count pages since the pool was made:
	// pages Lookup found, pages it was asked past the last hit for, and
	// cached pages Alloc took back.
	Hits, Misses, Evictions int64
}

// Pool is the page allocator and prefix-cache index of one model's KV
// memory.
type Pool struct {
	mu         sync.Mutex
	size       int
	pages      []page
	free       []int32 // stack of pages neither referenced nor cached
	index      map[Key]int32
	head, tail int32 // the LRU list of unreferenced cached pages
	cached     int
	stats      Stats
}

// NewPool returns a pool of n pages of size positions each.
func NewPool(n, size int) (*Pool, error) {
	if n < 1 || size < 1 {
		return nil, fmt.Errorf("kv: a pool of %d pages of %d positions", n, size)
	}
	p := &Pool{size: size, pages: make([]page, n), free: make([]int32, n), index: map[Key]int32{}, head: -1, tail: -1}
	for i := range p.free {
		p.free[i] = int32(n - 1 - i) // page 0 is taken first
		p.pages[i].prev, p.pages[i].next = -1, -1
	}
	return p, nil
}

// PageSize returns the positions a page holds.
func (p *Pool) PageSize() int { return p.size }

// Pages returns the pool's page count.
func (p *Pool) Pages() int { return len(p.pages) }

// PagesFor returns the pages that hold n positions.
func (p *Pool) PagesFor(n int) int { return (n + p.size - 1) / p.size }

// Available returns how many pages Alloc can give now: free ones and
// unreferenced cached ones.
func (p *Pool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) + p.cached
}

// Alloc returns n fresh pages, each referenced once, taking free pages
// first and then evicting the least recently used cached pages. It takes
// nothing when it cannot give all n.
func (p *Pool) Alloc(n int) ([]int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > len(p.free)+p.cached {
		return nil, fmt.Errorf("%w: %d asked, %d free and %d cached of %d", ErrNoPages, n, len(p.free), p.cached, len(p.pages))
	}
	out := make([]int32, n)
	for i := range out {
		var id int32
		if k := len(p.free); k > 0 {
			id = p.free[k-1]
			p.free = p.free[:k-1]
		} else {
			id = p.head
			p.unlink(id)
			delete(p.index, p.pages[id].key)
			p.pages[id].cached = false
			p.stats.Evictions++
		}
		p.pages[id].ref = 1
		out[i] = id
	}
	return out, nil
}

// Lookup returns the longest run of published pages whose keys are
// keys[0], keys[1], …, at most max of them, each now referenced once more
// by the caller. A lookup counts the pages it found as hits and those it
// was asked past them (up to max) as misses.
func (p *Pool) Lookup(keys []Key, max int) []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int32
	for _, k := range keys[:min(max, len(keys))] {
		id, ok := p.index[k]
		if !ok {
			break
		}
		pg := &p.pages[id]
		if pg.ref == 0 {
			p.unlink(id)
		}
		pg.ref++
		out = append(out, id)
	}
	p.stats.Hits += int64(len(out))
	p.stats.Misses += int64(min(max, len(keys)) - len(out))
	return out
}

// Cached reports how many of keys, from the first, name published pages
// (without taking them).
func (p *Pool) Cached(keys []Key) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range keys {
		if _, ok := p.index[k]; !ok {
			return i
		}
	}
	return len(keys)
}

// Publish records that page id, referenced by the caller and full, holds
// the tokens key names, so that Lookup can hand it out. It reports false
// (and changes nothing) when another page already holds key or id is
// published already: the caller's page then stays private and is freed on
// its last Release.
func (p *Pool) Publish(id int32, key Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pg := &p.pages[id]
	if pg.ref <= 0 {
		panic(fmt.Sprintf("BUG: kv: publishing page %d, which nobody holds", id))
	}
	if pg.cached {
		return false
	}
	if _, dup := p.index[key]; dup {
		return false
	}
	pg.cached, pg.key = true, key
	p.index[key] = id
	return true
}

// Release drops one reference to each page of ids. A page nobody holds
// any more joins the cached pages (most recently used) when it is
// published, and the free pages otherwise.
func (p *Pool) Release(ids []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		pg := &p.pages[id]
		if pg.ref <= 0 {
			panic(fmt.Sprintf("BUG: kv: page %d released more often than taken", id))
		}
		pg.ref--
		if pg.ref > 0 {
			continue
		}
		if pg.cached {
			p.pushBack(id)
		} else {
			p.free = append(p.free, id)
		}
	}
}

// Clear evicts every unreferenced cached page, and unpublishes the
// referenced ones (they are freed on their last Release): nothing can be
// looked up afterwards.
func (p *Pool) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := p.head; id >= 0; {
		next := p.pages[id].next
		p.pages[id].cached = false
		p.pages[id].prev, p.pages[id].next = -1, -1
		p.free = append(p.free, id)
		id = next
	}
	p.head, p.tail, p.cached = -1, -1, 0
	for _, id := range p.index {
		p.pages[id].cached = false
	}
	clear(p.index)
}

// Stats returns a snapshot of the pool.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Pages, st.PageSize, st.Cached, st.Free = len(p.pages), p.size, p.cached, len(p.free)
	st.Used = len(p.pages) - p.cached - len(p.free)
	for i := range p.pages {
		if p.pages[i].ref > 1 {
			st.Shared++
		}
	}
	return st
}

// FreePages returns the pages neither referenced nor cached: no sequence
// may read them (tests poison them to prove it).
func (p *Pool) FreePages() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int32(nil), p.free...)
}

// pushBack appends id to the LRU list (most recently used).
func (p *Pool) pushBack(id int32) {
	pg := &p.pages[id]
	pg.prev, pg.next = p.tail, -1
	if p.tail >= 0 {
		p.pages[p.tail].next = id
	} else {
		p.head = id
	}
	p.tail = id
	p.cached++
}

// unlink takes id out of the LRU list.
func (p *Pool) unlink(id int32) {
	pg := &p.pages[id]
	if pg.prev >= 0 {
		p.pages[pg.prev].next = pg.next
	} else {
		p.head = pg.next
	}
	if pg.next >= 0 {
		p.pages[pg.next].prev = pg.prev
	} else {
		p.tail = pg.prev
	}
	pg.prev, pg.next = -1, -1
	p.cached--
}
