//go:build realengine

// Build tag: runtime/load (which the embedded model needs) was not in the
// tree when this test was written; drop the tag once `go build ./cmd/memra`
// works, or run it with -tags realengine.

package serve

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/serve/chat"
)

// TestRealEngineSharedSteps runs the embedded stories260K model on the CPU
// backend: 8 concurrent streaming clients must share decode steps and each
// get the same greedy text as when it runs alone.
func TestRealEngineSharedSteps(t *testing.T) {
	m, err := builtin.Open()
	require.NoError(t, err)
	defer m.Close()
	const clients = 8
	b, err := cpu.New(m, cpu.Options{Threads: 1, MaxSeqs: clients})
	require.NoError(t, err)
	eng := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: clients, MaxQueue: clients})
	defer eng.Close()
	s, err := New(Config{Host: "127.0.0.1", Models: []Model{{ID: "stories", Engine: FromRuntime(eng), Template: chat.Fallback()}}})
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	srv := &testServer{Server: s, ts: ts}

	prompts := []string{"Once upon a time", "The cat", "Lily went to", "One day, a big", "Tom had a", "The sun was", "A little bird", "Mom said"}
	body := func(p string) string {
		return fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":40,"temperature":0,"ignore_eos":true,"stream":true}`, p)
	}
	streamText := func(t *testing.T, p string) string {
		status, _, raw := srv.do(t, "POST", "/v1/completions", body(p))
		require.Equal(t, 200, status, string(raw))
		var text strings.Builder
		for _, c := range streamJSON(t, raw) {
			for _, ch := range c.(map[string]any)["choices"].([]any) {
				text.WriteString(ch.(map[string]any)["text"].(string))
			}
		}
		return text.String()
	}

	alone := make([]string, clients)
	for i, p := range prompts {
		alone[i] = streamText(t, p)
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
			together[i] = streamText(t, p)
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
