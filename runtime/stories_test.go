package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// storiesEngine runs the embedded stories260K model on the CPU backend
// behind the engine.
func storiesEngine(t *testing.T, cfg runtime.EngineConfig) *runtime.Engine {
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	b, err := cpu.New(m, cpu.Options{Threads: 2})
	require.NoError(t, err)
	e := runtime.NewEngine(b, m.Tokenizer, cfg)
	t.Cleanup(func() { e.Close() })
	return e
}

func generate(t *testing.T, ch <-chan runtime.Event) (string, []int32, runtime.Event) {
	t.Helper()
	var text strings.Builder
	var ids []int32
	var last runtime.Event
	for ev := range ch {
		text.WriteString(ev.Text)
		for _, g := range ev.Tokens {
			ids = append(ids, g.Token)
		}
		last = ev
	}
	require.NoError(t, last.Err)
	return text.String(), ids, last
}

// TestStoriesGreedyThroughEngine checks the documented greedy story of
// stories260K, token for token, through the scheduler and stream decoder.
func TestStoriesGreedyThroughEngine(t *testing.T) {
	e := storiesEngine(t, runtime.EngineConfig{})
	ch, err := e.Submit(context.Background(), runtime.Request{Prompt: []int32{e.Tokenizer().BOS()}, MaxTokens: 60})
	require.NoError(t, err)
	text, ids, last := generate(t, ch)
	want := []int32{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}
	require.Equal(t, want, ids[:20])
	require.True(t, strings.HasPrefix(text, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."), text)
	require.Equal(t, runtime.Usage{PromptTokens: 1, CompletionTokens: 60}, last.Usage)
}

// TestStoriesBatchedEqualsSolo runs seeded sampled requests together and
// alone: each must produce the same tokens either way.
func TestStoriesBatchedEqualsSolo(t *testing.T) {
	reqs := make([]runtime.Request, 6)
	for i := range reqs {
		s := uint64(i + 1)
		reqs[i] = runtime.Request{
			Prompt:    []int32{1, int32(300 + 20*i), int32(400 + i)},
			MaxTokens: 24 + i,
			Sampling:  runtime.SamplingParams{Temperature: 0.9, TopP: 0.95, Seed: &s},
			Stop:      []string{"zzz"},
		}
	}
	e := storiesEngine(t, runtime.EngineConfig{MaxRunning: 6, PrefillChunk: 2})
	chans := make([]<-chan runtime.Event, len(reqs))
	for i, r := range reqs {
		ch, err := e.Submit(context.Background(), r)
		require.NoError(t, err)
		chans[i] = ch
	}
	together := make([]string, len(reqs))
	for i, ch := range chans {
		together[i], _, _ = generate(t, ch)
	}
	for i, r := range reqs {
		ch, err := e.Submit(context.Background(), r)
		require.NoError(t, err)
		solo, _, _ := generate(t, ch)
		require.Equal(t, together[i], solo, "request %d", i)
	}
}

// TestStoriesPipelined: stories260K on the CPU backend, its decode steps
// pipelined (fed the tokens of the step before on the "device"), gives
// the text of plain steps, requests alone and four at a time.
func TestStoriesPipelined(t *testing.T) {
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	prompts := []string{"Once upon a time", "Lily saw a big dog", "The sun was", "Tom had a red ball"}
	run := func(pipe bool, running int) ([]string, runtime.Backend) {
		b, err := cpu.New(m, cpu.Options{Threads: 2})
		require.NoError(t, err)
		var eb runtime.Backend = b
		if pipe {
			eb = runtime.Pipelined(b)
		}
		e := runtime.NewEngine(eb, m.Tokenizer, runtime.EngineConfig{MaxRunning: running})
		defer e.Close()
		chans := make([]<-chan runtime.Event, len(prompts))
		for i, p := range prompts {
			ids := m.Tokenizer.Encode(p, true, false)
			chans[i], err = e.Submit(context.Background(), runtime.Request{Prompt: ids, MaxTokens: 24 + 6*i})
			require.NoError(t, err)
		}
		out := make([]string, len(prompts))
		for i, ch := range chans {
			out[i], _, _ = generate(t, ch)
		}
		return out, eb
	}
	for _, running := range []int{1, 4} {
		want, _ := run(false, running)
		got, b := run(true, running)
		require.Equal(t, want, got, "running %d", running)
		_, fed := runtime.PipelineCounts(b)
		require.Positive(t, fed)
	}
}

// timedBackend is a backend that reports fixed device times.
type timedBackend struct{ *cpu.Backend }

func (timedBackend) DeviceTimes() (int64, time.Duration, time.Duration) {
	return 12, 3 * time.Millisecond, 29 * time.Millisecond
}

// The engine's Stats carry a DeviceTimer backend's device times, and zero
// for a backend that times nothing.
func TestStatsDeviceTimes(t *testing.T) {
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	for _, timed := range []bool{false, true} {
		b, err := cpu.New(m, cpu.Options{Threads: 2})
		require.NoError(t, err)
		var be runtime.Backend = b
		if timed {
			be = timedBackend{b}
		}
		e := runtime.NewEngine(be, m.Tokenizer, runtime.EngineConfig{})
		st := e.Stats()
		e.Close()
		if !timed {
			require.Zero(t, st.DeviceSteps)
			require.Zero(t, st.DeviceInputSeconds+st.DeviceStepSeconds)
			continue
		}
		require.Equal(t, int64(12), st.DeviceSteps)
		require.InDelta(t, 0.003, st.DeviceInputSeconds, 1e-12)
		require.InDelta(t, 0.029, st.DeviceStepSeconds, 1e-12)
	}
}
