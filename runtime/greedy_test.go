package runtime

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// greedyFake is fakeBackend plus the GreedyStepper fast path (the argmax of
// the same logits, lowest index on ties), counting which path each step took.
type greedyFake struct {
	*fakeBackend
	mu            sync.Mutex
	steps, greedy int
}

func (g *greedyFake) Step(ctx context.Context, batch []SeqStep) ([][]float32, error) {
	g.mu.Lock()
	g.steps++
	g.mu.Unlock()
	return g.fakeBackend.Step(ctx, batch)
}

func (g *greedyFake) StepGreedy(ctx context.Context, batch []SeqStep) ([]int32, error) {
	g.mu.Lock()
	g.greedy++
	g.mu.Unlock()
	logits, err := g.fakeBackend.Step(ctx, batch)
	if err != nil {
		return nil, err
	}
	return greedyIDs(logits), nil
}

// greedyIDs is the device's argmax of each row of logits: the lowest id
// on ties, -1 for a row without logits or with a NaN, as the CUDA argmax
// reports it.
func greedyIDs(logits [][]float32) []int32 {
	out := make([]int32, len(logits))
	for i, l := range logits {
		out[i] = -1
		for j, v := range l {
			if v != v {
				out[i] = -1
				break
			}
			if out[i] < 0 || v > l[out[i]] {
				out[i] = int32(j)
			}
		}
	}
	return out
}

// TestGreedyNaN: on the greedy fast path a sequence whose logits hold a
// NaN ends with a backend error that says so; the others go on unchanged.
func TestGreedyNaN(t *testing.T) {
	const vocab = 32
	base := hashLogits(vocab)
	nanAfter := func(hist []int32) []float32 {
		out := base(hist)
		if hist[0] == 7 && len(hist) >= 3 {
			out[5] = float32(math.NaN())
		}
		return out
	}
	reqs := []Request{{Prompt: []int32{7, 1}, MaxTokens: 6}, {Prompt: []int32{2, 3}, MaxTokens: 6}}
	want := runAll(t, newFakeBackend(vocab, 64, base), hashVocab(vocab), reqs)
	g := &greedyFake{fakeBackend: newFakeBackend(vocab, 64, nanAfter)}
	got := runAllResults(t, g, hashVocab(vocab), reqs)
	require.ErrorIs(t, got[0].final.Err, ErrBackend)
	require.ErrorContains(t, got[0].final.Err, "NaN")
	require.Len(t, got[0].toks, 1, "one token before the NaN step")
	require.Equal(t, want[1], got[1])
}

func (g *greedyFake) counts() (steps, greedy int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.steps, g.greedy
}

var _ GreedyStepper = (*greedyFake)(nil)

// result is everything a request's reader sees.
type result struct {
	text  string
	toks  []int32
	final Event
}

// runAll submits reqs to a fresh engine over b and collects every result;
// every request must end without an error.
func runAll(t *testing.T, b Backend, v *fakeVocab, reqs []Request) []result {
	t.Helper()
	out := runAllResults(t, b, v, reqs)
	for _, r := range out {
		require.NoError(t, r.final.Err)
	}
	return out
}

// runAllResults is runAll that returns failed requests' results too.
func runAllResults(t *testing.T, b Backend, v *fakeVocab, reqs []Request) []result {
	t.Helper()
	e := newEngine(b, v, nil, EngineConfig{MaxRunning: len(reqs)})
	defer e.Close()
	chans := make([]<-chan Event, len(reqs))
	for i, r := range reqs {
		ch, err := e.Submit(context.Background(), r)
		require.NoError(t, err)
		chans[i] = ch
	}
	out := make([]result, len(reqs))
	for i, ch := range chans {
		out[i].text, out[i].toks, out[i].final = collect(ch)
	}
	return out
}

func TestEngineGreedyFastPath(t *testing.T) {
	const vocab = 32
	greedy := func(i int) Request {
		return Request{Prompt: []int32{int32(1 + i), int32(2 + i%3)}, MaxTokens: 6 + i, Stop: []string{"><1"}}
	}
	long := func(i int) Request { return Request{Prompt: []int32{int32(1 + i)}, MaxTokens: 10} }
	sampled := Request{Prompt: []int32{4, 5}, MaxTokens: 2, Sampling: SamplingParams{Temperature: 1, Seed: seed(9)}}
	with := func(f func(*Request)) Request {
		r := greedy(0)
		f(&r)
		return r
	}
	tests := []struct {
		name string
		reqs []Request
		// fast: every step that wants a token is greedy; slow: none is.
		fast, slow bool
	}{
		{"all greedy", []Request{greedy(0), greedy(1), greedy(2)}, true, false},
		{"zero-valued knobs stay greedy", []Request{with(func(r *Request) {
			r.Sampling = SamplingParams{Temperature: -1, RepeatPenalty: 1, TopK: 5, TopP: 0.5}
		})}, true, false},
		{"mixed batch", []Request{long(0), sampled, long(1)}, false, false},
		{"logit bias", []Request{with(func(r *Request) { r.Sampling.LogitBias = map[int32]float32{3: 1} })}, false, true},
		{"repeat penalty", []Request{with(func(r *Request) { r.Sampling.RepeatPenalty = 1.1 })}, false, true},
		{"presence penalty", []Request{with(func(r *Request) { r.Sampling.PresencePenalty = 0.5 })}, false, true},
		{"frequency penalty", []Request{with(func(r *Request) { r.Sampling.FrequencyPenalty = 0.5 })}, false, true},
		{"logprobs", []Request{with(func(r *Request) { r.Logprobs = true })}, false, true},
		{"top logprobs", []Request{with(func(r *Request) { r.TopLogprobs = 2 })}, false, true},
		{"mask", []Request{with(func(r *Request) { r.Mask = &banMask{banned: map[int32]bool{7: true}} })}, false, true},
		{"temperature", []Request{with(func(r *Request) { r.Sampling.Temperature = 0.7; r.Sampling.Seed = seed(3) })}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Masks hold state: each run gets its own copy of the requests.
			fresh := func() []Request {
				out := make([]Request, len(tc.reqs))
				copy(out, tc.reqs)
				for i := range out {
					if m, ok := out[i].Mask.(*banMask); ok {
						out[i].Mask = &banMask{banned: m.banned}
					}
				}
				return out
			}
			plain := newFakeBackend(vocab, 64, hashLogits(vocab))
			want := runAll(t, plain, hashVocab(vocab), fresh())

			g := &greedyFake{fakeBackend: newFakeBackend(vocab, 64, hashLogits(vocab))}
			g.delay = time.Millisecond
			got := runAll(t, g, hashVocab(vocab), fresh())
			require.Equal(t, want, got)

			steps, fast := g.counts()
			switch {
			case tc.fast:
				require.Zero(t, steps, "a plain greedy step used Step")
				require.Positive(t, fast)
			case tc.slow:
				require.Zero(t, fast, "a non-greedy request went through StepGreedy")
				require.Positive(t, steps)
			default:
				require.Positive(t, steps, "mixed steps must use Step")
				require.Positive(t, fast, "steps after the sampled request ended should be greedy")
			}
		})
	}
}
