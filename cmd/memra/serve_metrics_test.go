package main

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeMetricsPort: with API keys /metrics needs a key on the API's
// port, and --metrics-port serves the same series without one (what an
// inference gateway's endpoint picker scrapes), and nothing else.
func TestServeMetricsPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	c := startServe(t, "--api-keys", "sk-test", "--metrics-port", strconv.Itoa(port), "--device", "cpu")
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, _ := get(c.url + "/metrics")
	require.Equal(t, http.StatusUnauthorized, status)
	metrics := "http://127.0.0.1:" + strconv.Itoa(port)
	status, body := get(metrics + "/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `vllm:num_requests_waiting{model_name="stories260K"} 0`)
	require.Contains(t, body, `memra_requests_queued{model="stories260K"} 0`)
	status, _ = get(metrics + "/v1/models")
	require.Equal(t, http.StatusNotFound, status, "the metrics port serves metrics only")
}
