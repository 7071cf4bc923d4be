// Package loadtest measures an OpenAI-compatible streaming endpoint under
// load: for each concurrency level C, C workers send streaming completion
// requests back to back, and every request's time to first token,
// inter-token latencies, end-to-end latency, token counts, cached prompt
// tokens and HTTP status are recorded and summarised.
//
// A Scenario shapes the prompts: unrelated prompts (Random), prompts that
// share one of a few long system prompts (SharedPrefix), or multi-turn
// conversations that re-send their growing history (MultiTurn). The last two
// show what a server's prefix cache saves.
//
// It talks to any server that speaks OpenAI's streaming protocol (memra,
// vLLM, llama.cpp's server, SGLang …), and sends requests only to the one
// URL it is given: proxies from the environment are not used and redirects
// are not followed.
package loadtest

import (
	"errors"
	"fmt"
	"math"
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

// Scenario is the shape of the prompts a load test sends.
type Scenario string

const (
	// Random sends each request a fresh synthetic prompt of about
	// PromptTokens tokens that shares no prefix with any other.
	Random Scenario = "random"
	// SharedPrefix prefixes each request with one of Prefixes synthetic
	// system prompts of about PrefixTokens tokens (the chat endpoint's
	// system message, the completions endpoint's leading text), followed by
	// a user text of its own that brings the prompt to about PromptTokens.
	SharedPrefix Scenario = "shared-prefix"
	// MultiTurn runs conversations of Turns requests: each turn re-sends the
	// conversation so far (system prompt, every earlier user message and the
	// reply the server streamed) and a new user message, so that the last
	// turn's prompt is about HistoryTokens tokens.
	MultiTurn Scenario = "chat"
)

// Scenarios lists the scenarios in the order the help text names them.
var Scenarios = []Scenario{Random, SharedPrefix, MultiTurn}

// Lower bounds of the generated texts, in tokens.
const (
	// minSuffixTokens is the shortest user text after a shared prefix, so
	// that every request has a few dozen tokens of its own.
	minSuffixTokens = 32
	// minShareTokens is the shortest system prompt or user message of a
	// conversation.
	minShareTokens = 16
	// maxPrefixes bounds Prefixes: every shared prompt is held in memory.
	maxPrefixes = 4096
)

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
	// Scenario shapes the prompts: Random (the default when empty),
	// SharedPrefix or MultiTurn.
	Scenario Scenario
	// PromptTokens is the approximate prompt length in tokens of Random and
	// SharedPrefix, and of the warm-up requests of every scenario (default
	// 512; PrefixTokens + 128 under SharedPrefix).
	PromptTokens int
	// Prefixes is the number of shared system prompts of SharedPrefix
	// (default 4); request Seq uses prompt Seq mod Prefixes.
	Prefixes int
	// PrefixTokens is the approximate length of each shared system prompt
	// of SharedPrefix (default 1024); PromptTokens must exceed it by at least
	// 32.
	PrefixTokens int
	// Turns is the number of requests of a MultiTurn conversation (default
	// 8).
	Turns int
	// HistoryTokens is the approximate prompt length of a MultiTurn
	// conversation's last turn (default 4096): a system prompt and Turns
	// user messages of equal length, and Turns-1 replies of about MaxTokens.
	HistoryTokens int
	// Temperature, when not nil, is sent as the request's "temperature";
	// nil sends nothing, leaving the server's default.
	Temperature *float64
	// TopP, when not nil, is sent as "top_p"; nil sends nothing.
	TopP *float64
	// EngineRate, when > 0, is the engine's own output rate in tokens/s (from
	// memra bench, say); the report gives each level's output rate as a
	// fraction of it.
	EngineRate float64
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
	if c.Scenario == "" {
		c.Scenario = Random
	}
	if c.Prefixes == 0 {
		c.Prefixes = 4
	}
	if c.PrefixTokens == 0 {
		c.PrefixTokens = 1024
	}
	if c.Turns == 0 {
		c.Turns = 8
	}
	if c.HistoryTokens == 0 {
		c.HistoryTokens = 4096
	}
	if c.PromptTokens == 0 {
		c.PromptTokens = 512
		if c.Scenario == SharedPrefix && c.PrefixTokens > 0 {
			c.PromptTokens = c.PrefixTokens + 128
		}
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
	if err := c.validateScenario(); err != nil {
		return "", err
	}
	if err := c.validateSampling(); err != nil {
		return "", err
	}
	return endpointURL(c.URL, c.Endpoint)
}

// validateScenario checks the scenario and its sizes; every error names the
// Config field and the flag of memra bench serve.
func (c Config) validateScenario() error {
	switch {
	case c.Scenario != Random && c.Scenario != SharedPrefix && c.Scenario != MultiTurn:
		return fmt.Errorf("%w: Scenario (--scenario) %q (want %q, %q or %q)", ErrConfig, c.Scenario, Random, SharedPrefix, MultiTurn)
	case c.Prefixes < 1 || c.Prefixes > maxPrefixes:
		return fmt.Errorf("%w: Prefixes (--prefixes) %d (want 1 to %d)", ErrConfig, c.Prefixes, maxPrefixes)
	case c.PrefixTokens < 1:
		return fmt.Errorf("%w: PrefixTokens (--prefix-tokens) %d < 1", ErrConfig, c.PrefixTokens)
	case c.Turns < 1:
		return fmt.Errorf("%w: Turns (--turns) %d < 1", ErrConfig, c.Turns)
	case c.HistoryTokens < 1:
		return fmt.Errorf("%w: HistoryTokens (--history-tokens) %d < 1", ErrConfig, c.HistoryTokens)
	}
	switch c.Scenario {
	case SharedPrefix:
		if c.PromptTokens-c.PrefixTokens < minSuffixTokens {
			return fmt.Errorf("%w: PrefixTokens (--prefix-tokens) %d leaves %d of PromptTokens (--prompt-tokens) %d for the user text (want ≥ %d): raise --prompt-tokens to ≥ %d",
				ErrConfig, c.PrefixTokens, c.PromptTokens-c.PrefixTokens, c.PromptTokens, minSuffixTokens, c.PrefixTokens+minSuffixTokens)
		}
	case MultiTurn:
		if n := c.shareTokens(); n < minShareTokens {
			return fmt.Errorf("%w: HistoryTokens (--history-tokens) %d is too short for Turns (--turns) %d with replies of MaxTokens (--max-tokens) %d: the system prompt and each user message get %d tokens (want ≥ %d): raise --history-tokens to ≥ %d",
				ErrConfig, c.HistoryTokens, c.Turns, c.MaxTokens, n, minShareTokens, (c.Turns+1)*minShareTokens+(c.Turns-1)*c.MaxTokens)
		}
	}
	return nil
}

// validateSampling checks the sampling parameters and the engine rate.
func (c Config) validateSampling() error {
	if t := c.Temperature; t != nil && (math.IsNaN(*t) || math.IsInf(*t, 0) || *t < 0) {
		return fmt.Errorf("%w: Temperature (--temperature) %v (want a finite value ≥ 0)", ErrConfig, *t)
	}
	if p := c.TopP; p != nil && !(*p > 0 && *p <= 1) {
		return fmt.Errorf("%w: TopP (--top-p) %v (want more than 0, at most 1)", ErrConfig, *p)
	}
	if r := c.EngineRate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		return fmt.Errorf("%w: EngineRate (--engine-rate) %v (want a finite value ≥ 0; 0: none)", ErrConfig, r)
	}
	return nil
}

// shareTokens is the length of the system prompt and of each user message
// of a MultiTurn conversation: what HistoryTokens leaves after Turns-1
// replies of MaxTokens, split into Turns+1 equal parts.
func (c Config) shareTokens() int {
	return (c.HistoryTokens - (c.Turns-1)*c.MaxTokens) / (c.Turns + 1)
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
