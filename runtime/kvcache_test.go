package runtime_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// pagedStories is the embedded stories260K model on the CPU backend behind
// an engine, with the backend (for its pool and page poisoning).
func pagedStories(t *testing.T, opts cpu.Options, cfg runtime.EngineConfig) (*runtime.Engine, *cpu.Backend) {
	t.Helper()
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	if opts.Threads == 0 {
		opts.Threads = 2
	}
	b, err := cpu.New(m, opts)
	require.NoError(t, err)
	e := runtime.NewEngine(b, m.Tokenizer, cfg)
	t.Cleanup(func() { e.Close() })
	return e, b
}

// storyPrompt is a prompt of about n tokens of real text.
func storyPrompt(e *runtime.Engine, n int) []int32 {
	text := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. " +
		"One day, she saw a big red ball under a tree. She wanted to play with it, but it was too high. "
	ids := e.Tokenizer().Encode(text+text+text+text, true, false)
	return ids[:min(n, len(ids))]
}

// run submits req and returns its tokens and last event.
func run(t *testing.T, e *runtime.Engine, req runtime.Request) ([]int32, runtime.Event) {
	t.Helper()
	ch, err := e.Submit(context.Background(), req)
	require.NoError(t, err)
	_, ids, last := generate(t, ch)
	return ids, last
}

// TestPrefixCacheReuse: a second request with the same prompt reuses its
// full pages (all but the last token's page at most), a request of another
// scope reuses nothing, and the greedy output is the same token for token
// whether the prompt came from the cache or was computed cold.
func TestPrefixCacheReuse(t *testing.T) {
	e, b := pagedStories(t, cpu.Options{}, runtime.EngineConfig{})
	size := b.KVPool().PageSize()
	prompt := storyPrompt(e, 70)
	req := runtime.Request{Prompt: prompt, MaxTokens: 20, CacheScope: "tenant A"}

	cold, first := run(t, e, req)
	require.Zero(t, first.Usage.CachedTokens)
	warm, second := run(t, e, req)
	require.Equal(t, (len(prompt)-1)/size*size, second.Usage.CachedTokens)
	require.Equal(t, cold, warm, "greedy output from the cache equals the cold prefill")

	other := req
	other.CacheScope = "tenant B"
	b2, third := run(t, e, other)
	require.Zero(t, third.Usage.CachedTokens, "another scope never sees the pages")
	require.Equal(t, cold, b2)

	// a prompt whose whole length is full pages still computes its last
	// token: it reuses all its pages but that one (its first run, too,
	// finds them: they begin the longer prompt)
	exact := runtime.Request{Prompt: prompt[:4*size], MaxTokens: 5, CacheScope: "tenant A"}
	for range 2 {
		_, ev := run(t, e, exact)
		require.Equal(t, 3*size, ev.Usage.CachedTokens)
	}

	st := e.Stats()
	require.Zero(t, st.KVPagesUsed, "nothing runs: no page is held")
	require.Positive(t, st.KVPagesCached)
	require.EqualValues(t, second.Usage.CachedTokens+2*3*size, st.CachedTokens)

	// the same engine without the cache computes every prompt
	e2, _ := pagedStories(t, cpu.Options{}, runtime.EngineConfig{NoPrefixCache: true})
	run(t, e2, req)
	off, ev2 := run(t, e2, req)
	require.Zero(t, ev2.Usage.CachedTokens)
	require.Equal(t, cold, off)
	require.Zero(t, e2.Stats().KVPagesCached)
}

// TestConversationReuse: the next turn of a chat, whose prompt extends the
// last prompt with the reply and a new message, reuses the pages of both;
// a rewritten history reuses its longest common prefix.
func TestConversationReuse(t *testing.T) {
	e, b := pagedStories(t, cpu.Options{}, runtime.EngineConfig{})
	size := b.KVPool().PageSize()
	p1 := storyPrompt(e, 40)
	out1, _ := run(t, e, runtime.Request{Prompt: p1, MaxTokens: 30, IgnoreEOS: true})
	require.Len(t, out1, 30)
	// every token fed (the prompt and all replies but the last) is in full pages
	fed := len(p1) + len(out1) - 1
	p2 := append(append(append([]int32{}, p1...), out1...), storyPrompt(e, 50)[1:]...)
	cold2, _ := run(t, pagedEngineNoCache(t), runtime.Request{Prompt: p2, MaxTokens: 10})
	out2, ev := run(t, e, runtime.Request{Prompt: p2, MaxTokens: 10})
	require.Equal(t, fed/size*size, ev.Usage.CachedTokens)
	require.Equal(t, cold2, out2)

	// history rewritten from token 20 on: the pages before it are reused
	p3 := append([]int32{}, p2...)
	p3[20] = p3[21]
	_, ev3 := run(t, e, runtime.Request{Prompt: p3, MaxTokens: 5})
	require.Equal(t, 20/size*size, ev3.Usage.CachedTokens)
}

func pagedEngineNoCache(t *testing.T) *runtime.Engine {
	e, _ := pagedStories(t, cpu.Options{}, runtime.EngineConfig{NoPrefixCache: true})
	return e
}

// TestGroupSharesPrompt: the n choices of one request (SubmitGroup) share
// their prompt's pages: one computes it, the others find it cached.
func TestGroupSharesPrompt(t *testing.T) {
	e, b := pagedStories(t, cpu.Options{}, runtime.EngineConfig{MaxRunning: 4})
	size := b.KVPool().PageSize()
	prompt := storyPrompt(e, 90)
	reqs := make([]runtime.Request, 4)
	for i := range reqs {
		reqs[i] = runtime.Request{Prompt: prompt, MaxTokens: 12}
	}
	chans, err := e.SubmitGroup(context.Background(), reqs)
	require.NoError(t, err)
	cached := 0
	var outs [][]int32
	for _, ch := range chans {
		_, ids, last := generate(t, ch)
		cached += last.Usage.CachedTokens
		outs = append(outs, ids)
	}
	require.Equal(t, 3*((len(prompt)-1)/size*size), cached, "three of four choices reuse the prompt")
	for _, o := range outs[1:] {
		require.Equal(t, outs[0], o)
	}
	_, err = e.SubmitGroup(context.Background(), make([]runtime.Request, 4+runtime.DefaultMaxQueue+1))
	require.ErrorIs(t, err, runtime.ErrTooMany)
}

// TestPagesNeverLeak poisons every free page with NaN before each step of
// requests that start, share pages, end and are evicted: the outputs must
// be those of a run without poison, so no sequence ever reads a page it
// does not hold (a NaN would spread to its logits).
func TestPagesNeverLeak(t *testing.T) {
	// a pool of 40 pages of 16 positions: requests evict each other's pages
	outputs := func(poison bool) [][]int32 {
		m, err := builtin.Open()
		require.NoError(t, err)
		defer m.Close()
		b, err := cpu.New(m, cpu.Options{Threads: 2, KVMemory: 40 * b16PageBytes(t)})
		require.NoError(t, err)
		var be runtime.Backend = b
		if poison {
			be = poisoner{b}
		}
		e := runtime.NewEngine(be, m.Tokenizer, runtime.EngineConfig{MaxRunning: 3})
		defer e.Close()
		var outs [][]int32
		r := rand.New(rand.NewPCG(5, 6))
		for i := range 12 {
			prompt := storyPrompt(e, 20+r.IntN(100))
			if i%3 == 1 {
				prompt[len(prompt)/2] = prompt[len(prompt)/2+1]
			}
			var reqs []runtime.Request
			for range 1 + r.IntN(3) {
				reqs = append(reqs, runtime.Request{Prompt: prompt, MaxTokens: 10 + r.IntN(40), IgnoreEOS: true})
			}
			chans, err := e.SubmitGroup(context.Background(), reqs)
			require.NoError(t, err)
			for _, ch := range chans {
				_, ids, _ := generate(t, ch)
				outs = append(outs, ids)
			}
		}
		st := e.Stats()
		require.Zero(t, st.KVPagesUsed)
		require.Positive(t, st.CachedTokens)
		return outs
	}
	require.Equal(t, outputs(false), outputs(true))
}

// poisoner fills the free pages with NaN before every step.
type poisoner struct{ *cpu.Backend }

func (p poisoner) Step(ctx context.Context, batch []runtime.SeqStep) ([][]float32, error) {
	p.PoisonFreePages()
	return p.Backend.Step(ctx, batch)
}

// b16PageBytes is the bytes of one page of stories260K's float32 cache.
func b16PageBytes(t *testing.T) int64 {
	m, err := builtin.Open()
	require.NoError(t, err)
	defer m.Close()
	hp := m.HParams
	return int64(2 * 4 * 16 * hp.Layers * hp.HeadsKV * (hp.Embedding / hp.Heads))
}

// TestPreemptionLosesNothing runs more long requests than a small pool
// holds: running sequences are preempted and resume, and each greedy
// output equals its run alone on a large pool.
func TestPreemptionLosesNothing(t *testing.T) {
	small, _ := pagedStories(t, cpu.Options{KVMemory: 24 * b16PageBytes(t)}, runtime.EngineConfig{MaxRunning: 4})
	big, _ := pagedStories(t, cpu.Options{}, runtime.EngineConfig{})
	var reqs []runtime.Request
	for i := range 4 {
		p := storyPrompt(small, 30+10*i)
		p[5] = int32(300 + i)
		reqs = append(reqs, runtime.Request{Prompt: p, MaxTokens: 80, IgnoreEOS: true})
	}
	chans := make([]<-chan runtime.Event, len(reqs))
	for i, r := range reqs {
		ch, err := small.Submit(context.Background(), r)
		require.NoError(t, err)
		chans[i] = ch
	}
	for i, ch := range chans {
		_, got, last := generate(t, ch)
		want, _ := run(t, big, reqs[i])
		require.Equal(t, want, got, "request %d", i)
		require.Equal(t, 80, last.Usage.CompletionTokens)
	}
	st := small.Stats()
	require.Positive(t, st.Preemptions, "the pool of 24 pages cannot hold four sequences of ~120 positions")
	require.Zero(t, st.KVPagesUsed)
}

// TestAbortedStreamsFreePages cancels 10,000 streams at random moments
// (queued, prefilling, decoding) and requires the pool to hold no page
// afterwards.
func TestAbortedStreamsFreePages(t *testing.T) {
	e, _ := pagedStories(t, cpu.Options{}, runtime.EngineConfig{MaxRunning: 16, MaxQueue: 256})
	prompt := storyPrompt(e, 60)
	const total, workers = 10000, 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range total / workers {
				ctx, cancel := context.WithCancel(context.Background())
				p := prompt[:10+r.IntN(len(prompt)-10)]
				ch, err := e.Submit(ctx, runtime.Request{Prompt: p, MaxTokens: 50})
				if err != nil {
					cancel()
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				for range r.IntN(4) { // 0 to 3 events, then hang up
					if _, ok := <-ch; !ok {
						break
					}
				}
				cancel()
				for range ch {
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, e.WaitIdle(context.Background()))
	st := e.Stats()
	require.Zero(t, st.KVPagesUsed, "pages held after every stream ended: %+v", st)
	require.Zero(t, st.Running+st.Queued)
	require.Less(t, refused, total/2, "most streams were admitted")
}
