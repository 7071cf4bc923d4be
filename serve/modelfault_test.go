package serve

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// TestModelFileChanged: a request ending with runtime.ErrModelFile takes
// its model out of service: it and every later request to that model get a
// 503 naming the model (streams an error event), /ready turns 503 naming
// it, /health stays 200 and the other model still serves.
func TestModelFileChanged(t *testing.T) {
	eng := newFakeEngine()
	s := newTestServer(t, eng, nil)
	err := fmt.Errorf("%w: cpu: reading the mapped weights faulted: %w", runtime.ErrBackend, runtime.ErrModelFile)
	eng.failWith.Store(&err)

	status, _, body := s.do(t, "POST", "/v1/chat/completions", streamBody)
	require.Equal(t, http.StatusOK, status)
	events := sseEvents(t, body)
	require.Contains(t, events[len(events)-1], `"code":"model_file_changed"`)
	require.Contains(t, events[len(events)-1], `model \"fake\" is out of service`)

	eng.failWith.Store(nil) // later requests do not reach the engine
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := chatOK
		if path == "/v1/completions" {
			body = `{"model":"fake","prompt":"x","max_tokens":2}`
		}
		status, _, raw := s.do(t, "POST", path, body)
		require.Equal(t, http.StatusServiceUnavailable, status, string(raw))
		require.Contains(t, string(raw), `model \"fake\" is out of service: its file changed`)
	}
	status, _, raw := s.do(t, "GET", "/ready", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, string(raw), `\"fake\"`)
	status, _, _ = s.do(t, "GET", "/health", "")
	require.Equal(t, http.StatusOK, status)
	status, _, raw = s.do(t, "POST", "/v1/completions", `{"model":"fake-2","prompt":"x","max_tokens":2}`)
	require.Equal(t, http.StatusOK, status, string(raw))
}
