package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/memra-ai/memra/internal/plot"
)

// Summary is the digest of one level.
type Summary struct {
	// Concurrency is the level's number of workers.
	Concurrency int `json:"concurrency"`
	// Requests counts every request sent.
	Requests int `json:"requests"`
	// OK counts the successful requests.
	OK int `json:"ok"`
	// Errors counts the failed requests other than 429s.
	Errors int `json:"errors"`
	// RateLimited counts the requests refused with 429.
	RateLimited int `json:"rate_limited"`
	// TTFTP50 and TTFTP99 are time-to-first-token percentiles over the
	// successful requests that streamed text.
	TTFTP50 time.Duration `json:"ttft_p50_ns"`
	TTFTP99 time.Duration `json:"ttft_p99_ns"`
	// ITLP50 and ITLP99 are percentiles over every gap between text chunks
	// of the successful requests.
	ITLP50 time.Duration `json:"itl_p50_ns"`
	ITLP99 time.Duration `json:"itl_p99_ns"`
	// E2EP50 is the median end-to-end latency of the successful requests.
	E2EP50 time.Duration `json:"e2e_p50_ns"`
	// OutputTokens sums the completion tokens of the successful requests.
	OutputTokens int `json:"output_tokens"`
	// TokensPerSec is OutputTokens ÷ the level's wall time.
	TokensPerSec float64 `json:"tokens_per_sec"`
	// RequestsPerSec is OK ÷ the level's wall time.
	RequestsPerSec float64 `json:"requests_per_sec"`
	// PromptTokens is the mean of the server's usage.prompt_tokens over the
	// successful requests that reported it; 0 when none did.
	PromptTokens float64 `json:"prompt_tokens"`
	// Wall is the level's wall time.
	Wall time.Duration `json:"wall_ns"`
}

// Summary digests the level's samples.
func (l Level) Summary() Summary {
	s := Summary{Concurrency: l.Concurrency, Requests: len(l.Samples), Wall: l.Wall}
	var ttft, itl, e2e []float64
	var promptSum, promptN int
	for _, x := range l.Samples {
		switch {
		case x.RateLimited():
			s.RateLimited++
			continue
		case !x.OK():
			s.Errors++
			continue
		}
		s.OK++
		s.OutputTokens += x.CompletionTokens
		e2e = append(e2e, float64(x.E2E))
		if x.Chunks > 0 {
			ttft = append(ttft, float64(x.TTFT))
		}
		for _, d := range x.ITL {
			itl = append(itl, float64(d))
		}
		if x.UsageReported && x.PromptTokens > 0 {
			promptSum += x.PromptTokens
			promptN++
		}
	}
	s.TTFTP50, s.TTFTP99 = pct(ttft, 50), pct(ttft, 99)
	s.ITLP50, s.ITLP99 = pct(itl, 50), pct(itl, 99)
	s.E2EP50 = pct(e2e, 50)
	if sec := l.Wall.Seconds(); sec > 0 {
		s.TokensPerSec = float64(s.OutputTokens) / sec
		s.RequestsPerSec = float64(s.OK) / sec
	}
	if promptN > 0 {
		s.PromptTokens = float64(promptSum) / float64(promptN)
	}
	return s
}

// pct returns the p-th percentile of v (linear interpolation between the
// closest ranks), 0 for no values. It sorts v.
func pct(v []float64, p float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	r := p / 100 * float64(len(v)-1)
	lo := int(math.Floor(r))
	hi := min(lo+1, len(v)-1)
	return time.Duration(math.Round(v[lo] + (v[hi]-v[lo])*(r-float64(lo))))
}

// sortSamples orders samples by Seq.
func sortSamples(s []Sample) {
	slices.SortFunc(s, func(a, b Sample) int { return a.Seq - b.Seq })
}

// Summaries digests every level.
func (r *Report) Summaries() []Summary {
	out := make([]Summary, len(r.Levels))
	for i, l := range r.Levels {
		out[i] = l.Summary()
	}
	return out
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }

// Markdown renders the report as a heading, a line of conditions and one
// table row per level.
func (r *Report) Markdown() []byte {
	var b bytes.Buffer
	sums := r.Summaries()
	fmt.Fprintf(&b, "## Serving load test: %s at %s\n\n", mdEscape(r.modelName()), mdEscape(r.URL))
	fmt.Fprintf(&b, "Streaming %s requests; prompt ≈ %d tokens (%s), max_tokens %d; started %s.\n\n",
		r.Endpoint, r.PromptTokens, promptNote(sums), r.MaxTokens, r.Started.UTC().Format(time.RFC3339))
	b.WriteString("| concurrency | requests | ok | errors | 429 | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | E2E p50 ms | output tok/s | req/s |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %s | %s | %s | %s | %s | %.1f | %.2f |\n",
			s.Concurrency, s.Requests, s.OK, s.Errors, s.RateLimited,
			ms(s.TTFTP50), ms(s.TTFTP99), ms(s.ITLP50), ms(s.ITLP99), ms(s.E2EP50),
			s.TokensPerSec, s.RequestsPerSec)
	}
	if errs := firstErrors(r.Levels, 3); len(errs) > 0 {
		b.WriteString("\nFirst errors:\n\n")
		for _, e := range errs {
			fmt.Fprintf(&b, "- %s\n", mdEscape(e))
		}
	}
	return b.Bytes()
}

// modelName is the model for titles: the requested name, or a note that
// the server picked its default.
func (r *Report) modelName() string {
	if r.Model == "" {
		return "(server's default model)"
	}
	return r.Model
}

// promptNote says whether the prompt length was counted by the server.
func promptNote(sums []Summary) string {
	var sum float64
	n := 0
	for _, s := range sums {
		if s.PromptTokens > 0 {
			sum += s.PromptTokens * float64(s.OK)
			n += s.OK
		}
	}
	if n == 0 {
		return "approximate: the server reported no usage"
	}
	return fmt.Sprintf("server counted %.0f on average", sum/float64(n))
}

// firstErrors returns up to n distinct error texts with their counts.
func firstErrors(levels []Level, n int) []string {
	count := map[string]int{}
	var order []string
	for _, l := range levels {
		for _, s := range l.Samples {
			if s.OK() {
				continue
			}
			if count[s.Error] == 0 {
				order = append(order, s.Error)
			}
			count[s.Error]++
		}
	}
	var out []string
	for _, e := range order[:min(n, len(order))] {
		out = append(out, fmt.Sprintf("%d× %s", count[e], e))
	}
	return out
}

// mdEscape keeps a value from breaking a Markdown table or line.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace(s)
}

// SVG plots aggregate output tokens/s (left axis) and TTFT p50 (right
// axis) against concurrency.
func (r *Report) SVG() []byte {
	sums := r.Summaries()
	c := make([]float64, len(sums))
	tps := make([]float64, len(sums))
	ttft := make([]float64, len(sums))
	lo, hi := math.Inf(1), 0.0
	for i, s := range sums {
		c[i] = float64(s.Concurrency)
		tps[i] = s.TokensPerSec
		ttft[i] = float64(s.TTFTP50) / 1e6
		if s.OK == 0 {
			ttft[i] = math.NaN()
		}
		lo, hi = math.Min(lo, c[i]), math.Max(hi, c[i])
	}
	scale := plot.Linear
	if hi >= 4*lo {
		scale = plot.Log2
	}
	return plot.Line([]plot.Series{
		{Name: "output tokens/s", X: c, Y: tps},
		{Name: "TTFT p50 (ms)", X: c, Y: ttft, Right: true},
	}, plot.Options{
		Title:   fmt.Sprintf("%s @ %s (prompt ≈%d, max_tokens %d)", r.modelName(), r.URL, r.PromptTokens, r.MaxTokens),
		XLabel:  "concurrency (requests in flight)",
		YLabel:  "aggregate output tokens/s",
		Y2Label: "TTFT p50 (ms)",
		XScale:  scale,
		XTicks:  c,
		Width:   900,
		Height:  480,
	})
}

// JSON returns the report with every per-request sample and the level
// summaries, indented.
func (r *Report) JSON() ([]byte, error) {
	out := struct {
		*Report
		Summaries []Summary `json:"summaries"`
	}{r, r.Summaries()}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return nil, fmt.Errorf("loadtest: report to JSON: %w", err)
	}
	return append(b, '\n'), nil
}
