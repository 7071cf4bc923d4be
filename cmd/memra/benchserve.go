package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/serve/loadtest"
)

// benchServeOptions are the flags of memra bench serve.
type benchServeOptions struct {
	url, model, apiKey, endpoint, out string
	concurrency                       []int
	requests                          int
	duration, timeout, maxBackoff     time.Duration
	promptTokens, maxTokens, warmup   int
	ignoreEOS                         bool
	seed                              uint64
	scenario                          string
	prefixes, prefixTokens            int
	turns, historyTokens              int
	temperature, topP                 optionalFloat
	engineRate                        float64
}

// optionalFloat is a float flag that tells "not given" apart from any
// value: its default prints as empty and leaves the value nil.
type optionalFloat struct{ v *float64 }

func (o *optionalFloat) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatFloat(*o.v, 'g', -1, 64)
}

func (o *optionalFloat) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return err
	}
	o.v = &v
	return nil
}

func (o *optionalFloat) Type() string { return "float" }

// newBenchServeCmd returns memra bench serve, the serving load test; bench.go
// adds it under memra bench.
func newBenchServeCmd() *cobra.Command {
	o := &benchServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Load-test an OpenAI-compatible server at several concurrency levels",
		Long: `Load-test any OpenAI-compatible streaming endpoint (memra serve, vLLM, llama.cpp,
SGLang …). For each --concurrency level C, C clients send streaming requests back to
back until --requests requests (per level) or --duration have passed; without either a
level sends max(16, 4·C) requests. One warm-up request goes first.

Per level it reports time to first token (TTFT) p50/p99, inter-token latency (ITL,
between streamed chunks) p50/p99, end-to-end latency p50, aggregate output tokens/s
(completion tokens of successful requests ÷ the level's wall time), requests/s, and the
errors and 429s, the prompt tokens and those the server took from its prefix cache
(usage.prompt_tokens_details.cached_tokens, when it reports them), and with --engine-rate
each level's tokens/s as a percentage of the engine's own rate.

--scenario picks the prompts (all synthetic words, about one token each):
  random         about --prompt-tokens tokens with a random start, so prefix caches do
                 not help (the default)
  shared-prefix  one of --prefixes system prompts of --prefix-tokens tokens (request i
                 takes prompt i mod --prefixes), then a user text of its own up to
                 --prompt-tokens (default --prefix-tokens + 128)
  chat           conversations of --turns turns; each turn re-sends the system prompt,
                 every earlier user message and the reply the server streamed, and a
                 new user message, so that the last turn is about --history-tokens tokens.
                 --requests counts turns; TTFT is also reported for turn 1 and for
                 turns 2 and later (what a prefix cache shortens)
Warm-up requests are random prompts of --prompt-tokens tokens. --temperature and --top-p
are sent only when given. Requests go only to --url: no proxy, no redirects.

The table goes to stdout; with --out DIR also serve-bench.md, serve-bench.svg (tokens/s
and TTFT p50 against concurrency) and serve-bench.json (every request's samples).`,
		Example: `  memra serve &
  memra bench serve --concurrency 1,4,16 --requests 64 --out bench/
  memra bench serve --url http://gpu-box:8000 --model Qwen/Qwen3-8B --duration 30s --api-key "$KEY"
  memra bench serve --scenario shared-prefix --prefixes 4 --prefix-tokens 1024 --prompt-tokens 1152 --concurrency 1,4,16
  memra bench serve --scenario chat --turns 8 --history-tokens 4096 --concurrency 4 --engine-rate 1026`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFlagLimits(cmd, benchServeLimits); err != nil {
				return err
			}
			return runBenchServe(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "http://127.0.0.1:8080", "base URL of the server (with or without /v1)")
	f.StringVar(&o.model, "model", "", "model name sent in each request (memra: empty picks the first served model)")
	f.StringVar(&o.apiKey, "api-key", "", "API key, sent as Authorization: Bearer")
	f.StringVar(&o.endpoint, "endpoint", "chat", "API to call: chat (/v1/chat/completions) or completions (/v1/completions)")
	f.IntSliceVar(&o.concurrency, "concurrency", []int{1, 4, 16, 64}, "concurrency levels, run in order")
	f.IntVar(&o.requests, "requests", 0, "requests per level (0: no count limit)")
	f.DurationVar(&o.duration, "duration", 0, "time per level after which no new request starts (0: no time limit)")
	f.IntVar(&o.promptTokens, "prompt-tokens", 0, "approximate prompt length in tokens (0: 512, or --prefix-tokens + 128 with --scenario shared-prefix)")
	f.IntVar(&o.maxTokens, "max-tokens", 128, "max_tokens of each request")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", true, `send "ignore_eos": true so every request generates --max-tokens tokens`)
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit per request, streaming included")
	f.DurationVar(&o.maxBackoff, "max-backoff", time.Second, "longest pause of a client after a 429 (which asks for Retry-After)")
	f.IntVar(&o.warmup, "warmup", 1, "unmeasured requests sent before the first level")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic prompts")
	f.StringVar(&o.out, "out", "", "folder for serve-bench.md, serve-bench.svg and serve-bench.json")
	f.StringVar(&o.scenario, "scenario", string(loadtest.Random), "prompts to send: random (no shared prefix), shared-prefix (shared system prompts) or chat (multi-turn conversations)")
	f.IntVar(&o.prefixes, "prefixes", 4, "shared-prefix: number of shared system prompts")
	f.IntVar(&o.prefixTokens, "prefix-tokens", 1024, "shared-prefix: approximate length of each shared system prompt")
	f.IntVar(&o.turns, "turns", 8, "chat: requests per conversation")
	f.IntVar(&o.historyTokens, "history-tokens", 4096, "chat: approximate prompt length of a conversation's last turn")
	f.Var(&o.temperature, "temperature", "temperature sent with each request (not given: none sent, the server's default)")
	f.Var(&o.topP, "top-p", "top_p sent with each request (not given: none sent)")
	f.Float64Var(&o.engineRate, "engine-rate", 0, "the engine's own output tokens/s (from memra bench); each level's rate is also given as a percentage of it (0: none)")
	return cmd
}

// levelLine is the progress line of a finished level.
func levelLine(s loadtest.Summary, engineRate float64) string {
	line := fmt.Sprintf("bench serve: c=%d: %d requests (%d ok, %d errors, %d×429) in %.1fs, %.1f tok/s",
		s.Concurrency, s.Requests, s.OK, s.Errors, s.RateLimited, s.Wall.Seconds(), s.TokensPerSec)
	if engineRate > 0 {
		line += fmt.Sprintf(" = %.1f %% of the engine's %g", 100*s.EngineFraction, engineRate)
	}
	if s.CachedReported {
		line += fmt.Sprintf(", %.1f %% of prompt tokens cached", 100*s.CachedFraction)
	}
	if s.LaterTurns > 0 {
		line += fmt.Sprintf(", TTFT p50 %.1f ms at turn 1, %.1f ms later", float64(s.TTFTFirstP50)/1e6, float64(s.TTFTLaterP50)/1e6)
	}
	return line
}

func runBenchServe(cmd *cobra.Command, o *benchServeOptions) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return fmt.Errorf("bench serve: --out: %w", err)
		}
	}
	cfg := loadtest.Config{
		URL: o.url, Model: o.model, APIKey: o.apiKey, Endpoint: loadtest.Endpoint(o.endpoint),
		Concurrency: o.concurrency, Requests: o.requests, Duration: o.duration,
		PromptTokens: o.promptTokens, MaxTokens: o.maxTokens, IgnoreEOS: o.ignoreEOS,
		Timeout: o.timeout, MaxBackoff: o.maxBackoff, Warmup: o.warmup, Seed: o.seed,
		Scenario: loadtest.Scenario(o.scenario), Prefixes: o.prefixes, PrefixTokens: o.prefixTokens,
		Turns: o.turns, HistoryTokens: o.historyTokens,
		Temperature: o.temperature.v, TopP: o.topP.v, EngineRate: o.engineRate,
		OnLevel: func(s loadtest.Summary) { fmt.Fprintln(stderr, levelLine(s, o.engineRate)) },
	}
	rep, runErr := loadtest.Run(ctx, cfg)
	if rep == nil {
		return fmt.Errorf("bench serve: %w", runErr)
	}
	if runErr != nil && len(rep.Levels) == 0 {
		return fmt.Errorf("bench serve: %w", runErr)
	}
	md := rep.Markdown()
	if _, err := stdout.Write(md); err != nil {
		return err
	}
	if o.out != "" {
		js, err := rep.JSON()
		if err != nil {
			return fmt.Errorf("bench serve: %w", err)
		}
		files := []struct {
			name string
			data []byte
		}{{"serve-bench.md", md}, {"serve-bench.svg", rep.SVG()}, {"serve-bench.json", js}}
		for _, f := range files {
			p := filepath.Join(o.out, f.name)
			if err := os.WriteFile(p, f.data, 0o644); err != nil {
				return fmt.Errorf("bench serve: %w", err)
			}
			fmt.Fprintln(stderr, "bench serve: wrote", p)
		}
	}
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			return fmt.Errorf("bench serve: interrupted; the levels finished are reported: %w", runErr)
		}
		return fmt.Errorf("bench serve: %w", runErr)
	}
	return nil
}
