package runtime

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeEmbedder is a fakeBackend that also embeds: an input's vector is a
// pure function of its tokens (their sum and length spread over width
// elements), normalised, and every Embed call is recorded.
type fakeEmbedder struct {
	*fakeBackend
	width   int
	gate    chan struct{} // when set, every Embed waits for a value
	entered chan struct{} // when set, told of every Embed call as it starts
	fail    error

	emu   sync.Mutex
	calls [][]int // the input lengths of each Embed call
	seqs  []SeqID
}

func newFakeEmbedder(width int) *fakeEmbedder {
	return &fakeEmbedder{fakeBackend: newFakeBackend(16, 64, hashLogits(16)), width: width}
}

func (f *fakeEmbedder) EmbedWidth() int { return f.width }

func (f *fakeEmbedder) Embed(ctx context.Context, batch []EmbedStep, pool Pooling) ([][]float32, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.emu.Lock()
	defer f.emu.Unlock()
	var lens []int
	out := make([][]float32, len(batch))
	for i, st := range batch {
		lens = append(lens, len(st.Tokens))
		f.seqs = append(f.seqs, st.Seq)
		out[i] = fakeVector(st.Tokens, f.width, pool)
	}
	f.calls = append(f.calls, lens)
	return out, f.fail
}

func (f *fakeEmbedder) record() [][]int {
	f.emu.Lock()
	defer f.emu.Unlock()
	return slices.Clone(f.calls)
}

func fakeVector(toks []int32, width int, pool Pooling) []float32 {
	x := make([]float64, width)
	for i := range x {
		for j, t := range toks {
			x[i] += math.Sin(float64(int(t)*(i+1)+j) + float64(pool))
		}
	}
	return normalized(x)
}

func embedInputs(lens ...int) [][]int32 {
	var out [][]int32
	for i, n := range lens {
		in := make([]int32, n)
		for j := range in {
			in[j] = int32(1 + (i+j)%15)
		}
		out = append(out, in)
	}
	return out
}

// TestEmbedBatchesInputsInOrder: the inputs of one request go to the
// backend together, and every vector comes back in input order; with
// dimensions, truncated to a unit vector.
func TestEmbedBatchesInputsInOrder(t *testing.T) {
	b := newFakeEmbedder(8)
	e := newEngine(b, hashVocab(16), nil, EngineConfig{})
	defer e.Close()
	require.Equal(t, 8, e.EmbedWidth())
	ins := embedInputs(3, 5, 1, 7)
	vecs, err := e.Embed(context.Background(), EmbedRequest{Inputs: ins, Pooling: PoolLast})
	require.NoError(t, err)
	require.Equal(t, [][]int{{3, 5, 1, 7}}, b.record(), "one backend call for the four inputs")
	for i, in := range ins {
		require.Equal(t, fakeVector(in, 8, PoolLast), vecs[i])
	}
	short, err := e.Embed(context.Background(), EmbedRequest{Inputs: ins[:1], Pooling: PoolLast, Dimensions: 3})
	require.NoError(t, err)
	require.Len(t, short[0], 3)
	require.InDelta(t, 1, norm2(short[0]), 1e-6)
	require.InDeltaSlice(t, toF64(Truncate(fakeVector(ins[0], 8, PoolLast), 3)), toF64(short[0]), 0)
	require.Greater(t, math.Abs(float64(short[0][0]-vecs[0][0])), 1e-6, "renormalised after the cut")
	st := e.Stats()
	require.EqualValues(t, 3+5+1+7+3, st.PromptTokens)
	require.EqualValues(t, 2, st.PrefillSteps)
	// embedding steps count as prefill steps in the kind counters too (a
	// decode step's time is backend time less prefill time)
	require.EqualValues(t, 5, st.PrefillRows)
	require.Zero(t, st.DecodeSteps)
	require.Equal(t, st.BackendSeconds, st.PrefillSeconds)
	_, freed := b.fakeBackend.record()
	require.ElementsMatch(t, b.seqs, freed, "every embedded sequence is freed")
}

// TestEmbedSplitsAtTheTokenBudget: a step takes inputs up to
// MaxBatchTokens (at least one, however long), the rest wait for the next.
func TestEmbedSplitsAtTheTokenBudget(t *testing.T) {
	b := newFakeEmbedder(4)
	e := newEngine(b, hashVocab(16), nil, EngineConfig{MaxBatchTokens: 10})
	defer e.Close()
	ins := embedInputs(4, 4, 4, 12, 2, 3)
	vecs, err := e.Embed(context.Background(), EmbedRequest{Inputs: ins, Pooling: PoolMean})
	require.NoError(t, err)
	require.Equal(t, [][]int{{4, 4}, {4}, {12}, {2, 3}}, b.record())
	for i, in := range ins {
		require.Equal(t, fakeVector(in, 4, PoolMean), vecs[i])
	}
}

// TestEmbedSharesStepsAcrossRequests: inputs of requests waiting together
// share backend calls, and each request gets its own vectors back.
func TestEmbedSharesStepsAcrossRequests(t *testing.T) {
	b := newFakeEmbedder(4)
	b.gate, b.entered = make(chan struct{}), make(chan struct{}, 4)
	e := newEngine(b, hashVocab(16), nil, EngineConfig{MaxRunning: 4})
	defer e.Close()
	type res struct {
		v   [][]float32
		err error
	}
	first := make(chan res, 1)
	go func() {
		v, err := e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(2), Pooling: PoolCLS})
		first <- res{v, err}
	}()
	<-b.entered // the first request's call has begun
	rest := make([]chan res, 3)
	for i := range rest {
		rest[i] = make(chan res, 1)
		go func() {
			v, err := e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(i+1, 2), Pooling: PoolCLS})
			rest[i] <- res{v, err}
		}()
	}
	waitFor(t, func() bool { return queuedEmbeds(e) == 4 })
	b.gate <- struct{}{} // the first request's call (taken before the others queued)
	b.gate <- struct{}{} // one call for the three others
	r := <-first
	require.NoError(t, r.err)
	for i := range rest {
		r := <-rest[i]
		require.NoError(t, r.err)
		for k, in := range embedInputs(i+1, 2) {
			require.Equal(t, fakeVector(in, 4, PoolCLS), r.v[k])
		}
	}
	calls := b.record()
	require.Len(t, calls, 2)
	require.Len(t, calls[1], 6, "three requests' six inputs in one backend call")
}

// TestEmbedAdmission: an embedding request takes a slot like a generation
// request; past the running and queued slots it gets ErrOverloaded.
func TestEmbedAdmission(t *testing.T) {
	b := newFakeEmbedder(4)
	b.gate = make(chan struct{})
	e := newEngine(b, hashVocab(16), nil, EngineConfig{MaxRunning: 1, MaxQueue: 1})
	defer e.Close()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(3), Pooling: PoolLast})
			errs <- err
		}()
	}
	waitFor(t, func() bool { return queuedEmbeds(e) == 2 })
	_, err := e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(3), Pooling: PoolLast})
	require.ErrorIs(t, err, ErrOverloaded)
	close(b.gate)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	e.Drain()
	_, err = e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(3), Pooling: PoolLast})
	require.ErrorIs(t, err, ErrDraining)
}

// TestEmbedBesideGeneration: embeddings run between the steps of a
// generation, which goes on to its end unchanged.
func TestEmbedBesideGeneration(t *testing.T) {
	b := newFakeEmbedder(4)
	b.delay = 2 * time.Millisecond
	e := newEngine(b, hashVocab(16), nil, EngineConfig{MaxRunning: 2})
	defer e.Close()
	req := Request{Prompt: []int32{1, 2, 3}, MaxTokens: 40, Sampling: SamplingParams{Temperature: 1, Seed: seed(7)}, IgnoreEOS: true}
	ch, err := e.Submit(context.Background(), req)
	require.NoError(t, err)
	for range 5 {
		_, err := e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(3, 4), Pooling: PoolLast})
		require.NoError(t, err)
	}
	_, toks, last := collect(ch)
	require.NoError(t, last.Err)
	solo := newFakeEmbedder(4)
	es := newEngine(solo, hashVocab(16), nil, EngineConfig{MaxRunning: 2})
	defer es.Close()
	ch2, err := es.Submit(context.Background(), req)
	require.NoError(t, err)
	_, want, _ := collect(ch2)
	require.Equal(t, want, toks)
}

// TestEmbedRefusals: requests the engine cannot serve fail before they
// queue, with the error naming the reason.
func TestEmbedRefusals(t *testing.T) {
	plain := newEngine(newFakeBackend(16, 64, hashLogits(16)), hashVocab(16), nil, EngineConfig{})
	defer plain.Close()
	_, err := plain.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(2), Pooling: PoolLast})
	require.ErrorIs(t, err, ErrNotEmbedding)
	require.Zero(t, plain.EmbedWidth())

	e := newEngine(newFakeEmbedder(4), hashVocab(16), nil, EngineConfig{})
	defer e.Close()
	for _, c := range []struct {
		req  EmbedRequest
		want error
	}{
		{EmbedRequest{Pooling: PoolLast}, ErrBadRequest},
		{EmbedRequest{Inputs: [][]int32{{}}, Pooling: PoolLast}, ErrBadRequest},
		{EmbedRequest{Inputs: [][]int32{{1, 16}}, Pooling: PoolLast}, ErrBadRequest},
		{EmbedRequest{Inputs: embedInputs(2)}, ErrBadRequest},
		{EmbedRequest{Inputs: embedInputs(2), Pooling: PoolLast, Dimensions: 5}, ErrBadRequest},
		{EmbedRequest{Inputs: embedInputs(65), Pooling: PoolLast}, ErrTooLong},
	} {
		_, err := e.Embed(context.Background(), c.req)
		require.ErrorIs(t, err, c.want, "%+v", c.req)
	}
}

// TestEmbedFailureAndClose: a backend failure ends the requests of its
// call with ErrBackend; closing the engine ends waiting ones with
// ErrClosed; a cancelled request returns its context's error.
func TestEmbedFailureAndClose(t *testing.T) {
	b := newFakeEmbedder(4)
	b.fail = errors.New("device lost")
	e := newEngine(b, hashVocab(16), nil, EngineConfig{})
	_, err := e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(2), Pooling: PoolLast})
	require.ErrorIs(t, err, ErrBackend)
	require.ErrorContains(t, err, "device lost")

	b.fail = nil
	b.gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() {
		_, err := e.Embed(ctx, EmbedRequest{Inputs: embedInputs(2), Pooling: PoolLast})
		done <- err
	}()
	waitFor(t, func() bool { return queuedEmbeds(e) == 1 })
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	go func() {
		_, err := e.Embed(context.Background(), EmbedRequest{Inputs: embedInputs(2), Pooling: PoolLast})
		done <- err
	}()
	waitFor(t, func() bool { return queuedEmbeds(e) == 2 }) // the cancelled one is still in the blocked call
	require.NoError(t, e.Close())
	require.ErrorIs(t, <-done, ErrClosed)
}

// TestHiddenPoolerRows: the pooling's rows and its float64 arithmetic,
// against a direct computation.
func TestHiddenPoolerRows(t *testing.T) {
	for _, c := range []struct {
		p      Pooling
		n      int
		lo, hi int
	}{{PoolMean, 5, 0, 5}, {PoolCLS, 5, 0, 1}, {PoolLast, 5, 4, 5}, {PoolLast, 1, 0, 1}} {
		lo, hi := c.p.Rows(c.n)
		require.Equal(t, [2]int{c.lo, c.hi}, [2]int{lo, hi}, "%v of %d", c.p, c.n)
	}
	for _, name := range []string{"mean", "CLS", "last", "none"} {
		p, err := ParsePooling(name)
		require.NoError(t, err)
		require.Equal(t, name, map[bool]string{true: "CLS", false: p.String()}[name == "CLS"])
	}
	_, err := ParsePooling("max")
	require.ErrorIs(t, err, ErrBadRequest)

	hp := HiddenPooler{Norm: []float32{1, 2, 0.5}, Eps: 1e-6}
	rows := [][]float32{{1, -2, 3}, {0.5, 0.25, -1}}
	got := hp.Pool(rows, PoolMean)
	// by hand: each row times 1/rms and the weight, averaged, normalised
	var want [3]float64
	for _, r := range rows {
		ss := 0.0
		for _, v := range r {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/3+1e-6)
		for i, v := range r {
			want[i] += float64(v) * inv * float64(hp.Norm[i]) / 2
		}
	}
	n := math.Sqrt(want[0]*want[0] + want[1]*want[1] + want[2]*want[2])
	for i := range want {
		require.InDelta(t, want[i]/n, float64(got[i]), 1e-7)
	}
}

func queuedEmbeds(e *Engine) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.embeds.jobs)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func norm2(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// Generation and embedding requests are admitted against the same slots:
// a queued embedding request counts for a generation request too.
func TestAdmitsCountsQueuedEmbeddings(t *testing.T) {
	b := newFakeBackend(16, 64, hashLogits(16))
	e := newTestEngine(b, hashVocab(16), EngineConfig{MaxRunning: 1, MaxQueue: 1})
	defer e.Close()
	// the lock is held throughout: the loop must never see the job, which
	// has no context to run under
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NoError(t, e.admits(2))
	e.embeds.jobs = append(e.embeds.jobs, &embedJob{})
	defer func() { e.embeds.jobs = nil }()
	require.ErrorIs(t, e.admits(2), ErrOverloaded, "the queued embedding takes a slot")
	require.NoError(t, e.admits(1))
	require.Equal(t, 1, e.queued(), "and counts as queued (Stats().Queued)")
}
