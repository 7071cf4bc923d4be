package loadtest

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	return rep
}

func TestTimingsMatchInjectedDelays(t *testing.T) {
	// Lower bounds are exact (nothing arrives before it is sent); upper
	// bounds leave room for a loaded machine, but stay below the next
	// event (TTFT < first+gap, ITL < 2·gap).
	const first, gap = 60 * time.Millisecond, 20 * time.Millisecond
	f := &fake{firstDelay: first, tokenDelay: gap, tokens: 6}
	srv := f.start(t)
	rep := run(t, Config{URL: srv.URL, Model: "m", Concurrency: []int{2}, Requests: 6, Warmup: 1, PromptTokens: 20, MaxTokens: 6})
	require.Len(t, rep.Levels, 1)
	lv := rep.Levels[0]
	require.Len(t, lv.Samples, 6)
	for _, s := range lv.Samples {
		require.True(t, s.OK(), s.Error)
		require.Equal(t, 200, s.Status)
		require.Equal(t, 6, s.Chunks)
		require.Equal(t, 6, s.CompletionTokens)
		require.True(t, s.UsageReported)
		require.Equal(t, 20+5, s.PromptTokens, "the fake counts words + 5")
		require.Len(t, s.ITL, 5)
		require.GreaterOrEqual(t, s.TTFT, first)
		require.GreaterOrEqual(t, s.E2E, first+5*gap)
	}
	sum := lv.Summary()
	require.Equal(t, 6, sum.OK)
	require.Equal(t, 36, sum.OutputTokens)
	require.GreaterOrEqual(t, sum.TTFTP50, first)
	require.Less(t, sum.TTFTP50, first+gap)
	require.GreaterOrEqual(t, sum.ITLP50, gap-2*time.Millisecond, "a gap can be shortened only by a late previous chunk")
	require.Less(t, sum.ITLP50, 2*gap)
	require.GreaterOrEqual(t, sum.E2EP50, first+5*gap)
	require.Less(t, sum.E2EP50, first+5*gap+150*time.Millisecond)
	require.InDelta(t, 36/lv.Wall.Seconds(), sum.TokensPerSec, 1e-9)
	require.InDelta(t, 25, sum.PromptTokens, 1e-9)
}

func TestConcurrencyIsExactlyC(t *testing.T) {
	for _, c := range []int{1, 3, 8} {
		t.Run("", func(t *testing.T) {
			f := &fake{firstDelay: 30 * time.Millisecond, tokenDelay: 5 * time.Millisecond, tokens: 4}
			srv := f.start(t)
			rep := run(t, Config{URL: srv.URL, Concurrency: []int{c}, Requests: 3 * c, PromptTokens: 8, MaxTokens: 4})
			require.Equal(t, int64(c), f.maxInflight.Load())
			require.Equal(t, int64(3*c), f.count.Load())
			workers := map[int]bool{}
			for _, s := range rep.Levels[0].Samples {
				workers[s.Worker] = true
			}
			require.Len(t, workers, c)
		})
	}
}

func TestStopsAtRequestCount(t *testing.T) {
	f := &fake{tokens: 2}
	srv := f.start(t)
	rep := run(t, Config{URL: srv.URL, Concurrency: []int{3, 1}, Requests: 7, Warmup: 2, PromptTokens: 8, MaxTokens: 2})
	require.Equal(t, int64(2+7+7), f.count.Load())
	for _, lv := range rep.Levels {
		require.Len(t, lv.Samples, 7)
		for i, s := range lv.Samples {
			require.Equal(t, i, s.Seq)
			require.Equal(t, lv.Concurrency, s.Concurrency)
		}
	}
}

func TestDefaultRequestCount(t *testing.T) {
	f := &fake{tokens: 1}
	srv := f.start(t)
	rep := run(t, Config{URL: srv.URL, Concurrency: []int{5}, PromptTokens: 4, MaxTokens: 1})
	require.Len(t, rep.Levels[0].Samples, 20)
}

func TestStopsAtDuration(t *testing.T) {
	const d, req = 150 * time.Millisecond, 30 * time.Millisecond
	f := &fake{firstDelay: req, tokens: 1}
	srv := f.start(t)
	rep := run(t, Config{URL: srv.URL, Concurrency: []int{2}, Duration: d, PromptTokens: 4, MaxTokens: 1})
	lv := rep.Levels[0]
	require.GreaterOrEqual(t, len(lv.Samples), 3, "workers send back to back")
	require.LessOrEqual(t, len(lv.Samples), 2*int(d/req)+2)
	for _, s := range lv.Samples {
		require.Less(t, s.Start, d, "no request starts after the duration")
	}
	require.Less(t, lv.Wall, d+req+400*time.Millisecond)
	require.GreaterOrEqual(t, lv.Wall, d)
}

func TestRateLimitedCounted(t *testing.T) {
	f := &fake{tokens: 3, every429: 3}
	srv := f.start(t)
	start := time.Now()
	rep := run(t, Config{URL: srv.URL, Concurrency: []int{2}, Requests: 12, PromptTokens: 4, MaxTokens: 3, MaxBackoff: 30 * time.Millisecond})
	// Four 429s over two workers, each followed by a 30 ms pause (the
	// fake's Retry-After of 1 s, capped).
	require.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond)
	sum := rep.Levels[0].Summary()
	require.Equal(t, 12, sum.Requests)
	require.Equal(t, 4, sum.RateLimited)
	require.Equal(t, 0, sum.Errors)
	require.Equal(t, 8, sum.OK)
	require.Equal(t, 8*3, sum.OutputTokens)
	for _, s := range rep.Levels[0].Samples {
		if s.RateLimited() {
			require.Contains(t, s.Error, "HTTP 429: slots full")
		}
	}
}

func TestFaultsAreErrorsNotCrashes(t *testing.T) {
	tests := []struct {
		fault, want string
	}{
		{"malformed", "malformed event stream"},
		{"error-event", "engine failed"},
		{"no-done", "without [DONE]"},
		{"status500", "HTTP 500: oops"},
	}
	for _, tc := range tests {
		t.Run(tc.fault, func(t *testing.T) {
			f := &fake{tokens: 4, fault: tc.fault, faultEvery: 2}
			srv := f.start(t)
			rep := run(t, Config{URL: srv.URL, Concurrency: []int{2}, Requests: 8, PromptTokens: 4, MaxTokens: 4})
			sum := rep.Levels[0].Summary()
			require.Equal(t, 4, sum.Errors)
			require.Equal(t, 4, sum.OK)
			require.Equal(t, 16, sum.OutputTokens)
			for _, s := range rep.Levels[0].Samples {
				if !s.OK() {
					require.Contains(t, s.Error, tc.want)
				}
			}
		})
	}
}

func TestChunkCountWithoutUsage(t *testing.T) {
	f := &fake{tokens: 5, noUsage: true}
	srv := f.start(t)
	rep := run(t, Config{URL: srv.URL, Endpoint: Completions, Concurrency: []int{1}, Requests: 2, PromptTokens: 4, MaxTokens: 5})
	for _, s := range rep.Levels[0].Samples {
		require.True(t, s.OK(), s.Error)
		require.False(t, s.UsageReported)
		require.Equal(t, 5, s.CompletionTokens)
		require.Zero(t, s.PromptTokens)
	}
	require.Contains(t, string(rep.Markdown()), "approximate: the server reported no usage")
}

func TestRequestBodies(t *testing.T) {
	tests := []struct {
		endpoint Endpoint
		base     string
		path     string
	}{
		{Chat, "", "/v1/chat/completions"},
		{Completions, "/v1/", "/v1/completions"},
	}
	for _, tc := range tests {
		t.Run(string(tc.endpoint), func(t *testing.T) {
			f := &fake{tokens: 1}
			srv := f.start(t)
			run(t, Config{URL: srv.URL + tc.base, Model: "qwen", APIKey: "sk-1", Endpoint: tc.endpoint, IgnoreEOS: true,
				Concurrency: []int{2}, Requests: 4, PromptTokens: 50, MaxTokens: 7})
			require.Len(t, f.bodies, 4)
			seen := map[string]bool{}
			for i, b := range f.bodies {
				require.Equal(t, tc.path, f.paths[i])
				require.Equal(t, "Bearer sk-1", f.auths[i])
				require.Equal(t, "qwen", b["model"])
				require.Equal(t, true, b["stream"])
				require.Equal(t, true, b["ignore_eos"])
				require.EqualValues(t, 7, b["max_tokens"])
				require.Equal(t, map[string]any{"include_usage": true}, b["stream_options"])
				var prompt string
				if tc.endpoint == Chat {
					msgs := b["messages"].([]any)
					require.Len(t, msgs, 1)
					m := msgs[0].(map[string]any)
					require.Equal(t, "user", m["role"])
					prompt = m["content"].(string)
				} else {
					prompt = b["prompt"].(string)
				}
				require.Len(t, strings.Fields(prompt), 50)
				first := strings.Fields(prompt)[0] + " " + strings.Fields(prompt)[1]
				require.False(t, seen[first], "prefix %q repeated", first)
				seen[first] = true
			}
		})
	}
}

func TestNoRedirectFollowed(t *testing.T) {
	other := &fake{tokens: 1}
	osrv := other.start(t)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, osrv.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	rep := run(t, Config{URL: redirect.URL, Concurrency: []int{1}, Requests: 2, PromptTokens: 4, MaxTokens: 1})
	require.Equal(t, 2, rep.Levels[0].Summary().Errors)
	require.Zero(t, other.count.Load())
}

func TestWarmupFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"message":"bad key"}}`))
	}))
	t.Cleanup(srv.Close)
	_, err := Run(context.Background(), Config{URL: srv.URL, Concurrency: []int{1}, Warmup: 1})
	require.ErrorIs(t, err, ErrWarmup)
	require.Contains(t, err.Error(), "HTTP 401: bad key")
}

func TestRequestTimeout(t *testing.T) {
	f := &fake{firstDelay: 2 * time.Second, tokens: 1}
	srv := f.start(t)
	start := time.Now()
	rep := run(t, Config{URL: srv.URL, Concurrency: []int{2}, Requests: 2, Timeout: 60 * time.Millisecond, PromptTokens: 4, MaxTokens: 1})
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, 2, rep.Levels[0].Summary().Errors)
	require.Contains(t, rep.Levels[0].Samples[0].Error, "timed out")
}

func TestCancelReturnsFinishedLevels(t *testing.T) {
	f := &fake{firstDelay: 20 * time.Millisecond, tokens: 1}
	srv := f.start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{URL: srv.URL, Concurrency: []int{1, 2}, Requests: 2, PromptTokens: 4, MaxTokens: 1,
		OnLevel: func(Summary) { cancel() }}
	rep, err := Run(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, rep.Levels, 1)
}

func TestConfigErrors(t *testing.T) {
	ok := Config{URL: "http://127.0.0.1:1", Concurrency: []int{1}}
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name string
		mod  func(*Config)
		want string // in the message, when set
	}{
		{"no levels", func(c *Config) { c.Concurrency = nil }, ""},
		{"zero level", func(c *Config) { c.Concurrency = []int{4, 0} }, ""},
		{"endpoint", func(c *Config) { c.Endpoint = "embeddings" }, ""},
		{"negative requests", func(c *Config) { c.Requests = -1 }, ""},
		{"negative duration", func(c *Config) { c.Duration = -time.Second }, ""},
		{"scheme", func(c *Config) { c.URL = "ftp://host" }, ""},
		{"no host", func(c *Config) { c.URL = "http://" }, ""},
		{"query", func(c *Config) { c.URL = "http://h/?a=b" }, ""},
		{"user", func(c *Config) { c.URL = "http://u:p@h/" }, ""},
		{"prompt", func(c *Config) { c.PromptTokens = -3 }, ""},
		{"warmup", func(c *Config) { c.Warmup = -1 }, ""},
		{"scenario", func(c *Config) { c.Scenario = "burst" }, `Scenario (--scenario) "burst"`},
		{"negative prefixes", func(c *Config) { c.Prefixes = -1 }, "Prefixes (--prefixes) -1"},
		{"too many prefixes", func(c *Config) { c.Prefixes = maxPrefixes + 1 }, "Prefixes (--prefixes) 4097"},
		{"negative prefix tokens", func(c *Config) { c.PrefixTokens = -2 }, "PrefixTokens (--prefix-tokens) -2 < 1"},
		{"prefix longer than prompt", func(c *Config) {
			c.Scenario, c.PrefixTokens, c.PromptTokens = SharedPrefix, 600, 512
		}, "PrefixTokens (--prefix-tokens) 600 leaves -88 of PromptTokens (--prompt-tokens) 512"},
		{"suffix too short", func(c *Config) {
			c.Scenario, c.PrefixTokens, c.PromptTokens = SharedPrefix, 500, 512
		}, "raise --prompt-tokens to ≥ 532"},
		{"negative turns", func(c *Config) { c.Turns = -1 }, "Turns (--turns) -1 < 1"},
		{"negative history", func(c *Config) { c.HistoryTokens = -5 }, "HistoryTokens (--history-tokens) -5 < 1"},
		{"history too short", func(c *Config) {
			c.Scenario, c.HistoryTokens, c.Turns, c.MaxTokens = MultiTurn, 1000, 8, 128
		}, "HistoryTokens (--history-tokens) 1000 is too short for Turns (--turns) 8 with replies of MaxTokens (--max-tokens) 128"},
		{"negative temperature", func(c *Config) { c.Temperature = f(-0.1) }, "Temperature (--temperature) -0.1"},
		{"NaN temperature", func(c *Config) { c.Temperature = f(math.NaN()) }, "Temperature (--temperature) NaN"},
		{"zero top-p", func(c *Config) { c.TopP = f(0) }, "TopP (--top-p) 0"},
		{"top-p above 1", func(c *Config) { c.TopP = f(1.5) }, "TopP (--top-p) 1.5"},
		{"negative engine rate", func(c *Config) { c.EngineRate = -1 }, "EngineRate (--engine-rate) -1"},
		{"infinite engine rate", func(c *Config) { c.EngineRate = math.Inf(1) }, "EngineRate (--engine-rate) +Inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			_, err := Run(context.Background(), c)
			require.ErrorIs(t, err, ErrConfig)
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
			}
		})
	}
	// The limits themselves pass.
	for _, mod := range []func(*Config){
		func(c *Config) { c.Scenario, c.PrefixTokens, c.PromptTokens = SharedPrefix, 480, 512 },
		func(c *Config) {
			c.Scenario, c.HistoryTokens, c.Turns, c.MaxTokens = MultiTurn, 9*minShareTokens+7*128, 8, 128
		},
		func(c *Config) { c.Temperature, c.TopP, c.EngineRate = f(0), f(1), 0 },
	} {
		c := ok.withDefaults()
		mod(&c)
		_, err := c.validate()
		require.NoError(t, err)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		h    string
		want time.Duration
	}{
		{"2", 2 * time.Second}, {"0.5", 500 * time.Millisecond}, {"", 100 * time.Millisecond},
		{"Wed, 21 Oct 2026 07:28:00 GMT", 100 * time.Millisecond}, {"-1", 100 * time.Millisecond},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, retryAfter(tc.h), tc.h)
	}
}

func TestEndpointURL(t *testing.T) {
	tests := []struct {
		base string
		e    Endpoint
		want string
	}{
		{"http://127.0.0.1:8080", Chat, "http://127.0.0.1:8080/v1/chat/completions"},
		{"http://127.0.0.1:8080/", Completions, "http://127.0.0.1:8080/v1/completions"},
		{"https://h/v1", Chat, "https://h/v1/chat/completions"},
		{"https://h/api/v1/", Chat, "https://h/api/v1/chat/completions"},
		{"http://h/openai", Completions, "http://h/openai/v1/completions"},
	}
	for _, tc := range tests {
		got, err := endpointURL(tc.base, tc.e)
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}
