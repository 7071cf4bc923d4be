package serve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const streamBody = `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":20,"temperature":0,"stream":true}`

func TestOverload429(t *testing.T) {
	eng := newFakeEngine()
	eng.maxRunning, eng.maxQueue, eng.delay = 1, 1, 5*time.Millisecond
	s := newTestServer(t, eng, nil)
	const clients = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	retryAfter := ""
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, hdr, body := s.do(t, "POST", "/v1/chat/completions", streamBody)
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status == http.StatusTooManyRequests {
				retryAfter = hdr.Get("Retry-After")
				require.Contains(t, string(body), `"code":"rate_limit_exceeded"`)
			}
		}()
	}
	wg.Wait()
	require.Positive(t, statuses[200], "%v", statuses)
	require.Positive(t, statuses[429], "%v", statuses)
	require.Equal(t, clients, statuses[200]+statuses[429], "only 200 and 429: %v", statuses)
	require.Equal(t, "1", retryAfter)
}

// openStream starts a streaming request and returns a reader of its lines.
func openStream(t *testing.T, s *testServer, ctx context.Context, body string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", s.ts.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	resp, err := s.ts.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp, bufio.NewReader(resp.Body)
}

// readData returns the next "data:" payload.
func readData(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			return d
		}
	}
}

func TestDisconnectFreesSlot(t *testing.T) {
	eng := newFakeEngine()
	eng.delay = 10 * time.Millisecond
	s := newTestServer(t, eng, nil)
	ctx, cancel := context.WithCancel(context.Background())
	resp, r := openStream(t, s, ctx, strings.Replace(streamBody, `"max_tokens":20`, `"max_tokens":200,"ignore_eos":true`, 1))
	readData(t, r) // role
	readData(t, r) // first content
	require.Equal(t, 1, eng.Stats().Running)
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { return eng.Stats().Running == 0 && eng.cancelled.Load() == 1 },
		2*time.Second, 5*time.Millisecond, "the engine sequence must end when the client leaves")
	require.Zero(t, eng.finished.Load())
}

func TestDrainLetsStreamFinish(t *testing.T) {
	eng := newFakeEngine()
	eng.delay = 5 * time.Millisecond
	s := newTestServer(t, eng, nil)
	resp, r := openStream(t, s, context.Background(), streamBody)
	defer resp.Body.Close()
	readData(t, r)
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(context.Background()) }()
	require.Eventually(t, s.isDraining, time.Second, time.Millisecond)

	// New work and readiness are refused while draining; liveness is not.
	status, hdr, body := s.do(t, "POST", "/v1/chat/completions", chatOK)
	require.Equal(t, http.StatusServiceUnavailable, status, string(body))
	require.NotEmpty(t, hdr.Get("Retry-After"))
	status, _, _ = s.do(t, "GET", "/ready", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	status, _, _ = s.do(t, "GET", "/health", "")
	require.Equal(t, http.StatusOK, status)

	// The in-flight stream runs to its end.
	var last, prev string
	for last != "[DONE]" {
		prev, last = last, readData(t, r)
	}
	require.Contains(t, prev, `"finish_reason":"length"`)
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("Drain did not return after the stream finished")
	}
}

func TestDrainTimeoutCancels(t *testing.T) {
	eng := newFakeEngine()
	eng.delay = 20 * time.Millisecond
	s := newTestServer(t, eng, nil)
	resp, r := openStream(t, s, context.Background(), strings.Replace(streamBody, `"max_tokens":20`, `"max_tokens":200,"ignore_eos":true`, 1))
	defer resp.Body.Close()
	readData(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Drain(ctx)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.Eventually(t, func() bool { return eng.Stats().Running == 0 }, 2*time.Second, 5*time.Millisecond)
}

func TestPublicBindNeedsKeys(t *testing.T) {
	for _, c := range []struct {
		host string
		keys []string
		ok   bool
	}{
		{"127.0.0.1", nil, true},
		{"localhost", nil, true},
		{"::1", nil, true},
		{"[::1]", nil, true},
		{"0.0.0.0", nil, false},
		{"", nil, false},
		{"192.168.1.5", nil, false},
		{"::", nil, false},
		{"0.0.0.0", []string{"k1"}, true},
		{"0.0.0.0", []string{"  "}, false},
	} {
		_, err := New(Config{Host: c.host, APIKeys: c.keys, Models: []Model{{ID: "m", Engine: newFakeEngine()}}})
		if c.ok {
			require.NoError(t, err, c.host)
		} else {
			require.ErrorIs(t, err, ErrPublicWithoutKeys, c.host)
			require.Contains(t, err.Error(), "--api-keys-file")
		}
	}
}

func TestAuth(t *testing.T) {
	s := newTestServer(t, nil, func(c *Config) { c.Host = "0.0.0.0"; c.APIKeys = []string{"sk-one", "sk-two"} })
	for _, c := range []struct {
		name, method, path, body, auth string
		status                         int
	}{
		{"no key", "POST", "/v1/chat/completions", chatOK, "", 401},
		{"wrong key", "POST", "/v1/chat/completions", chatOK, "Bearer sk-three", 401},
		{"prefix of key", "POST", "/v1/chat/completions", chatOK, "Bearer sk-on", 401},
		{"wrong scheme", "POST", "/v1/chat/completions", chatOK, "Basic sk-one", 401},
		{"first key", "POST", "/v1/chat/completions", chatOK, "Bearer sk-one", 200},
		{"second key", "POST", "/v1/chat/completions", chatOK, "Bearer sk-two", 200},
		{"models no key", "GET", "/v1/models", "", "", 401},
		{"models key", "GET", "/v1/models", "", "Bearer sk-two", 200},
		{"metrics no key", "GET", "/metrics", "", "", 401},
		{"metrics wrong key", "GET", "/metrics", "", "Bearer nope", 401},
		{"metrics key", "GET", "/metrics", "", "Bearer sk-one", 200},
		{"health open", "GET", "/health", "", "", 200},
		{"ready open", "GET", "/ready", "", "", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, _, body := s.do(t, c.method, c.path, c.body, "Authorization", c.auth)
			require.Equal(t, c.status, status, string(body))
			if status == 401 {
				require.Contains(t, string(body), `"code":"invalid_api_key"`)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	eng := newFakeEngine()
	s := newTestServer(t, eng, nil)
	status, _, body := s.do(t, "POST", "/v1/chat/completions", streamBody)
	require.Equal(t, 200, status, string(body))
	status, _, _ = s.do(t, "POST", "/v1/chat/completions", `{"model":"nope","messages":[]}`)
	require.Equal(t, 404, status)
	status, _, body = s.do(t, "GET", "/metrics", "")
	require.Equal(t, 200, status)
	text := string(body)
	for _, want := range []string{
		`memra_http_requests_total{endpoint="/v1/chat/completions",status="200"} 1`,
		`memra_http_requests_total{endpoint="/v1/chat/completions",status="404"} 1`,
		`memra_time_to_first_token_seconds_count{model="fake"} 1`,
		`memra_inter_token_latency_seconds_count{model="fake"} 19`,
		`memra_prompt_tokens_total{model="fake"} 20`,
		`memra_completion_tokens_total{model="fake"} 20`,
		`memra_requests_running{model="fake"} 0`,
		`memra_requests_queued{model="fake-2"} 0`,
		`memra_kv_cache_usage_ratio{model="fake"} 0`,
	} {
		require.Contains(t, text, want)
	}
}

func TestMaxTokensExact(t *testing.T) {
	s := newTestServer(t, nil, nil)
	for _, n := range []int{1, 7, 39} {
		status, _, body := s.do(t, "POST", "/v1/completions",
			`{"model":"fake","prompt":"a","temperature":0,"max_tokens":`+itoa(n)+`}`)
		require.Equal(t, 200, status)
		require.Contains(t, string(body), `"completion_tokens":`+itoa(n)+`,`)
		require.Contains(t, string(body), `"finish_reason":"length"`)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDrainTimeoutEndsRequests: when the drain times out, every stream
// still running gets exactly one error event of type server_error, code
// server_shutting_down, and then ends (no finish_reason, no [DONE]); a
// blocking request gets 503 with Retry-After and the same error.
func TestDrainTimeoutEndsRequests(t *testing.T) {
	eng := newFakeEngine()
	eng.delay = 20 * time.Millisecond
	s := newTestServer(t, eng, nil)
	long := strings.Replace(streamBody, `"max_tokens":20`, `"max_tokens":200,"ignore_eos":true`, 1)
	const streams = 5
	bodies := make([]io.Reader, streams)
	for i := range streams {
		resp, r := openStream(t, s, context.Background(), long)
		defer resp.Body.Close()
		readData(t, r) // role
		bodies[i] = r
	}
	type result struct {
		status int
		hdr    http.Header
		body   []byte
	}
	blocking := make(chan result, 1)
	go func() {
		status, hdr, body := s.do(t, "POST", "/v1/chat/completions", strings.Replace(long, `"stream":true`, `"stream":false`, 1))
		blocking <- result{status, hdr, body}
	}()
	require.Eventually(t, func() bool { return eng.Stats().Running == streams+1 }, 2*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Drain(ctx), context.DeadlineExceeded)

	for i, r := range bodies {
		rest, err := io.ReadAll(r)
		require.NoError(t, err)
		events := sseEvents(t, rest)
		require.NotEmpty(t, events, "stream %d", i)
		last := events[len(events)-1]
		require.Contains(t, last, `"type":"server_error"`, "stream %d", i)
		require.Contains(t, last, `"code":"server_shutting_down"`, "stream %d", i)
		for _, e := range events[:len(events)-1] {
			require.NotContains(t, e, `"error"`, "stream %d: one error event", i)
			require.NotContains(t, e, `"finish_reason":"`, "stream %d", i)
		}
	}
	res := <-blocking
	require.Equal(t, http.StatusServiceUnavailable, res.status, string(res.body))
	require.Equal(t, "1", res.hdr.Get("Retry-After"))
	require.Contains(t, string(res.body), `"type":"server_error"`)
	require.Contains(t, string(res.body), `"code":"server_shutting_down"`)
}
