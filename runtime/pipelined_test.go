package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/kv"
)

// eagerPipe makes a backend a PipelinedStepper for the engine's tests: a
// launch runs its step at once (a fed step with the tokens the step before
// it chose, as a device would), Collect hands the results over in order.
// Greedy launches take the backend's StepGreedy or the host's argmax;
// sampling launches its StepSample (eagerSamplePipe). It counts the steps
// launched and fed. Exported through Pipelined for the external tests
// (stories260K on the CPU backend).
type eagerPipe struct {
	Backend
	mu       sync.Mutex
	queue    []pipeOut
	last     pipeOut // the last launched step's results
	launched int
	fed      int
	// fedHost counts fed entries whose sampling depends on the tokens
	// before (penalties, a mask): the engine must never feed those
	fedHost int
	// short drops a collected step's last result (a backend gone wrong)
	short bool
}

// eagerSamplePipe is eagerPipe over a SamplingStepper, which it stays.
type eagerSamplePipe struct{ *eagerPipe }

func (p eagerSamplePipe) StepSample(ctx context.Context, batch []SeqStep, params []*DeviceSampling) ([]Sampled, error) {
	return p.Backend.(SamplingStepper).StepSample(ctx, batch, params)
}

type pipeOut struct {
	greedy  []int32
	sampled []Sampled
	err     error
	n       int
	ok      bool // a step was launched
}

// Pipelined wraps b so that the engine pipelines its decode steps.
func Pipelined(b Backend) Backend {
	p := &eagerPipe{Backend: b}
	if _, ok := b.(SamplingStepper); ok {
		return eagerSamplePipe{p}
	}
	return p
}

// PipelineCounts reports the steps launched and those fed on the device
// by a backend from Pipelined.
func PipelineCounts(b Backend) (launched, fed int) {
	p := pipeOf(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.launched, p.fed
}

func pipeOf(b Backend) *eagerPipe {
	if p, ok := b.(*eagerPipe); ok {
		return p
	}
	return b.(eagerSamplePipe).eagerPipe
}

func (p *eagerPipe) KVPool() *kv.Pool {
	if pb, ok := p.Backend.(PagedBackend); ok {
		return pb.KVPool()
	}
	return nil
}

// greedy is the backend's StepGreedy, or its Step and the argmax (the
// lowest id on ties; -1 for a NaN).
func (p *eagerPipe) greedy(ctx context.Context, batch []SeqStep) ([]int32, error) {
	if gs, ok := p.Backend.(GreedyStepper); ok {
		return gs.StepGreedy(ctx, batch)
	}
	logits, err := p.Backend.Step(ctx, batch)
	if err != nil {
		return nil, err
	}
	return greedyIDs(logits), nil
}

func (p *eagerPipe) Launch(ctx context.Context, batch []SeqStep, params []*DeviceSampling, feed bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 2 {
		return errors.New("eagerPipe: two launched steps wait for Collect")
	}
	ss, sampling := p.Backend.(SamplingStepper)
	if params != nil && !sampling {
		return fmt.Errorf("%w: no device sampling", ErrNotPipelined)
	}
	for i, e := range batch {
		if len(e.Tokens) != 1 || !e.Logits || (params != nil && params[i] == nil) {
			return fmt.Errorf("eagerPipe: entry %d is not a decode wanting a token", i)
		}
	}
	steps := slices.Clone(batch)
	if feed {
		if !p.last.ok || p.last.n != len(batch) || (p.last.greedy == nil) != (params != nil) {
			return errors.New("eagerPipe: a fed step unlike the step before it")
		}
		for i := range steps {
			tok := int32(-1)
			if p.last.err == nil {
				if params == nil {
					tok = p.last.greedy[i]
				} else {
					tok = p.last.sampled[i].Token
				}
			}
			steps[i].Tokens = []int32{max(tok, 0)} // as the embedding kernel reads a failed choice
		}
		p.fed++
		for _, d := range params {
			if d != nil && (len(d.Penalties) > 0 || d.Masked) {
				p.fedHost++
			}
		}
	}
	out := pipeOut{n: len(batch), ok: true}
	if params == nil {
		g, err := p.greedy(ctx, steps)
		out.greedy, out.err = slices.Clone(g), err
		if out.greedy == nil {
			out.greedy = []int32{}
		}
	} else {
		s, err := ss.StepSample(ctx, steps, params)
		out.sampled, out.err = slices.Clone(s), err
		for i := range out.sampled {
			out.sampled[i].Top = slices.Clone(out.sampled[i].Top)
		}
	}
	p.launched++
	p.last = out
	p.queue = append(p.queue, out)
	return nil
}

func (p *eagerPipe) Collect(ctx context.Context) ([]int32, []Sampled, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		return nil, nil, errors.New("eagerPipe: nothing launched")
	}
	out := p.queue[0]
	p.queue = p.queue[1:]
	if out.err != nil {
		return nil, nil, out.err
	}
	if p.short && len(out.greedy) > 0 {
		out.greedy = out.greedy[:len(out.greedy)-1]
	}
	return out.greedy, out.sampled, nil
}

// runPipe runs reqs on an engine of at most running sequences over b, or
// over Pipelined(b) with pipe, and returns each request's result and the
// backend the engine used.
func runPipe(t *testing.T, b Backend, pipe bool, running int, v *fakeVocab, reqs []Request, cancelAt map[int]int) ([]result, Backend) {
	t.Helper()
	if pipe {
		b = Pipelined(b)
	}
	e := newEngine(b, v, nil, EngineConfig{MaxRunning: running, PrefillChunk: 4})
	defer e.Close()
	chans := make([]<-chan Event, len(reqs))
	cancels := make([]context.CancelFunc, len(reqs))
	for i, r := range reqs {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := e.Submit(ctx, r)
		require.NoError(t, err)
		chans[i], cancels[i] = ch, cancel
	}
	out := make([]result, len(reqs))
	for i, ch := range chans {
		for ev := range ch {
			out[i].text += ev.Text
			for _, g := range ev.Tokens {
				out[i].toks = append(out[i].toks, g.Token)
			}
			out[i].final = ev
			if n, ok := cancelAt[i]; ok && len(out[i].toks) >= n {
				cancels[i]()
			}
		}
	}
	return out, b
}

// pipeVocab is hashVocab(n) with token 5 ending generation.
func pipeVocab(n int) *fakeVocab {
	v := hashVocab(n)
	v.eog[5] = true
	return v
}

// TestEnginePipelinedGreedy: over a PipelinedStepper the engine feeds
// decode steps on the device, and every request's tokens, text and finish
// are those of plain steps: lengths, stop tokens and strings, more
// requests than running slots (admission between pipelined runs).
func TestEnginePipelinedGreedy(t *testing.T) {
	const vocab = 32
	var reqs []Request
	for i := range 7 {
		r := Request{Prompt: []int32{int32(1 + i), int32(2 + i%5), 9}, MaxTokens: 3 + 4*i}
		switch i {
		case 2:
			r.Stop = []string{"<7>"}
		case 4:
			r.IgnoreEOS = true
		}
		reqs = append(reqs, r)
	}
	for _, running := range []int{1, 3, 8} {
		want, _ := runPipe(t, newFakeBackend(vocab, 64, hashLogits(vocab)), false, running, pipeVocab(vocab), reqs, nil)
		got, b := runPipe(t, newFakeBackend(vocab, 64, hashLogits(vocab)), true, running, pipeVocab(vocab), reqs, nil)
		require.Equal(t, want, got, "running %d", running)
		launched, fed := PipelineCounts(b)
		require.Positive(t, fed, "running %d: steps were fed on the device", running)
		require.Greater(t, launched, fed)
		for _, r := range got {
			require.NoError(t, r.final.Err)
		}
	}
}

// TestEnginePipelinedSampled: device-sampled requests pipeline too, each
// draw keyed by its seed and its token's index as in plain steps; a
// request with penalties (their counts follow the tokens) steps plainly,
// and its batch with it.
func TestEnginePipelinedSampled(t *testing.T) {
	const vocab = 40
	sampled := func(i int) Request {
		return Request{Prompt: []int32{int32(1 + i), 7}, MaxTokens: 5 + 3*i,
			Sampling: SamplingParams{Temperature: 0.7, TopK: 9, Seed: seed(uint64(100 + i)), LogitBias: map[int32]float32{int32(i): 1.5}},
			Logprobs: i%2 == 0, TopLogprobs: i % 3}
	}
	for _, withPenalty := range []bool{false, true} {
		reqs := []Request{sampled(0), sampled(1), sampled(2), sampled(3)}
		if withPenalty {
			reqs[1].Sampling.PresencePenalty = 0.5
		}
		want, _ := runPipe(t, newSamplingFake(vocab, hashLogits(vocab)), false, 4, pipeVocab(vocab), reqs, nil)
		f := newSamplingFake(vocab, hashLogits(vocab))
		got, b := runPipe(t, f, true, 4, pipeVocab(vocab), reqs, nil)
		require.Equal(t, want, got, "penalty %v", withPenalty)
		_, fed := PipelineCounts(b)
		require.Zero(t, pipeOf(b).fedHost, "penalties are counted on the host: never fed")
		if withPenalty {
			continue
		}
		require.Positive(t, fed)
		bySeed := map[uint64][]uint64{}
		for _, d := range f.seen {
			bySeed[d.Seed] = append(bySeed[d.Seed], d.Index)
		}
		for i, r := range got {
			idx := bySeed[100+uint64(i)]
			require.GreaterOrEqual(t, len(idx), len(r.toks), "request %d", i)
			for j, k := range idx {
				require.Equal(t, uint64(j), k, "request %d: its draws count its tokens", i)
			}
		}
	}
}

// TestEnginePipelinedEnds: a request that fails on the device or is
// cancelled while the step after it is in flight ends as in plain steps,
// and the others go on unchanged.
func TestEnginePipelinedEnds(t *testing.T) {
	const vocab = 32
	reqs := []Request{
		{Prompt: []int32{3}, MaxTokens: 12, Sampling: SamplingParams{Temperature: 0.5, TopK: 7}},
		{Prompt: []int32{4}, MaxTokens: 12, Sampling: SamplingParams{Temperature: 0.5}},
		{Prompt: []int32{6}, MaxTokens: 12, Sampling: SamplingParams{Temperature: 0.5}, IgnoreEOS: true},
	}
	code := func(d *DeviceSampling) (int32, bool) { return SampledNaN, d.Params.TopK == 7 && d.Index == 2 }
	plain := newSamplingFake(vocab, hashLogits(vocab))
	plain.code = code
	want, _ := runPipe(t, plain, false, 3, pipeVocab(vocab), reqs, nil)
	f := newSamplingFake(vocab, hashLogits(vocab))
	f.code = code
	got, b := runPipe(t, f, true, 3, pipeVocab(vocab), reqs, nil)
	require.ErrorIs(t, got[0].final.Err, ErrBackend)
	require.ErrorContains(t, got[0].final.Err, "NaN")
	require.Len(t, got[0].toks, 2)
	require.Equal(t, want, got)
	_, fed := PipelineCounts(b)
	require.Positive(t, fed)

	slow := func() *fakeBackend {
		b := newFakeBackend(vocab, 64, hashLogits(vocab))
		b.delay = time.Millisecond
		return b
	}
	greedy := []Request{{Prompt: []int32{1, 2}, MaxTokens: 40, IgnoreEOS: true}, {Prompt: []int32{2, 3}, MaxTokens: 30, IgnoreEOS: true}}
	want, _ = runPipe(t, slow(), false, 2, pipeVocab(vocab), greedy, nil)
	got, _ = runPipe(t, slow(), true, 2, pipeVocab(vocab), greedy, map[int]int{0: 3})
	require.ErrorIs(t, got[0].final.Err, context.Canceled)
	require.Equal(t, want[0].toks[:len(got[0].toks)], got[0].toks, "the cancelled request's tokens until then")
	require.Equal(t, want[1], got[1])
}

// TestEnginePipelinedShortResults: a pipelined step that comes back with
// fewer results than entries ends its requests with a backend error
// naming the counts; the engine goes on serving.
func TestEnginePipelinedShortResults(t *testing.T) {
	const vocab = 32
	p := &eagerPipe{Backend: newFakeBackend(vocab, 64, hashLogits(vocab)), short: true}
	e := newEngine(p, pipeVocab(vocab), nil, EngineConfig{MaxRunning: 2})
	defer e.Close()
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 8, IgnoreEOS: true})
	require.NoError(t, err)
	_, _, last := collect(ch)
	require.ErrorIs(t, last.Err, ErrBackend)
	require.ErrorContains(t, last.Err, "returned 0 results for 1 sequences")
	p.mu.Lock()
	p.short = false
	p.mu.Unlock()
	ch, err = e.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 8, IgnoreEOS: true})
	require.NoError(t, err)
	_, toks, last := collect(ch)
	require.NoError(t, last.Err)
	require.Len(t, toks, 8)
}

// TestEnginePipelinedRandom: random mixes of requests (prompt lengths
// across prefill chunks, lengths, stop tokens and strings, greedy and
// seeded device sampling, penalties, logprobs) over random running
// slots give the same events pipelined as plain.
func TestEnginePipelinedRandom(t *testing.T) {
	const vocab = 24
	r := rand.New(rand.NewPCG(21, 6))
	fedAll := 0
	for trial := range 40 {
		var reqs []Request
		for range 1 + r.IntN(6) {
			req := Request{MaxTokens: 1 + r.IntN(20), IgnoreEOS: r.IntN(3) == 0}
			for range 1 + r.IntN(10) {
				req.Prompt = append(req.Prompt, int32(1+r.IntN(vocab-1)))
			}
			if r.IntN(4) == 0 {
				req.Stop = []string{fmt.Sprintf("<%d>", r.IntN(vocab))}
			}
			if r.IntN(2) == 0 {
				req.Sampling = SamplingParams{Temperature: 0.5 + r.Float32(), TopK: r.IntN(8), Seed: seed(r.Uint64())}
				req.Logprobs, req.TopLogprobs = r.IntN(2) == 0, r.IntN(3)
				if r.IntN(5) == 0 {
					req.Sampling.FrequencyPenalty = 0.3
				}
			}
			reqs = append(reqs, req)
		}
		running := 1 + r.IntN(4)
		want, _ := runPipe(t, newSamplingFake(vocab, hashLogits(vocab)), false, running, pipeVocab(vocab), reqs, nil)
		got, b := runPipe(t, newSamplingFake(vocab, hashLogits(vocab)), true, running, pipeVocab(vocab), reqs, nil)
		require.Equal(t, want, got, "trial %d: %d requests, %d running", trial, len(reqs), running)
		_, fed := PipelineCounts(b)
		fedAll += fed
		require.Zero(t, pipeOf(b).fedHost, "trial %d: a penalised request was fed", trial)
	}
	require.Positive(t, fedAll, "the trials pipelined")
}
