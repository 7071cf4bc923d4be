package serve

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/serve/plugin"
)

// syncBuffer is a log sink the server's goroutines may write together.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPluginCrashBody: a template plugin that panics gives the client a
// 500 with the plugin's message and a request id, and no stack trace; the
// trace is in the server log under that request id.
func TestPluginCrashBody(t *testing.T) {
	goBin := filepath.Join(goruntime.GOROOT(), "bin", "go")
	wasm := filepath.Join(t.TempDir(), "hostile.wasm")
	build := exec.Command(goBin, "build", "-trimpath", "-buildmode=c-shared", "-o", wasm, "./plugin/testdata/hostile")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	set, err := plugin.Open(context.Background(), plugin.SetConfig{Host: plugin.Config{NoCache: true},
		Templates: []string{"fake=" + wasm}})
	require.NoError(t, err)
	t.Cleanup(func() { set.Close() })
	var log syncBuffer
	s := newTestServer(t, nil, func(c *Config) {
		c.Plugins = set
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	status, _, body := s.do(t, "POST", "/v1/chat/completions",
		`{"model":"fake","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"mode":"panic"}}`)
	require.Equal(t, http.StatusInternalServerError, status, string(body))
	require.Contains(t, string(body), "the chat template plugin failed")
	require.Contains(t, string(body), "panic: hostile panic")
	require.NotContains(t, string(body), "goroutine")
	require.NotContains(t, string(body), ".go:")
	id := regexp.MustCompile(`request id (req_[0-9a-f]{24})`).FindStringSubmatch(string(body))
	require.NotNil(t, id, string(body))
	require.Contains(t, log.String(), "request_id="+id[1])
	require.Contains(t, log.String(), "goroutine 1 [running]")
}
