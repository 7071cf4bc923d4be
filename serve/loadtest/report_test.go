package loadtest

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create")
	require.Equal(t, string(want), string(got))
}

const ms1 = time.Millisecond

// sample builds an OK sample with the given TTFT and equal gaps.
func sample(seq int, ttft, gap time.Duration, tokens int) Sample {
	s := Sample{Seq: seq, Status: 200, TTFT: ttft, Chunks: tokens, CompletionTokens: tokens,
		PromptTokens: 530, UsageReported: true, E2E: ttft + time.Duration(tokens-1)*gap}
	for range tokens - 1 {
		s.ITL = append(s.ITL, gap)
	}
	return s
}

// fixedReport is a report with known numbers.
func fixedReport() *Report {
	l1 := Level{Concurrency: 1, Wall: 2 * time.Second, Samples: []Sample{
		sample(0, 20*ms1, 10*ms1, 100), sample(1, 30*ms1, 10*ms1, 100)}}
	l4 := Level{Concurrency: 4, Wall: 4 * time.Second, Samples: []Sample{
		sample(0, 40*ms1, 12*ms1, 100), sample(1, 60*ms1, 14*ms1, 100), sample(2, 50*ms1, 12*ms1, 100),
		{Seq: 3, Status: 429, Error: "HTTP 429: slots full"},
		{Seq: 4, Status: 200, Error: "loadtest: malformed event stream: stream ended without [DONE]", Chunks: 3, CompletionTokens: 3}}}
	l16 := Level{Concurrency: 16, Wall: 5 * time.Second, Samples: []Sample{
		sample(0, 200*ms1, 30*ms1, 128), sample(1, 250*ms1, 35*ms1, 128), sample(2, 300*ms1, 31*ms1, 128)}}
	return &Report{URL: "http://127.0.0.1:8080/v1/chat/completions", Model: "stories | 260K", Endpoint: Chat,
		PromptTokens: 512, MaxTokens: 128, Started: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		Levels: []Level{l1, l4, l16}}
}

func TestSummary(t *testing.T) {
	s := fixedReport().Levels[1].Summary()
	require.Equal(t, Summary{
		Concurrency: 4, Requests: 5, OK: 3, Errors: 1, RateLimited: 1,
		TTFTP50: 50 * ms1, TTFTP99: 59800 * time.Microsecond,
		ITLP50: 12 * ms1, ITLP99: 14 * ms1,
		E2EP50:       50*ms1 + 99*12*ms1,
		OutputTokens: 300, TokensPerSec: 75, RequestsPerSec: 0.75, PromptTokens: 530, Wall: 4 * time.Second,
		PromptTokensTotal: 3 * 530,
	}, s)
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		v    []float64
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{[]float64{7}, 99, 7},
		{[]float64{4, 1, 3, 2}, 50, 3}, // 2.5 rounds to 3
		{[]float64{10, 20, 30, 40, 50}, 50, 30},
		{[]float64{10, 20, 30, 40, 50}, 99, 50}, // 49.6 rounds to 50
		{[]float64{0, 100}, 99, 99},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, pct(tc.v, tc.p), "%v p%v", tc.v, tc.p)
	}
}

func TestReportGolden(t *testing.T) {
	r := fixedReport()
	golden(t, "fixed.md", r.Markdown())
	svg := r.SVG()
	require.Contains(t, string(svg), "stories | 260K @ http://127.0.0.1:8080/v1/chat/completions")
	golden(t, "fixed.svg", svg)

	b, err := r.JSON()
	require.NoError(t, err)
	var back struct {
		Report
		Summaries []Summary `json:"summaries"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r.Levels, back.Levels)
	require.Equal(t, r.Summaries(), back.Summaries)
	require.Equal(t, r.Model, back.Model)
}

// timing matches the columns that depend on the clock: TTFT, ITL, E2E,
// tokens/s and requests/s, between the counts and the prompt tokens.
var timing = regexp.MustCompile(`^((?:\| [^|]+ ){5})(?:\| [^|]+ ){7}((?:\| [^|]+ ){3})\|$`)

// normalise blanks the clock-dependent parts of a Markdown report.
func normalise(md string) string {
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		if m := timing.FindStringSubmatch(l); m != nil && !strings.HasPrefix(l, "| concurrency") {
			lines[i] = m[1] + strings.Repeat("| ~ ", 7) + m[2] + "|"
		}
		if strings.HasPrefix(l, "Streaming ") {
			lines[i] = regexp.MustCompile(`started .*\.$`).ReplaceAllString(l, "started ~.")
		}
	}
	return regexp.MustCompile(`http://127\.0\.0\.1:\d+`).ReplaceAllString(strings.Join(lines, "\n"), "http://127.0.0.1:PORT")
}

func TestRunMarkdownGolden(t *testing.T) {
	f := &fake{firstDelay: 2 * ms1, tokenDelay: ms1, tokens: 4, every429: 5, fault: "malformed", faultEvery: 7}
	srv := f.start(t)
	rep := run(t, Config{URL: srv.URL, Model: "fake", Concurrency: []int{1, 2}, Requests: 10, PromptTokens: 16, MaxTokens: 4, MaxBackoff: time.Millisecond})
	md := normalise(string(rep.Markdown()))
	require.Equal(t, 14, strings.Count(md, "| ~ "), "every timing cell normalised")
	golden(t, "run.md", []byte(md))
}

// fixedChatReport is a MultiTurn report with known numbers, cached tokens,
// sampling parameters and an engine rate.
func fixedChatReport() *Report {
	turn := func(seq, turn int, ttft time.Duration, prompt, cached int) Sample {
		s := sample(seq, ttft, 10*ms1, 64)
		s.Turn, s.PromptTokens, s.CachedTokens, s.CachedReported = turn, prompt, cached, true
		return s
	}
	l1 := Level{Concurrency: 1, Wall: 3 * time.Second, Samples: []Sample{
		turn(0, 1, 80*ms1, 300, 0), turn(1, 2, 20*ms1, 600, 360), turn(2, 3, 25*ms1, 900, 660)}}
	l2 := Level{Concurrency: 2, Wall: 2 * time.Second, Samples: []Sample{
		turn(0, 1, 90*ms1, 300, 0), turn(1, 1, 95*ms1, 300, 0), turn(2, 2, 30*ms1, 600, 360),
		{Seq: 3, Turn: 2, Status: 429, Error: "HTTP 429: slots full"}}}
	temp, topP := 0.6, 0.9
	return &Report{URL: "http://127.0.0.1:8080/v1/chat/completions", Model: "m", Endpoint: Chat,
		PromptTokens: 512, MaxTokens: 64, Scenario: MultiTurn, Turns: 3, HistoryTokens: 1000,
		Temperature: &temp, TopP: &topP, EngineRate: 250,
		Started: time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC), Levels: []Level{l1, l2}}
}

func TestChatReportGolden(t *testing.T) {
	r := fixedChatReport()
	golden(t, "fixed-chat.md", r.Markdown())
	require.Contains(t, string(r.SVG()), "chat: 3 turns to ≈1000, max_tokens 64")

	b, err := r.JSON()
	require.NoError(t, err)
	var back struct {
		Report
		Summaries []Summary `json:"summaries"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r.Levels, back.Levels)
	require.Equal(t, r.Summaries(), back.Summaries)
	require.Equal(t, MultiTurn, back.Scenario)
	require.Equal(t, 0.6, *back.Temperature)
	require.InDelta(t, 64*3/3.0/250, back.Summaries[0].EngineFraction, 1e-12)
	require.Equal(t, 20*ms1+(5*ms1)/2, back.Summaries[0].TTFTLaterP50)
}

func TestJSONKeepsOldFields(t *testing.T) {
	b, err := fixedReport().JSON()
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	for _, k := range []string{"url", "model", "endpoint", "prompt_tokens", "max_tokens", "started", "levels", "summaries"} {
		require.Contains(t, out, k)
	}
	sum := out["summaries"].([]any)[0].(map[string]any)
	for _, k := range []string{"concurrency", "requests", "ok", "errors", "rate_limited", "ttft_p50_ns", "ttft_p99_ns",
		"itl_p50_ns", "itl_p99_ns", "e2e_p50_ns", "output_tokens", "tokens_per_sec", "requests_per_sec", "prompt_tokens", "wall_ns"} {
		require.Contains(t, sum, k)
	}
	// Fields of other scenarios and options stay out of a random report.
	for _, k := range []string{"prefixes", "turns", "temperature", "top_p", "engine_rate_tok_s"} {
		require.NotContains(t, out, k)
	}
	require.NotContains(t, sum, "ttft_later_turns_p50_ns")
	require.NotContains(t, sum, "engine_fraction")
}
