package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchServe(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path != "/v1/completions" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "wrong path or key", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cmd := newBenchCmd()
	out, errOut := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"serve", "--url", srv.URL, "--model", "m", "--endpoint", "completions", "--api-key", "k",
		"--concurrency", "1,2", "--requests", "4", "--prompt-tokens", "32", "--max-tokens", "3", "--out", dir)
	require.Equal(t, int64(1+4+4), n.Load())
	require.Contains(t, out, "## Serving load test: m at "+srv.URL+"/v1/completions")
	require.Regexp(t, `\| 1 \| 4 \| 4 \| 0 \| 0 \|`, out)
	require.Regexp(t, `\| 2 \| 4 \| 4 \| 0 \| 0 \|`, out)
	require.Contains(t, out, "server counted 40 on average")
	require.Contains(t, errOut, "c=2: 4 requests (4 ok")

	md, err := os.ReadFile(filepath.Join(dir, "serve-bench.md"))
	require.NoError(t, err)
	require.Equal(t, out, string(md))
	svg, err := os.ReadFile(filepath.Join(dir, "serve-bench.svg"))
	require.NoError(t, err)
	require.Contains(t, string(svg), "<svg")
	js, err := os.ReadFile(filepath.Join(dir, "serve-bench.json"))
	require.NoError(t, err)
	var rep struct {
		Levels []struct {
			Samples []json.RawMessage `json:"samples"`
		} `json:"levels"`
	}
	require.NoError(t, json.Unmarshal(js, &rep))
	require.Len(t, rep.Levels, 2)
	require.Len(t, rep.Levels[1].Samples, 4)
	require.NotContains(t, string(js), `"k"`, "the API key is not written out")
}

func TestBenchServeScenarioFlags(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		msgs, _ := body["messages"].([]any)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\" a%d\"}}]}\n\n", i)
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n",
			10*(len(msgs)-1))
	}))
	t.Cleanup(srv.Close)
	cmd := newBenchCmd()
	out, errOut := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"serve", "--url", srv.URL, "--scenario", "chat", "--turns", "3", "--history-tokens", "300", "--max-tokens", "3",
		"--concurrency", "1", "--requests", "6", "--temperature", "0.5", "--engine-rate", "1000")
	require.Len(t, bodies, 1+6)
	var sizes []int
	for _, b := range bodies {
		require.Equal(t, 0.5, b["temperature"])
		require.NotContains(t, b, "top_p")
		sizes = append(sizes, len(b["messages"].([]any)))
	}
	require.Equal(t, []int{1, 2, 4, 6, 2, 4, 6}, sizes, "the warm-up, then two conversations of three turns")
	require.Contains(t, out, "scenario chat: conversations of 3 turns")
	require.Contains(t, out, "Sampling: temperature 0.5.")
	require.Contains(t, out, "| TTFT p50 turns ≥ 2 ms |")
	// Cached tokens 10, 30, 50 of 100 each, twice.
	require.Regexp(t, `\| 600 \| 180 \| 30\.0 \| [0-9.]+ \|`, out)
	require.Contains(t, out, "% of the engine's 1,000")
	require.Contains(t, errOut, "% of prompt tokens cached")
	require.Contains(t, errOut, "of the engine's 1000")
}

func TestBenchServeBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--url", "ftp://x"}, "scheme must be http or https"},
		{[]string{"--turns", "0"}, "--turns 0: must be at least 1"},
		{[]string{"--prefixes", "0"}, "--prefixes 0: must be at least 1"},
		{[]string{"--prefix-tokens", "-4"}, "--prefix-tokens -4: must be at least 1"},
		{[]string{"--history-tokens", "0"}, "--history-tokens 0: must be at least 1"},
		{[]string{"--scenario", "burst"}, `Scenario (--scenario) "burst"`},
		{[]string{"--scenario", "shared-prefix", "--prompt-tokens", "1000"}, "PrefixTokens (--prefix-tokens) 1024 leaves -24 of PromptTokens (--prompt-tokens) 1000"},
		{[]string{"--scenario", "chat", "--history-tokens", "500"}, "HistoryTokens (--history-tokens) 500 is too short"},
		{[]string{"--top-p", "1.5"}, "TopP (--top-p) 1.5"},
		{[]string{"--temperature", "-1"}, "Temperature (--temperature) -1"},
		{[]string{"--temperature", "warm"}, `invalid argument "warm" for "--temperature"`},
		{[]string{"--engine-rate", "-5"}, "EngineRate (--engine-rate) -5"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newBenchCmd()
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(append([]string{"serve", "--url", "http://127.0.0.1:1", "--warmup", "0"}, tc.args...))
			require.ErrorContains(t, cmd.Execute(), tc.want)
		})
	}
}
