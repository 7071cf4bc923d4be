package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

func TestBenchServeBadFlags(t *testing.T) {
	cmd := newBenchCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"serve", "--url", "ftp://x", "--warmup", "0"})
	require.ErrorContains(t, cmd.Execute(), "scheme must be http or https")
}
