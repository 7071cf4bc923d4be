package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeSurvivesShrunkModel: a GGUF truncated while `memra serve` runs
// it on the CPU used to kill the process with SIGBUS through the memory
// map. Now the request that meets the fault, and every later request to
// that model, get a 503 naming the model and saying its file changed;
// /ready reports it, /health answers, and the server still drains and
// exits 0. The server runs in a child process, with the exact products:
// the int8 products read their own copy of the matrices, made at load, so
// only the embedding rows still come from the file.
func TestServeSurvivesShrunkModel(t *testing.T) {
	raw, err := os.ReadFile(storiesGGUF)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "stories.gguf")
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	c := startServeEnv(t, []string{"MEMRA_CPU_PRODUCTS=exact"}, path, "--device", "cpu", "--threads", "2")

	get := func(p string) (int, string) {
		resp, err := http.Get(c.url + p)
		require.NoError(t, err, "memra serve:\n%s", c.log)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	complete := func() (int, string) {
		resp, err := http.Post(c.url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"stories","prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
		require.NoError(t, err, "memra serve:\n%s", c.log)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := complete()
	require.Equal(t, http.StatusOK, status, body)

	require.NoError(t, os.Truncate(path, int64(len(raw)/2)))
	for range 2 { // the request that faults, then one refused up front
		status, body = complete()
		require.Equal(t, http.StatusServiceUnavailable, status, body)
		require.Contains(t, body, `model \"stories\" is out of service`)
		require.Contains(t, body, "file changed")
		require.Contains(t, body, `"code":"model_file_changed"`)
	}
	status, body = get("/health")
	require.Equal(t, http.StatusOK, status, body)
	status, body = get("/ready")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, "stories")
	require.Contains(t, c.log.String(), "model out of service")

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-c.done:
		require.NoError(t, c.err, "memra serve:\n%s", c.log)
	case <-time.After(30 * time.Second):
		t.Fatalf("memra serve did not exit after SIGTERM:\n%s", c.log)
	}
}
