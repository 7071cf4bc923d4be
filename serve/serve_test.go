package serve

import (
	"bufio"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// testServer is a Server over fake engines behind an httptest listener.
type testServer struct {
	*Server
	ts     *httptest.Server
	engine *fakeEngine
}

func newTestServer(t *testing.T, engine *fakeEngine, mod func(*Config)) *testServer {
	t.Helper()
	if engine == nil {
		engine = newFakeEngine()
	}
	cfg := Config{
		Host:      "127.0.0.1",
		Models:    []Model{{ID: "fake", Engine: engine, Template: fakeTemplate{}}, {ID: "fake-2", Engine: newFakeEngine(), Template: fakeTemplate{}}},
		StartTime: time.Unix(1700000000, 0),
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &testServer{Server: s, ts: ts, engine: engine}
}

// do sends a request and returns the status, headers and body.
func (s *testServer) do(t *testing.T, method, path, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.ts.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "SSE line without data: %q", line)
		out = append(out, data)
	}
	return out
}

// normalise replaces ids and timestamps so responses compare across runs.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch {
			case k == "id" && isGenID(e):
				x[k] = "ID"
			case k == "created":
				x[k] = 0
			default:
				x[k] = normalise(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = normalise(e)
		}
	}
	return v
}

func isGenID(v any) bool {
	s, ok := v.(string)
	return ok && (strings.HasPrefix(s, "chatcmpl-") || strings.HasPrefix(s, "cmpl-"))
}

// checkGolden compares got (JSON) with testdata/golden/name.json.
func checkGolden(t *testing.T, name string, got any) {
	t.Helper()
	b, err := json.MarshalIndent(normalise(got), "", "  ")
	require.NoError(t, err)
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./serve -update")
	require.JSONEq(t, string(want), string(b), "golden %s", name)
}

// streamJSON decodes every chunk of a stream; [DONE] must come last.
func streamJSON(t *testing.T, body []byte) []any {
	t.Helper()
	ev := sseEvents(t, body)
	require.NotEmpty(t, ev)
	require.Equal(t, "[DONE]", ev[len(ev)-1], "stream must end with [DONE]")
	var out []any
	for _, e := range ev[:len(ev)-1] {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(e), &m), e)
		out = append(out, m)
	}
	return out
}

func TestShapesGolden(t *testing.T) {
	s := newTestServer(t, nil, nil)
	cases := []struct {
		name, method, path, body string
		stream                   bool
	}{
		{"chat_blocking", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0}`, false},
		{"chat_stream", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0,"stream":true}`, true},
		{"chat_stream_usage", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"chat_stream_n2", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0,"stream":true,"n":2}`, true},
		{"chat_logprobs", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":2}`, false},
		{"chat_stop", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"temperature":0,"stop":["time","zzz"]}`, false},
		{"completion_blocking", "POST", "/v1/completions", `{"model":"fake","prompt":"Once","max_tokens":6,"temperature":0}`, false},
		{"completion_multi", "POST", "/v1/completions", `{"model":"fake","prompt":[[72,105],[72,105,33]],"max_tokens":3,"temperature":0,"n":2}`, false},
		{"completion_echo", "POST", "/v1/completions", `{"model":"fake","prompt":"Hi","max_tokens":3,"temperature":0,"echo":true}`, false},
		{"completion_stream", "POST", "/v1/completions", `{"model":"fake","prompt":"Once","max_tokens":3,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"completion_logprobs", "POST", "/v1/completions", `{"model":"fake","prompt":"Once","max_tokens":3,"temperature":0,"logprobs":2}`, false},
		{"models", "GET", "/v1/models", ``, false},
		{"model", "GET", "/v1/models/fake-2", ``, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, hdr, body := s.do(t, c.method, c.path, c.body)
			require.Equal(t, http.StatusOK, status, string(body))
			if c.stream {
				require.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
				checkGolden(t, c.name, byChoice(streamJSON(t, body)))
				return
			}
			require.Equal(t, "application/json", hdr.Get("Content-Type"))
			var v any
			require.NoError(t, json.Unmarshal(body, &v))
			checkGolden(t, c.name, v)
		})
	}
}

// byChoice orders stream chunks by choice index, keeping each choice's own
// order (choices of n > 1 interleave in any order); the usage chunk stays last.
func byChoice(chunks []any) []any {
	key := func(c any) int {
		ch, _ := c.(map[string]any)["choices"].([]any)
		if len(ch) == 0 {
			return 1 << 30
		}
		return int(ch[0].(map[string]any)["index"].(float64))
	}
	sort.SliceStable(chunks, func(i, j int) bool { return key(chunks[i]) < key(chunks[j]) })
	return chunks
}
