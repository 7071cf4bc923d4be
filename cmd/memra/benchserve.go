package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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
}

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
errors and 429s. Prompts are synthetic words, about --prompt-tokens tokens, with a
random first word so prefix caches do not help; the server's own prompt count is shown
when it reports usage. Requests go only to --url: no proxy, no redirects.

The table goes to stdout; with --out DIR also serve-bench.md, serve-bench.svg (tokens/s
and TTFT p50 against concurrency) and serve-bench.json (every request's samples).`,
		Example: `  memra serve &
  memra bench serve --concurrency 1,4,16 --requests 64 --out bench/
  memra bench serve --url http://gpu-box:8000 --model Qwen/Qwen3-8B --duration 30s --api-key "$KEY"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchServe(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "http://127.0.0.1:8080", "base URL of the server (with or without /v1)")
	f.StringVar(&o.model, "model", "", "model name sent in each request (memra: empty picks the first served model)")
	f.StringVar(&o.apiKey, "api-key", "", "API key, sent as Authorization: Bearer")
	f.StringVar(&o.endpoint, "endpoint", "chat", "API to call: chat (/v1/chat/completions) or completions (/v1/completions)")
	f.IntSliceVar(&o.concurrency, "concurrency", []int{1, 4, 16, 64}, "concurrency levels, run in order")
	f.IntVar(&o.requests, "requests", 0, "requests per level (0: no count limit)")
	f.DurationVar(&o.duration, "duration", 0, "time per level after which no new request starts (0: no time limit)")
	f.IntVar(&o.promptTokens, "prompt-tokens", 512, "approximate prompt length in tokens")
	f.IntVar(&o.maxTokens, "max-tokens", 128, "max_tokens of each request")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", true, `send "ignore_eos": true so every request generates --max-tokens tokens`)
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit per request, streaming included")
	f.DurationVar(&o.maxBackoff, "max-backoff", time.Second, "longest pause of a client after a 429 (which asks for Retry-After)")
	f.IntVar(&o.warmup, "warmup", 1, "unmeasured requests sent before the first level")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic prompts")
	f.StringVar(&o.out, "out", "", "folder for serve-bench.md, serve-bench.svg and serve-bench.json")
	return cmd
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
		OnLevel: func(s loadtest.Summary) {
			fmt.Fprintf(stderr, "bench serve: c=%d: %d requests (%d ok, %d errors, %d×429) in %.1fs, %.1f tok/s\n",
				s.Concurrency, s.Requests, s.OK, s.Errors, s.RateLimited, s.Wall.Seconds(), s.TokensPerSec)
		},
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
