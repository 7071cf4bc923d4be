package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/serve/chat"
)

// pagedServer serves the embedded model on the CPU backend, its KV pages
// managed by the engine (prefix cache on), behind the API keys keys.
func pagedServer(t *testing.T, keys ...string) *testServer {
	t.Helper()
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	b, err := cpu.New(m, cpu.Options{Threads: 2})
	require.NoError(t, err)
	eng := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: 4, MaxQueue: 4})
	t.Cleanup(func() { eng.Close() })
	s, err := New(Config{Host: "127.0.0.1", APIKeys: keys,
		Models: []Model{{ID: "stories", Engine: FromRuntime(eng), Template: chat.Fallback()}}})
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &testServer{Server: s, ts: ts}
}

const longStory = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her " +
	"friends. One day, she saw a big red ball under a tree. She wanted to play with it, but it was too high for her."

// completionUsage sends a greedy completion and returns its text and usage.
func completionUsage(t *testing.T, s *testServer, key, extra string, n int) (string, usage) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":16,"temperature":0,"n":%d%s}`, longStory, n, extra)
	var hdr []string
	if key != "" {
		hdr = []string{"Authorization", "Bearer " + key}
	}
	code, _, raw := s.do(t, "POST", "/v1/completions", body, hdr...)
	require.Equal(t, http.StatusOK, code, string(raw))
	var resp struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(raw, &resp))
	require.Contains(t, string(raw), `"prompt_tokens_details":{"cached_tokens":`)
	return resp.Choices[0].Text, resp.Usage
}

// TestPrefixCacheTenants: a repeated prompt is served from the prefix cache
// and says so in usage.prompt_tokens_details.cached_tokens; another API key
// (tenant) with the same prompt reuses nothing; a cache_salt is a scope of
// its own within a key, shared by the requests that send it.
func TestPrefixCacheTenants(t *testing.T) {
	s := pagedServer(t, "key-a", "key-b")
	text, u := completionUsage(t, s, "key-a", "", 1)
	require.Zero(t, u.PromptDetails.CachedTokens)
	again, u2 := completionUsage(t, s, "key-a", "", 1)
	require.Positive(t, u2.PromptDetails.CachedTokens)
	require.Equal(t, (u2.PromptTokens-1)/16*16, u2.PromptDetails.CachedTokens)
	require.Equal(t, text, again, "greedy text is the same from the cache")

	other, ub := completionUsage(t, s, "key-b", "", 1)
	require.Zero(t, ub.PromptDetails.CachedTokens, "tenant B never sees tenant A's pages")
	require.Equal(t, text, other)

	_, us := completionUsage(t, s, "key-a", `,"cache_salt":"s1"`, 1)
	require.Zero(t, us.PromptDetails.CachedTokens, "a salt is a scope of its own")
	_, us2 := completionUsage(t, s, "key-a", `,"cache_salt":"s1"`, 1)
	require.Equal(t, u2.PromptDetails.CachedTokens, us2.PromptDetails.CachedTokens, "same key and salt: a hit")
	_, ubs := completionUsage(t, s, "key-b", `,"cache_salt":"s1"`, 1)
	require.Zero(t, ubs.PromptDetails.CachedTokens, "the same salt under another key is another scope")

	code, _, raw := s.do(t, "POST", "/v1/completions", `{"model":"stories","prompt":"x","cache_salt":""}`, "Authorization", "Bearer key-a")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(raw), "cache_salt")
	code, _, raw = s.do(t, "POST", "/v1/completions", `{"model":"stories","prompt":"x","cache_salt":7}`, "Authorization", "Bearer key-a")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(raw), "cache_salt")
}

// TestImpossibleN: n larger than the engine can ever hold is a 400 naming
// the limit, not a 429 to retry forever; a possible n runs whole.
func TestImpossibleN(t *testing.T) {
	s := pagedServer(t)
	code, hdr, raw := s.do(t, "POST", "/v1/completions", `{"model":"stories","prompt":"Once","max_tokens":4,"n":9}`)
	require.Equal(t, http.StatusBadRequest, code, string(raw))
	require.Empty(t, hdr.Get("Retry-After"))
	require.Contains(t, string(raw), `"param":"n"`)
	require.Contains(t, string(raw), "at most 8")
	text, u := completionUsage(t, s, "", "", 8)
	require.NotEmpty(t, text)
	require.Equal(t, 8*16, u.CompletionTokens)
}

// TestMetricsKVPages: /metrics exports the pool's pages by state and the
// prefix cache's reused tokens.
func TestMetricsKVPages(t *testing.T) {
	s := pagedServer(t)
	completionUsage(t, s, "", "", 1)
	completionUsage(t, s, "", "", 1)
	_, _, raw := s.do(t, "GET", "/metrics", "")
	body := string(raw)
	for _, want := range []string{`memra_kv_pages{model="stories",state="total"}`, `memra_kv_pages{model="stories",state="cached"}`,
		`memra_kv_pages{model="stories",state="used"} 0`, `memra_prefix_cache_hit_tokens_total{model="stories"}`,
		`memra_preemptions_total{model="stories"} 0`, `memra_engine_step_rows_total{kind="decode",model="stories"}`,
		`memra_engine_step_seconds_total{kind="prefill",model="stories"}`} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, `memra_prefix_cache_hit_tokens_total{model="stories"} 0`+"\n")
	require.True(t, strings.Contains(body, `memra_kv_cache_usage_ratio{model="stories"} 0`))
}
