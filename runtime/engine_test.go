package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newTestEngine(b *fakeBackend, v *fakeVocab, cfg EngineConfig) *Engine {
	return newEngine(b, v, nil, cfg)
}

func hashRequest(i int) Request {
	return Request{
		Prompt:    []int32{int32(1 + i%5), int32(2 + i%7), int32(3 + i)},
		MaxTokens: 12 + i,
		Sampling:  SamplingParams{Temperature: 1, TopK: 8, Seed: seed(uint64(100 + i))},
		Logprobs:  true,
	}
}

func TestEngineBatchesAndMatchesSolo(t *testing.T) {
	reqs := make([]Request, 8)
	for i := range reqs {
		reqs[i] = hashRequest(i)
	}
	together, lasts, st := requireBatchedMatchesSolo(t, 32, time.Millisecond, reqs, 4)
	for i, toks := range together {
		require.Equal(t, FinishLength, lasts[i].Finish)
		require.Len(t, toks, 12+i)
	}
	require.Equal(t, 0, st.Running)
	require.EqualValues(t, 8*12+28, st.TokensGenerated)
}

// requireBatchedMatchesSolo runs reqs together on one engine over a fake
// backend of vocab tokens (each step delayed by delay), requires that some
// step batched at least minWidth of them and that each request generates
// alone what it generated in the batch. It returns the batched tokens, the
// last event of each request and the batched engine's stats.
func requireBatchedMatchesSolo(t *testing.T, vocab int, delay time.Duration, reqs []Request, minWidth int) ([][]int32, []Event, Stats) {
	t.Helper()
	b := newFakeBackend(vocab, 256, hashLogits(vocab))
	b.delay = delay
	e := newTestEngine(b, hashVocab(vocab), EngineConfig{MaxRunning: len(reqs)})
	defer e.Close()
	chans := make([]<-chan Event, len(reqs))
	for i := range chans {
		ch, err := e.Submit(context.Background(), reqs[i])
		require.NoError(t, err)
		chans[i] = ch
	}
	together := make([][]int32, len(reqs))
	lasts := make([]Event, len(reqs))
	for i, ch := range chans {
		_, toks, last := collect(ch)
		require.NoError(t, last.Err)
		together[i], lasts[i] = toks, last
	}
	steps, _ := b.record()
	widest := 0
	for _, s := range steps {
		widest = max(widest, len(s))
	}
	require.GreaterOrEqual(t, widest, minWidth, "requests were not batched together")
	for i := range reqs {
		solo := newFakeBackend(vocab, 256, hashLogits(vocab))
		es := newTestEngine(solo, hashVocab(vocab), EngineConfig{MaxRunning: 1})
		ch, err := es.Submit(context.Background(), reqs[i])
		require.NoError(t, err)
		_, toks, _ := collect(ch)
		require.Equal(t, together[i], toks, "request %d differs alone", i)
		require.NoError(t, es.Close())
	}
	return together, lasts, e.Stats()
}

func TestEngineChunkedPrefillInterleaves(t *testing.T) {
	const vocab = 16
	b := newFakeBackend(vocab, 256, hashLogits(vocab))
	b.delay = time.Millisecond
	e := newTestEngine(b, hashVocab(vocab), EngineConfig{MaxRunning: 4, PrefillChunk: 4, MaxBatchTokens: 6})
	defer e.Close()

	decoding, err := e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 60})
	require.NoError(t, err)
	<-decoding // decoding has started
	long := make([]int32, 22)
	for i := range long {
		long[i] = int32(i % vocab)
	}
	ch, err := e.Submit(context.Background(), Request{Prompt: long, MaxTokens: 2})
	require.NoError(t, err)
	_, toks, last := collect(ch)
	require.Len(t, toks, 2)
	require.Equal(t, FinishLength, last.Finish)
	collect(decoding)

	steps, _ := b.record()
	prefillSteps, mixed := 0, 0
	fed := 0
	for _, st := range steps {
		total := 0
		var hasDecode, hasChunk bool
		for _, r := range st {
			total += r.N
			if r.Seq == 1 {
				require.Equal(t, 1, r.N, "a decode feeds one token")
				hasDecode = true
			}
			if r.Seq == 2 && r.Pos < len(long) {
				require.LessOrEqual(t, r.N, 4, "chunk above PrefillChunk")
				require.Equal(t, fed, r.Pos)
				fed += r.N
				prefillSteps++
				hasChunk = true
				require.Equal(t, r.Pos+r.N == len(long), r.Logits, "logits only after the last prompt token")
			}
		}
		require.LessOrEqual(t, total, 6, "step above MaxBatchTokens")
		if hasDecode && hasChunk {
			mixed++
		}
	}
	require.Equal(t, len(long), fed)
	require.GreaterOrEqual(t, prefillSteps, 6) // 22 tokens, ≤ 4 per step
	require.GreaterOrEqual(t, mixed, 5, "prefill chunks did not share steps with the decode")

	// the engine's counters split the steps by kind: every recorded entry
	// is in a decode or a prefill step's rows, and only prefill steps
	// carry prompt chunks
	rows := 0
	for _, st := range steps {
		rows += len(st)
	}
	es := e.Stats()
	require.EqualValues(t, len(steps), es.DecodeSteps+es.PrefillSteps)
	require.EqualValues(t, rows, es.DecodeRows+es.PrefillRows)
	require.GreaterOrEqual(t, es.PrefillRows, int64(prefillSteps+mixed))
	require.GreaterOrEqual(t, es.DecodeRows, es.DecodeSteps)
	require.LessOrEqual(t, es.DecodeRows, 2*es.DecodeSteps, "two sequences at most decode together here")
	require.Positive(t, es.PrefillSeconds)
	require.Less(t, es.PrefillSeconds, es.BackendSeconds)
}

func TestEngineCancelFreesSequence(t *testing.T) {
	const vocab = 16
	b := newFakeBackend(vocab, 512, hashLogits(vocab))
	b.delay = time.Millisecond
	e := newTestEngine(b, hashVocab(vocab), EngineConfig{})
	defer e.Close()

	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Submit(ctx, Request{Prompt: []int32{1, 2}, IgnoreEOS: true})
	require.NoError(t, err)
	<-ch
	require.Equal(t, 1, e.Stats().Running)
	cancel()
	_, _, last := collect(ch) // closes
	require.ErrorIs(t, last.Err, context.Canceled)
	require.Eventually(t, func() bool { return e.Stats().Running == 0 }, time.Second, time.Millisecond)
	_, freed := b.record()
	require.Equal(t, []SeqID{1}, freed)
}

func TestEngineOverloaded(t *testing.T) {
	b := newFakeBackend(16, 64, hashLogits(16))
	b.gate = make(chan struct{})
	e := newTestEngine(b, hashVocab(16), EngineConfig{MaxRunning: 1, MaxQueue: 1})
	defer e.Close()
	req := Request{Prompt: []int32{1}, MaxTokens: 2}
	a, err := e.Submit(context.Background(), req)
	require.NoError(t, err)
	q, err := e.Submit(context.Background(), req)
	require.NoError(t, err)
	_, err = e.Submit(context.Background(), req)
	require.ErrorIs(t, err, ErrOverloaded)
	close(b.gate) // let everything run
	for _, ch := range []<-chan Event{a, q} {
		_, toks, last := collect(ch)
		require.NoError(t, last.Err)
		require.Len(t, toks, 2)
	}
}

// With NoQueue a request beyond MaxRunning is refused at once, not queued.
func TestEngineNoQueue(t *testing.T) {
	b := newFakeBackend(16, 64, hashLogits(16))
	b.gate = make(chan struct{})
	e := newTestEngine(b, hashVocab(16), EngineConfig{MaxRunning: 1, MaxQueue: NoQueue})
	defer e.Close()
	require.Zero(t, e.Config().MaxQueue)
	req := Request{Prompt: []int32{1}, MaxTokens: 2}
	a, err := e.Submit(context.Background(), req)
	require.NoError(t, err)
	_, err = e.Submit(context.Background(), req)
	require.ErrorIs(t, err, ErrOverloaded)
	close(b.gate)
	_, toks, last := collect(a)
	require.NoError(t, last.Err)
	require.Len(t, toks, 2)
}

func TestEngineSubmitErrors(t *testing.T) {
	b := newFakeBackend(16, 8, hashLogits(16))
	e := newTestEngine(b, hashVocab(16), EngineConfig{})
	defer e.Close()
	nan := float32(0)
	nan /= nan
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"empty prompt", Request{}, ErrBadRequest},
		{"negative max tokens", Request{Prompt: []int32{1}, MaxTokens: -1}, ErrBadRequest},
		{"token outside vocabulary", Request{Prompt: []int32{16}}, ErrBadRequest},
		{"negative token", Request{Prompt: []int32{-1}}, ErrBadRequest},
		{"top logprobs too many", Request{Prompt: []int32{1}, TopLogprobs: 21}, ErrBadRequest},
		{"NaN temperature", Request{Prompt: []int32{1}, Sampling: SamplingParams{Temperature: nan}}, ErrBadRequest},
		{"bias outside vocabulary", Request{Prompt: []int32{1}, Sampling: SamplingParams{LogitBias: map[int32]float32{99: 1}}}, ErrBadRequest},
		{"invalid UTF-8 stop", Request{Prompt: []int32{1}, Stop: []string{"\xff"}}, ErrBadRequest},
		{"prompt fills the context", Request{Prompt: make([]int32, 8)}, ErrTooLong},
		{"prompt leaves one position", Request{Prompt: make([]int32, 7)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := e.Submit(context.Background(), tc.req)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			_, toks, last := collect(ch)
			require.Equal(t, FinishLength, last.Finish)
			require.Len(t, toks, 1)
		})
	}
}

func TestEngineLengthLimits(t *testing.T) {
	tests := []struct {
		name      string
		ctxLen    int
		prompt    int
		maxTokens int
		want      int
	}{
		{"max tokens exact", 64, 3, 7, 7},
		{"max tokens 1", 64, 3, 1, 1},
		{"context full", 10, 4, 0, 6},
		{"context full before max tokens", 10, 4, 50, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend(16, tc.ctxLen, hashLogits(16))
			e := newTestEngine(b, hashVocab(16), EngineConfig{})
			defer e.Close()
			ch, err := e.Submit(context.Background(), Request{Prompt: make([]int32, tc.prompt), MaxTokens: tc.maxTokens})
			require.NoError(t, err)
			_, toks, last := collect(ch)
			require.NoError(t, last.Err)
			require.True(t, last.Done)
			require.Equal(t, FinishLength, last.Finish)
			require.Len(t, toks, tc.want)
			require.Equal(t, Usage{PromptTokens: tc.prompt, CompletionTokens: tc.want}, last.Usage)
		})
	}
}

// storyVocab and storyTable generate "hel","lo"," w","orld","!", then EOS.
var storyVocab = &fakeVocab{
	pieces: []string{"<s>", "</s>", "hel", "lo", " w", "orld", "!"},
	eog:    map[int32]bool{1: true},
}

var storyTable = map[int32]int32{0: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 1, 1: 2}

func TestEngineStopStrings(t *testing.T) {
	tests := []struct {
		name      string
		stop      []string
		ignoreEOS bool
		maxTokens int
		text      string
		finish    FinishReason
		tokens    int // tokens reported in events
	}{
		{"no stop: EOS ends", nil, false, 0, "hello world!", FinishStop, 5},
		{"stop across token boundaries", []string{"lo w"}, false, 0, "hel", FinishStop, 1},
		{"stop inside one token", []string{"orl"}, false, 0, "hello w", FinishStop, 3},
		{"held text released when the match fails", []string{"lo x"}, false, 0, "hello world!", FinishStop, 5},
		{"earliest of several stops", []string{"world", "lo"}, false, 0, "hel", FinishStop, 1},
		{"partial stop released at max tokens", []string{"lo wx"}, false, 3, "hello w", FinishLength, 3},
		{"ignore EOS goes on", nil, true, 8, "hello world!hello", FinishLength, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend(len(storyVocab.pieces), 64, tableLogits(len(storyVocab.pieces), storyTable))
			e := newTestEngine(b, storyVocab, EngineConfig{})
			defer e.Close()
			ch, err := e.Submit(context.Background(), Request{
				Prompt: []int32{0}, Stop: tc.stop, IgnoreEOS: tc.ignoreEOS, MaxTokens: tc.maxTokens,
			})
			require.NoError(t, err)
			var text string
			var ntok int
			var last Event
			for ev := range ch {
				for _, s := range tc.stop {
					require.NotContains(t, ev.Text, s)
				}
				text += ev.Text
				ntok += len(ev.Tokens)
				last = ev
			}
			require.NoError(t, last.Err)
			require.Equal(t, tc.text, text)
			require.Equal(t, tc.finish, last.Finish)
			require.Equal(t, tc.tokens, ntok)
		})
	}
}

func TestEngineLogprobsInEvents(t *testing.T) {
	b := newFakeBackend(len(storyVocab.pieces), 64, tableLogits(len(storyVocab.pieces), storyTable))
	e := newTestEngine(b, storyVocab, EngineConfig{})
	defer e.Close()
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{0}, MaxTokens: 2, Logprobs: true, TopLogprobs: 2})
	require.NoError(t, err)
	var gens []GeneratedToken
	for ev := range ch {
		gens = append(gens, ev.Tokens...)
	}
	require.Len(t, gens, 2)
	require.Equal(t, int32(2), gens[0].Token)
	require.Equal(t, []byte("hel"), gens[0].Bytes)
	require.Less(t, gens[0].Logprob, float32(0))
	require.Greater(t, gens[0].Logprob, float32(-0.01)) // 10 against six zeros
	require.Len(t, gens[0].Top, 2)
	require.Equal(t, int32(2), gens[0].Top[0].Token)
}

func TestEngineDrain(t *testing.T) {
	b := newFakeBackend(16, 128, hashLogits(16))
	b.delay = time.Millisecond
	e := newTestEngine(b, hashVocab(16), EngineConfig{})
	defer e.Close()
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 20})
	require.NoError(t, err)
	e.Drain()
	_, err = e.Submit(context.Background(), Request{Prompt: []int32{1}})
	require.ErrorIs(t, err, ErrDraining)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, e.WaitIdle(ctx))
	_, toks, last := collect(ch)
	require.NoError(t, last.Err)
	require.Len(t, toks, 20)
}

func TestEngineSlowConsumer(t *testing.T) {
	b := newFakeBackend(16, 256, hashLogits(16))
	e := newTestEngine(b, hashVocab(16), EngineConfig{EventBuffer: 3})
	defer e.Close()
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 100})
	require.NoError(t, err)
	// Nobody reads; the engine must cancel it, not stall.
	require.Eventually(t, func() bool { _, freed := b.record(); return len(freed) == 1 }, 2*time.Second, time.Millisecond)
	_, toks, last := collect(ch)
	require.ErrorIs(t, last.Err, ErrSlowConsumer)
	require.True(t, last.Done)
	require.Len(t, toks, 3)
}

func TestEngineClose(t *testing.T) {
	b := newFakeBackend(16, 1024, hashLogits(16))
	b.delay = time.Millisecond
	e := newTestEngine(b, hashVocab(16), EngineConfig{})
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{1}, IgnoreEOS: true})
	require.NoError(t, err)
	<-ch
	require.NoError(t, e.Close())
	_, _, last := collect(ch)
	require.ErrorIs(t, last.Err, ErrClosed)
	require.True(t, b.closed)
	_, err = e.Submit(context.Background(), Request{Prompt: []int32{1}})
	require.ErrorIs(t, err, ErrDraining)
	require.NoError(t, e.Close(), "Close twice")
}

func TestEngineBackendError(t *testing.T) {
	b := newFakeBackend(16, 64, func([]int32) []float32 { return nil })
	e := newTestEngine(b, hashVocab(16), EngineConfig{})
	defer e.Close()
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{1}})
	require.NoError(t, err)
	_, _, last := collect(ch)
	require.ErrorIs(t, last.Err, ErrBackend)
	_, freed := b.record()
	require.Equal(t, []SeqID{1}, freed)
	require.Equal(t, 0, e.Stats().Running, fmt.Sprint(e.Stats()))
}

func TestEngineMask(t *testing.T) {
	b := newFakeBackend(len(storyVocab.pieces), 64, tableLogits(len(storyVocab.pieces), storyTable))
	e := newTestEngine(b, storyVocab, EngineConfig{})
	defer e.Close()
	m := &banMask{banned: map[int32]bool{3: true}}
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{0}, MaxTokens: 3, Mask: m})
	require.NoError(t, err)
	_, toks, _ := collect(ch)
	require.Equal(t, []int32{2, 0, 2}, toks) // "lo" banned: the tie among the rest goes to id 0
	require.Equal(t, toks, m.accepted)
}
