package kv

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChainKeys(t *testing.T) {
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	a, b := Root("tenant a"), Root("tenant b")
	require.NotEqual(t, a, b)
	ka := Chain(a, toks, 4)
	require.Len(t, ka, 2) // the partial page has no key
	require.Equal(t, a.Next(toks[:4]), ka[0])
	require.Equal(t, ka[0].Next(toks[4:8]), ka[1])
	require.NotEqual(t, ka, Chain(b, toks, 4), "scopes never share keys")
	// a page's key depends on every token before it
	other := append([]int32{0}, toks[1:]...)
	kb := Chain(a, other, 4)
	require.NotEqual(t, ka[1], kb[1])
	require.Equal(t, ka[:0], Chain(a, toks[:3], 4))
}

func TestPoolAllocRelease(t *testing.T) {
	p, err := NewPool(4, 16)
	require.NoError(t, err)
	got, err := p.Alloc(3)
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 2}, got)
	_, err = p.Alloc(2)
	require.ErrorIs(t, err, ErrNoPages)
	require.Equal(t, 1, p.Available(), "a failed Alloc takes nothing")
	p.Release(got[:2])
	require.Equal(t, 3, p.Available())
	st := p.Stats()
	require.Equal(t, Stats{Pages: 4, PageSize: 16, Used: 1, Free: 3}, st)
	require.Panics(t, func() { p.Release(got[:1]) }, "a double release is a bug")
	_, err = NewPool(0, 16)
	require.Error(t, err)
}

func TestPoolPrefixCache(t *testing.T) {
	p, err := NewPool(6, 2)
	require.NoError(t, err)
	toks := []int32{10, 11, 12, 13, 14, 15, 16}
	keys := Chain(Root(""), toks, 2)
	require.Len(t, keys, 3)

	// sequence 1 writes the pages and publishes them
	s1, err := p.Alloc(4)
	require.NoError(t, err)
	for i, k := range keys {
		require.True(t, p.Publish(s1[i], k))
	}
	require.False(t, p.Publish(s1[0], keys[0]), "already published")
	require.Equal(t, 3, p.Cached(keys))

	// sequence 2 shares the first two pages while sequence 1 runs
	s2 := p.Lookup(keys, 2)
	require.Equal(t, s1[:2], s2)
	require.Equal(t, 2, p.Stats().Shared)
	// a second page under a published key stays private
	dup, err := p.Alloc(1)
	require.NoError(t, err)
	require.False(t, p.Publish(dup[0], keys[2]))
	p.Release(dup)
	require.Equal(t, 2, p.Stats().Free, "the private duplicate is freed")

	// sequence 1 ends: its published pages are cached, the partial page freed
	p.Release(s1)
	st := p.Stats()
	require.Equal(t, 1, st.Cached) // page 2: pages 0 and 1 are still held by sequence 2
	require.Equal(t, 2, st.Used)
	require.Equal(t, 3, st.Free)
	p.Release(s2)
	require.Equal(t, 3, p.Stats().Cached)
	require.Equal(t, 6, p.Available())

	// a third sequence finds the whole chain, in order
	s3 := p.Lookup(keys, 10)
	require.Equal(t, s1[:3], s3)
	p.Release(s3)
	st = p.Stats()
	require.Equal(t, int64(5), st.Hits)
	require.Equal(t, int64(0), st.Misses)

	// Alloc takes the free pages first, then evicts least recently used:
	// s3 released pages 0, 1, 2 in that order, so 0 goes first
	all, err := p.Alloc(3)
	require.NoError(t, err)
	require.NotContains(t, all, s1[0])
	require.NotContains(t, all, s1[1])
	require.NotContains(t, all, s1[2])
	require.Equal(t, 3, p.Cached(keys))
	more, err := p.Alloc(1)
	require.NoError(t, err)
	require.Equal(t, []int32{s1[0]}, more)
	require.Equal(t, 0, p.Cached(keys), "the chain's first page is gone, so is every lookup")
	require.Equal(t, int64(1), p.Stats().Evictions)
	require.Empty(t, p.Lookup(keys, 3))
	require.Equal(t, int64(3), p.Stats().Misses)
}

func TestPoolClear(t *testing.T) {
	p, err := NewPool(3, 1)
	require.NoError(t, err)
	keys := Chain(Root("x"), []int32{1, 2}, 1)
	ids, err := p.Alloc(2)
	require.NoError(t, err)
	p.Publish(ids[0], keys[0])
	p.Publish(ids[1], keys[1])
	p.Release(ids[:1])
	p.Clear()
	require.Equal(t, 0, p.Cached(keys))
	p.Release(ids[1:])
	require.Equal(t, Stats{Pages: 3, PageSize: 1, Free: 3}, p.Stats())
}

// TestPoolRandom runs random sequences of allocations, lookups, publishes
// and releases against a model of the pool's accounting: every page is
// exactly one of held, cached or free, a held page is never handed out by
// Alloc, and releasing everything leaves no page used.
func TestPoolRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	p, err := NewPool(40, 4)
	require.NoError(t, err)
	type seq struct{ pages []int32 }
	var live []*seq
	held := map[int32]int{}
	vocab := []int32{1, 2}
	for range 5000 {
		switch op := r.IntN(4); {
		case op == 0 || len(live) == 0:
			toks := make([]int32, 4*(1+r.IntN(4)))
			for i := range toks {
				toks[i] = vocab[r.IntN(len(vocab))]
			}
			keys := Chain(Root(""), toks, 4)
			hit := p.Lookup(keys, len(keys)-1)
			fresh, err := p.Alloc(len(keys) - len(hit))
			if err != nil {
				p.Release(hit)
				continue
			}
			for _, id := range fresh {
				require.Zero(t, held[id], "Alloc handed out a held page")
			}
			s := &seq{pages: append(hit, fresh...)}
			for i, id := range s.pages {
				held[id]++
				if r.IntN(2) == 0 {
					p.Publish(id, keys[i])
				}
			}
			live = append(live, s)
		default:
			i := r.IntN(len(live))
			for _, id := range live[i].pages {
				held[id]--
			}
			p.Release(live[i].pages)
			live = append(live[:i], live[i+1:]...)
		}
		st := p.Stats()
		n := 0
		for _, c := range held {
			if c > 0 {
				n++
			}
		}
		require.Equal(t, n, st.Used)
		require.Equal(t, st.Pages, st.Used+st.Cached+st.Free)
	}
	for _, s := range live {
		p.Release(s.pages)
	}
	require.Zero(t, p.Stats().Used)
}
