package serve

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runServer serves a fake model through Run (so with its connection
// limits) on a loopback port until the test ends, and returns its address.
func runServer(t *testing.T, mod func(*Config)) string {
	t.Helper()
	cfg := Config{Host: "127.0.0.1", Models: []Model{{ID: "fake", Engine: newFakeEngine(), Template: fakeTemplate{}}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-ran)
	})
	return ln.Addr().String()
}

// rawConn dials addr and closes the connection when the test ends (before
// the server stops).
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// slowPost sends the headers of a POST announcing a 100-byte body, then one
// byte of it.
func slowPost(t *testing.T, c net.Conn, auth string) {
	t.Helper()
	req := "POST /v1/completions HTTP/1.1\r\nHost: memra\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	_, err := io.WriteString(c, req+"\r\n{")
	require.NoError(t, err)
}

// readResponse reads one response from c within limit, then checks that
// the server closes the connection.
func readResponse(t *testing.T, c net.Conn, limit time.Duration) (*http.Response, string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(limit)))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no response within %v", limit)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server must close the connection")
	return resp, string(body)
}

// A body that stops arriving gets 408 after --read-timeout, and the
// connection is closed.
func TestSlowBodyTimesOut(t *testing.T) {
	addr := runServer(t, func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	c := rawConn(t, addr)
	start := time.Now()
	slowPost(t, c, "")
	resp, body := readResponse(t, c, 5*time.Second)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, body)
	require.Contains(t, body, `"code":"request_timeout"`)
	require.Less(t, time.Since(start), 3*time.Second)
}

// Without a valid key the request is refused before its body is read: the
// 401 comes at once, not after the body (or the read timeout), and the
// connection is closed.
func TestUnauthenticatedSlowBody(t *testing.T) {
	addr := runServer(t, func(c *Config) { c.APIKeys = []string{"sk-one"} })
	for _, auth := range []string{"", "Bearer sk-two"} {
		c := rawConn(t, addr)
		slowPost(t, c, auth)
		resp, body := readResponse(t, c, 2*time.Second)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	}
}

// A kept-alive connection with no new request is closed after
// --idle-timeout.
func TestIdleTimeout(t *testing.T) {
	addr := runServer(t, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	c := rawConn(t, addr)
	_, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: memra\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	start := time.Now()
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle connection must be closed")
	require.Less(t, time.Since(start), 2*time.Second)
}

// With --max-conns connections open (idle, sending nothing), /health,
// /ready and /metrics still answer on new connections, other paths get a
// 503, and a freed slot serves again.
func TestMaxConns(t *testing.T) {
	addr := runServer(t, func(c *Config) { c.MaxConns = 2 })
	held := []net.Conn{rawConn(t, addr), rawConn(t, addr)}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		resp, err := client.Get("http://" + addr + path)
		require.NoError(t, err, path)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	post := func() (int, string) {
		resp, err := client.Post("http://"+addr+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"fake","prompt":"x","max_tokens":2}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/health", "/ready", "/metrics"} {
		status, body := get(path)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
	}
	status, body := post()
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, `"code":"too_many_connections"`)

	held[0].Close()
	require.Eventually(t, func() bool { status, _ := post(); return status == http.StatusOK },
		3*time.Second, 10*time.Millisecond, "a freed slot serves again")
}

// The read timeout bounds the request, not the response: a stream that
// outlasts it runs to its end.
func TestReadTimeoutSparesLongStreams(t *testing.T) {
	eng := newFakeEngine()
	eng.delay = 20 * time.Millisecond
	addr := runServer(t, func(c *Config) {
		c.ReadTimeout = 100 * time.Millisecond
		c.Models[0].Engine = eng
	})
	start := time.Now()
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Greater(t, time.Since(start), 300*time.Millisecond)
	ev := sseEvents(t, body)
	require.Equal(t, "[DONE]", ev[len(ev)-1], string(body))
}
