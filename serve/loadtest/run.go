package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sample is the record of one request.
type Sample struct {
	// Concurrency is the level the request ran in.
	Concurrency int `json:"concurrency"`
	// Worker is the index of the worker that sent it.
	Worker int `json:"worker"`
	// Seq numbers the requests of a level in the order they were started.
	Seq int `json:"seq"`
	// Start is when the request was sent, from the start of the level.
	Start time.Duration `json:"start_ns"`
	// Status is the HTTP status; 0 when no response came.
	Status int `json:"status"`
	// Error says why the request failed; empty on success.
	Error string `json:"error,omitempty"`
	// TTFT is the time from sending to the first chunk with content.
	TTFT time.Duration `json:"ttft_ns"`
	// ITL holds the gaps between consecutive content chunks.
	ITL []time.Duration `json:"itl_ns"`
	// E2E is the time from sending to the end of the response.
	E2E time.Duration `json:"e2e_ns"`
	// Chunks counts the chunks with content.
	Chunks int `json:"chunks"`
	// CompletionTokens is usage.completion_tokens when the server sent it,
	// else Chunks.
	CompletionTokens int `json:"completion_tokens"`
	// PromptTokens is usage.prompt_tokens, 0 when the server sent no usage.
	PromptTokens int `json:"prompt_tokens"`
	// UsageReported says whether the server sent a usage object.
	UsageReported bool `json:"usage_reported"`
	// CachedTokens is usage.prompt_tokens_details.cached_tokens: the prompt
	// tokens the server took from its prefix cache; 0 when it did not say.
	CachedTokens int `json:"cached_tokens"`
	// CachedReported says whether the server sent cached_tokens.
	CachedReported bool `json:"cached_reported"`
	// Turn is the request's turn in its conversation, from 1, under the
	// MultiTurn scenario; 0 otherwise.
	Turn int `json:"turn,omitempty"`

	retryAfter time.Duration // the pause a 429 asked for
}

// OK reports whether the request succeeded.
func (s Sample) OK() bool { return s.Error == "" }

// RateLimited reports whether the server refused the request with 429.
func (s Sample) RateLimited() bool { return s.Status == http.StatusTooManyRequests }

// Level is the record of one concurrency level.
type Level struct {
	// Concurrency is the number of workers.
	Concurrency int `json:"concurrency"`
	// Wall is the time from the level's start to the end of its last
	// request.
	Wall time.Duration `json:"wall_ns"`
	// Samples holds one record per request, in Seq order.
	Samples []Sample `json:"samples"`
}

// Report is the outcome of a load test.
type Report struct {
	// URL is the endpoint called.
	URL string `json:"url"`
	// Model is the requested model.
	Model string `json:"model"`
	// Endpoint is chat or completions.
	Endpoint Endpoint `json:"endpoint"`
	// PromptTokens is the requested, approximate prompt length (under
	// MultiTurn, of the warm-up requests only).
	PromptTokens int `json:"prompt_tokens"`
	// MaxTokens is the requests' max_tokens.
	MaxTokens int `json:"max_tokens"`
	// Scenario is the shape of the prompts.
	Scenario Scenario `json:"scenario"`
	// Prefixes and PrefixTokens are the shared prompts of SharedPrefix.
	Prefixes     int `json:"prefixes,omitempty"`
	PrefixTokens int `json:"prefix_tokens,omitempty"`
	// Turns and HistoryTokens are the conversations of MultiTurn.
	Turns         int `json:"turns,omitempty"`
	HistoryTokens int `json:"history_tokens,omitempty"`
	// Temperature and TopP are the sampling parameters sent; nil when none.
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	// EngineRate is the engine's output rate in tokens/s the levels are
	// compared with; 0 when none was given.
	EngineRate float64 `json:"engine_rate_tok_s,omitempty"`
	// Started is when the first level began.
	Started time.Time `json:"started"`
	// Levels are the measured levels, in the order run.
	Levels []Level `json:"levels"`
}

// runner holds what every request of a test shares.
type runner struct {
	cfg      Config
	url      string
	client   *http.Client
	prefixes []string // the shared prompts of SharedPrefix
}

// Run performs the load test: the warm-up requests, then every level in
// turn. A failed request is recorded, never fatal; a failed warm-up or an
// invalid Config is an error. When ctx ends, Run returns the levels finished
// so far together with ctx's error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, url: u, client: newClient(cfg)}
	defer r.client.CloseIdleConnections()
	rep := newReport(cfg, u)
	if cfg.Scenario == SharedPrefix {
		for i := range cfg.Prefixes {
			r.prefixes = append(r.prefixes, sharedPrefix(cfg.Seed, i, cfg.PrefixTokens))
		}
	}
	// Warm-up requests are random prompts under every scenario: they warm
	// the server without filling its prefix cache with measured prompts.
	warm := randomWork{r: r, level: -1}
	for i := range cfg.Warmup {
		s, _ := r.do(ctx, -1, 0, i, time.Now(), warm.next(i))
		if !s.OK() {
			return nil, fmt.Errorf("%w: %s: %s", ErrWarmup, u, s.Error)
		}
	}
	rep.Started = time.Now()
	for _, c := range cfg.Concurrency {
		lv := r.level(ctx, c)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Levels = append(rep.Levels, lv)
		if cfg.OnLevel != nil {
			cfg.OnLevel(rep.summary(lv))
		}
	}
	return rep, nil
}

// newReport returns the report of cfg's test against url, with no level
// yet.
func newReport(cfg Config, url string) *Report {
	rep := &Report{URL: url, Model: cfg.Model, Endpoint: cfg.Endpoint, PromptTokens: cfg.PromptTokens, MaxTokens: cfg.MaxTokens,
		Scenario: cfg.Scenario, Temperature: cfg.Temperature, TopP: cfg.TopP, EngineRate: cfg.EngineRate}
	switch cfg.Scenario {
	case SharedPrefix:
		rep.Prefixes, rep.PrefixTokens = cfg.Prefixes, cfg.PrefixTokens
	case MultiTurn:
		rep.Turns, rep.HistoryTokens = cfg.Turns, cfg.HistoryTokens
	}
	return rep
}

// newClient returns an HTTP client that keeps a connection per worker, uses
// no proxy and follows no redirect, so requests go only to the given URL.
func newClient(cfg Config) *http.Client {
	maxC := 1
	for _, c := range cfg.Concurrency {
		maxC = max(maxC, c)
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxC,
		MaxIdleConnsPerHost: maxC,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
		DisableCompression:  true,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// level runs c workers until the level's request count or duration is
// reached.
func (r *runner) level(ctx context.Context, c int) Level {
	limit := r.cfg.requestsFor(c)
	start := time.Now()
	var deadline time.Time
	if r.cfg.Duration > 0 {
		deadline = start.Add(r.cfg.Duration)
	}
	var (
		next    atomic.Int64
		conv    atomic.Int64
		mu      sync.Mutex
		samples []Sample
		wg      sync.WaitGroup
	)
	for w := range c {
		wg.Go(func() {
			wl := r.workload(c, &conv)
			for ctx.Err() == nil {
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				seq := int(next.Add(1) - 1)
				if limit > 0 && seq >= limit {
					return
				}
				s, reply := r.do(ctx, c, w, seq, start, wl.next(seq))
				wl.record(s, reply)
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
				if s.RateLimited() {
					r.pause(ctx, s.retryAfter, deadline)
				}
			}
		})
	}
	wg.Wait()
	lv := Level{Concurrency: c, Wall: time.Since(start), Samples: samples}
	sortSamples(lv.Samples)
	return lv
}

// pause waits after a 429 before the worker's next request: Retry-After
// capped at MaxBackoff, so a refusing server is not hammered in a tight loop.
func (r *runner) pause(ctx context.Context, d time.Duration, deadline time.Time) {
	d = min(d, r.cfg.MaxBackoff)
	if !deadline.IsZero() {
		d = min(d, time.Until(deadline))
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// retryAfter reads a Retry-After header given in seconds; 100 ms when it is
// missing or not a number of seconds.
func retryAfter(h string) time.Duration {
	if n, err := strconv.ParseFloat(strings.TrimSpace(h), 64); err == nil && n >= 0 && n < 3600 {
		return time.Duration(n * float64(time.Second))
	}
	return 100 * time.Millisecond
}

// body returns the JSON request body of q. Temperature and top_p are
// present only when the Config sets them.
func (r *runner) body(q request) []byte {
	req := map[string]any{
		"model":          r.cfg.Model,
		"max_tokens":     r.cfg.MaxTokens,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	}
	if r.cfg.Endpoint == Completions {
		req["prompt"] = q.prompt
	} else {
		req["messages"] = q.messages
	}
	if r.cfg.IgnoreEOS {
		req["ignore_eos"] = true
	}
	if r.cfg.Temperature != nil {
		req["temperature"] = *r.cfg.Temperature
	}
	if r.cfg.TopP != nil {
		req["top_p"] = *r.cfg.TopP
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic("BUG: request body does not marshal: " + err.Error())
	}
	return b
}

// do sends q as request seq of a level and records it. Under MultiTurn it
// also returns the text the server streamed, the next turn's assistant
// message.
func (r *runner) do(ctx context.Context, level, worker, seq int, levelStart time.Time, q request) (Sample, string) {
	s := Sample{Concurrency: level, Worker: worker, Seq: seq, Turn: q.turn}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(r.body(q)))
	if err != nil {
		s.Error = err.Error()
		return s, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	t0 := time.Now()
	s.Start = t0.Sub(levelStart)
	resp, err := r.client.Do(req)
	if err != nil {
		s.Error = describe(err, r.cfg.Timeout)
		s.E2E = time.Since(t0)
		return s, ""
	}
	defer resp.Body.Close()
	s.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusTooManyRequests {
			s.retryAfter = retryAfter(resp.Header.Get("Retry-After"))
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		s.Error = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(errorMessage(bytes.TrimSpace(errorField(msg)))))
		s.E2E = time.Since(t0)
		return s, ""
	}
	var reply *strings.Builder
	if r.cfg.Scenario == MultiTurn {
		reply = &strings.Builder{}
	}
	if err := consumeStream(resp.Body, t0, &s, reply); err != nil {
		s.Error = describe(err, r.cfg.Timeout)
	}
	s.E2E = time.Since(t0)
	if reply == nil {
		return s, ""
	}
	return s, reply.String()
}

// errorField returns the "error" member of an OpenAI error body, or the
// body itself.
func errorField(body []byte) []byte {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		return e.Error
	}
	return body
}

// describe turns a request error into the sample's error text.
func describe(err error, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("timed out after %v: %v", timeout, err)
	}
	return err.Error()
}
