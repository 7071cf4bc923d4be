// Package loadtest measures an OpenAI-compatible streaming endpoint under
// load: for each concurrency level C, C workers send streaming completion
// requests back to back, and every request's time to first token,
// inter-token latencies, end-to-end latency, token counts and HTTP status
// are recorded and summarised.
//
// It talks to any server that speaks OpenAI's streaming protocol (memra,
// vLLM, llama.cpp's server, SGLang …), and sends requests only to the one
// URL it is given: proxies from the environment are not used and redirects
// are not followed.
package loadtest

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Sentinel errors of the package.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("loadtest: invalid configuration")
	// ErrWarmup reports a failed warm-up request; nothing was measured.
	ErrWarmup = errors.New("loadtest: warm-up request failed")
	// ErrStream reports a malformed server-sent event stream.
	ErrStream = errors.New("loadtest: malformed event stream")
	// ErrServer reports an error event or an error status from the server.
	ErrServer = errors.New("loadtest: server error")
)

// Endpoint is the API a load test calls.
type Endpoint string

const (
	// Chat calls POST /v1/chat/completions with one user message.
	Chat Endpoint = "chat"
	// Completions calls POST /v1/completions with a text prompt.
	Completions Endpoint = "completions"
)

// path returns the endpoint's path below /v1.
func (e Endpoint) path() string {
	if e == Completions {
		return "/completions"
	}
	return "/chat/completions"
}

// Config describes one load test: the levels to run, how long each runs
// and what every request asks for.
type Config struct {
	// URL is the server's base URL, with or without a trailing /v1
	// (http://127.0.0.1:8080 and http://127.0.0.1:8080/v1 are the same).
	URL string
	// Model is the request's model field.
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer APIKey".
	APIKey string
	// Endpoint is Chat (the default when empty) or Completions.
	Endpoint Endpoint
	// Concurrency lists the levels, run in order; each must be ≥ 1.
	Concurrency []int
	// Requests stops a level after this many requests (0: no limit).
	Requests int
	// Duration stops a level from starting requests after this long
	// (0: no limit); requests in flight then run to their end. With
	// neither Requests nor Duration set, a level sends max(16, 4·C)
	// requests.
	Duration time.Duration
	// PromptTokens is the approximate prompt length in tokens (default 512).
	PromptTokens int
	// MaxTokens is the request's max_tokens (default 128).
	MaxTokens int
	// IgnoreEOS sends "ignore_eos": true so every request generates
	// MaxTokens tokens (memra, vLLM and llama.cpp honour it).
	IgnoreEOS bool
	// Timeout bounds each request, streaming included (default 5 minutes).
	Timeout time.Duration
	// MaxBackoff caps the pause of a worker after a 429, which otherwise
	// follows the response's Retry-After (100 ms without one); default 1 s.
	MaxBackoff time.Duration
	// Warmup is the number of requests sent one at a time before the first
	// level and not measured.
	Warmup int
	// Seed varies the synthetic prompts; the same seed sends the same
	// prompts.
	Seed uint64
	// OnLevel, when set, is called after each level with its summary.
	OnLevel func(Summary)
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = Chat
	}
	if c.PromptTokens == 0 {
		c.PromptTokens = 512
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 128
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = time.Second
	}
	return c
}

// validate checks c (after withDefaults) and returns the endpoint URL.
func (c Config) validate() (string, error) {
	if c.Endpoint != Chat && c.Endpoint != Completions {
		return "", fmt.Errorf("%w: endpoint %q (want %q or %q)", ErrConfig, c.Endpoint, Chat, Completions)
	}
	if len(c.Concurrency) == 0 {
		return "", fmt.Errorf("%w: no concurrency levels", ErrConfig)
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 100_000 {
			return "", fmt.Errorf("%w: concurrency %d (want 1 to 100000)", ErrConfig, n)
		}
	}
	switch {
	case c.Requests < 0:
		return "", fmt.Errorf("%w: requests %d < 0", ErrConfig, c.Requests)
	case c.Duration < 0:
		return "", fmt.Errorf("%w: duration %v < 0", ErrConfig, c.Duration)
	case c.PromptTokens < 1:
		return "", fmt.Errorf("%w: prompt tokens %d < 1", ErrConfig, c.PromptTokens)
	case c.MaxTokens < 1:
		return "", fmt.Errorf("%w: max tokens %d < 1", ErrConfig, c.MaxTokens)
	case c.Timeout < 0:
		return "", fmt.Errorf("%w: timeout %v < 0", ErrConfig, c.Timeout)
	case c.Warmup < 0:
		return "", fmt.Errorf("%w: warm-up %d < 0", ErrConfig, c.Warmup)
	}
	return endpointURL(c.URL, c.Endpoint)
}

// endpointURL joins the base URL and the endpoint's path.
func endpointURL(base string, e Endpoint) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%w: url %q: %v", ErrConfig, base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: url %q: scheme must be http or https", ErrConfig, base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%w: url %q has no host", ErrConfig, base)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%w: url %q: no query, fragment or user info allowed (use --api-key)", ErrConfig, base)
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p + e.path()
	u.RawPath = ""
	return u.String(), nil
}

// requestsFor is the request limit of a level of concurrency n.
func (c Config) requestsFor(n int) int {
	if c.Requests == 0 && c.Duration == 0 {
		return max(16, 4*n)
	}
	return c.Requests
}
