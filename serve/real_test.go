package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/serve/chat"
)

// slowBackend delays every step, so that a real stream is still running
// when a test acts on it (a disconnect, a drain).
type slowBackend struct {
	runtime.Backend
	delay time.Duration
}

func (b slowBackend) Step(ctx context.Context, batch []runtime.SeqStep) ([][]float32, error) {
	time.Sleep(b.delay)
	return b.Backend.Step(ctx, batch)
}

// realEngine runs the embedded stories260K model on the CPU backend with
// maxRunning slots, each step delayed by delay.
func realEngine(t *testing.T, maxRunning int, delay time.Duration) (*runtime.Engine, Model) {
	t.Helper()
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	var b runtime.Backend
	b, err = cpu.New(m, cpu.Options{Threads: 1, MaxSeqs: maxRunning})
	require.NoError(t, err)
	if delay > 0 {
		b = slowBackend{Backend: b, delay: delay}
	}
	eng := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: maxRunning, MaxQueue: maxRunning})
	t.Cleanup(func() { eng.Close() })
	return eng, Model{ID: "stories", Engine: FromRuntime(eng), Template: chat.Fallback()}
}

func realServer(t *testing.T, maxRunning int, delay time.Duration) (*runtime.Engine, *testServer) {
	t.Helper()
	eng, model := realEngine(t, maxRunning, delay)
	s, err := New(Config{Host: "127.0.0.1", Models: []Model{model}})
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return eng, &testServer{Server: s, ts: ts}
}

// realStream is a greedy streamed completion of the embedded model.
func realStream(prompt string, maxTokens int) string {
	return fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":0,"ignore_eos":true,"stream":true}`,
		prompt, maxTokens)
}

// streamText joins the text of every chunk of a completions stream.
func streamText(t *testing.T, raw []byte) string {
	t.Helper()
	var text strings.Builder
	for _, c := range streamJSON(t, raw) {
		for _, ch := range c.(map[string]any)["choices"].([]any) {
			text.WriteString(ch.(map[string]any)["text"].(string))
		}
	}
	return text.String()
}

// TestRealEngineSharedSteps runs the embedded stories260K model on the CPU
// backend: 8 concurrent streaming clients must share decode steps and each
// get the same greedy text as when it runs alone.
func TestRealEngineSharedSteps(t *testing.T) {
	t.Parallel()
	const clients = 8
	eng, srv := realServer(t, clients, 0)
	prompts := []string{"Once upon a time", "The cat", "Lily went to", "One day, a big", "Tom had a", "The sun was", "A little bird", "Mom said"}
	run := func(t *testing.T, p string) string {
		status, _, raw := srv.do(t, "POST", "/v1/completions", realStream(p, 40))
		require.Equal(t, 200, status, string(raw))
		return streamText(t, raw)
	}

	alone := make([]string, clients)
	for i, p := range prompts {
		alone[i] = run(t, p)
		require.NotEmpty(t, alone[i])
	}
	before := eng.Stats()
	together := make([]string, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			together[i] = run(t, p)
		}()
	}
	close(start)
	wg.Wait()
	after := eng.Stats()
	for i := range prompts {
		require.Equal(t, alone[i], together[i], "prompt %q", prompts[i])
	}
	steps := after.StepsRun - before.StepsRun
	tokens := after.TokensGenerated - before.TokensGenerated
	require.Equal(t, int64(clients*40), tokens)
	t.Logf("%d tokens in %d steps (%.1f sequences per step)", tokens, steps, float64(tokens)/float64(steps))
	require.Less(t, steps*2, tokens, "steps must hold several sequences on average")
}

// TestRealEngineDisconnectFreesSlot: a client that leaves mid-stream ends
// its sequence in the real engine (Running and the KV cache drop back, the
// sequence stops short of max_tokens) and the slot serves the next request.
func TestRealEngineDisconnectFreesSlot(t *testing.T) {
	t.Parallel()
	const maxTokens = 400 // 4 s at 10 ms a step: far longer than the test waits
	eng, srv := realServer(t, 1, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", srv.ts.URL+"/v1/completions",
		strings.NewReader(realStream("Once upon a time", maxTokens)))
	require.NoError(t, err)
	resp, err := srv.ts.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r := bufio.NewReader(resp.Body)
	readData(t, r)
	readData(t, r)
	st := eng.Stats()
	require.Equal(t, 1, st.Running)
	require.Positive(t, st.KVTokensUsed)
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { st = eng.Stats(); return st.Running == 0 && st.KVTokensUsed == 0 },
		2*time.Second, 5*time.Millisecond, "the engine sequence must end when the client leaves")
	require.Less(t, st.TokensGenerated, int64(maxTokens), "the sequence must stop short of max_tokens")

	// The one slot is free again.
	status, _, raw := srv.do(t, "POST", "/v1/completions", realStream("The cat", 4))
	require.Equal(t, http.StatusOK, status, string(raw))
	require.NotEmpty(t, streamText(t, raw))
}

// TestRealEngineDrainLetsStreamFinish: SIGTERM (Run's context ending)
// while a real stream runs: new requests get 503, the stream runs to
// max_tokens with the same greedy text as before, then Run returns nil.
func TestRealEngineDrainLetsStreamFinish(t *testing.T) {
	t.Parallel()
	const maxTokens = 40
	_, model := realEngine(t, 2, 5*time.Millisecond)
	s, err := New(Config{Host: "127.0.0.1", Models: []Model{model}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, ln, 10*time.Second) }()
	url := "http://" + ln.Addr().String() + "/v1/completions"
	body := realStream("Lily went to", maxTokens)

	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	want, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	wantText := streamText(t, want)

	resp, err = http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r := bufio.NewReader(resp.Body)
	first := readData(t, r)
	sigterm()
	require.Eventually(t, s.isDraining, time.Second, time.Millisecond)
	refused, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	refused.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, refused.StatusCode)

	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	chunks := streamJSON(t, []byte("data: "+first+"\n\n"+string(rest)))
	var text strings.Builder
	finish := ""
	for _, c := range chunks {
		ch := c.(map[string]any)["choices"].([]any)[0].(map[string]any)
		text.WriteString(ch["text"].(string))
		if f, ok := ch["finish_reason"].(string); ok {
			finish = f
		}
	}
	require.Equal(t, "length", finish)
	require.Equal(t, wantText, text.String())
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
}
