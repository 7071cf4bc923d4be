package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
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

	// PromptTokensTotal sums usage.prompt_tokens over the successful
	// requests; 0 when none reported usage.
	PromptTokensTotal int `json:"prompt_tokens_total"`
	// CachedTokens sums usage.prompt_tokens_details.cached_tokens over the
	// successful requests that reported it.
	CachedTokens int `json:"cached_tokens"`
	// CachedReported says whether any successful request reported
	// cached_tokens.
	CachedReported bool `json:"cached_reported"`
	// CachedFraction is CachedTokens ÷ the prompt tokens of the requests
	// that reported cached_tokens; 0 when none did.
	CachedFraction float64 `json:"cached_fraction"`

	// FirstTurns and LaterTurns count the successful MultiTurn requests
	// that streamed text, of turn 1 and of turns 2 and later; TTFTFirst*
	// and TTFTLater* are their TTFT percentiles. All are 0 under the other
	// scenarios.
	FirstTurns   int           `json:"first_turns,omitempty"`
	LaterTurns   int           `json:"later_turns,omitempty"`
	TTFTFirstP50 time.Duration `json:"ttft_first_turn_p50_ns,omitempty"`
	TTFTFirstP99 time.Duration `json:"ttft_first_turn_p99_ns,omitempty"`
	TTFTLaterP50 time.Duration `json:"ttft_later_turns_p50_ns,omitempty"`
	TTFTLaterP99 time.Duration `json:"ttft_later_turns_p99_ns,omitempty"`
	// TTFTByTurn holds the TTFT p50 of each turn, from turn 1 (0 for a turn
	// no request reached); nil under the other scenarios.
	TTFTByTurn []time.Duration `json:"ttft_p50_by_turn_ns,omitempty"`

	// EngineFraction is TokensPerSec ÷ the report's EngineRate; 0 without
	// one.
	EngineFraction float64 `json:"engine_fraction,omitempty"`
}

// Summary digests the level's samples.
func (l Level) Summary() Summary {
	s := Summary{Concurrency: l.Concurrency, Requests: len(l.Samples), Wall: l.Wall}
	var ttft, itl, e2e, first, later []float64
	var byTurn [][]float64
	var promptSum, promptN, cachedPrompt int
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
			switch {
			case x.Turn == 1:
				first = append(first, float64(x.TTFT))
			case x.Turn > 1:
				later = append(later, float64(x.TTFT))
			}
			if x.Turn > 0 {
				for len(byTurn) < x.Turn {
					byTurn = append(byTurn, nil)
				}
				byTurn[x.Turn-1] = append(byTurn[x.Turn-1], float64(x.TTFT))
			}
		}
		for _, d := range x.ITL {
			itl = append(itl, float64(d))
		}
		if x.UsageReported && x.PromptTokens > 0 {
			promptSum += x.PromptTokens
			promptN++
		}
		if x.CachedReported {
			s.CachedReported = true
			s.CachedTokens += x.CachedTokens
			cachedPrompt += x.PromptTokens
		}
	}
	s.PromptTokensTotal = promptSum
	if cachedPrompt > 0 {
		s.CachedFraction = float64(s.CachedTokens) / float64(cachedPrompt)
	}
	s.FirstTurns, s.LaterTurns = len(first), len(later)
	s.TTFTFirstP50, s.TTFTFirstP99 = pct(first, 50), pct(first, 99)
	s.TTFTLaterP50, s.TTFTLaterP99 = pct(later, 50), pct(later, 99)
	for _, v := range byTurn {
		s.TTFTByTurn = append(s.TTFTByTurn, pct(v, 50))
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
		out[i] = r.summary(l)
	}
	return out
}

// summary digests level l and compares its output rate with the engine's.
func (r *Report) summary(l Level) Summary {
	s := l.Summary()
	if r.EngineRate > 0 {
		s.EngineFraction = s.TokensPerSec / r.EngineRate
	}
	return s
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }

// Markdown renders the report as a heading, a line of conditions and one
// table row per level; under MultiTurn a second table gives the TTFT of
// each turn, and with an engine rate a list compares each level with it.
func (r *Report) Markdown() []byte {
	var b bytes.Buffer
	sums := r.Summaries()
	fmt.Fprintf(&b, "## Serving load test: %s at %s\n\n", mdEscape(r.modelName()), mdEscape(r.URL))
	b.WriteString(r.conditions(sums))
	b.WriteString("\n\n")
	if sampling := r.sampling(); sampling != "" {
		fmt.Fprintf(&b, "Sampling: %s.\n\n", sampling)
	}
	head := "| concurrency | requests | ok | errors | 429 | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | E2E p50 ms | output tok/s | req/s | prompt tokens | cached tokens | cached % |"
	cols := 15
	if r.EngineRate > 0 {
		head += " % of engine |"
		cols++
	}
	if r.Scenario == MultiTurn {
		head += " TTFT p50 turn 1 ms | TTFT p99 turn 1 ms | TTFT p50 turns ≥ 2 ms | TTFT p99 turns ≥ 2 ms |"
		cols += 4
	}
	b.WriteString(head + "\n|" + strings.Repeat("---:|", cols) + "\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %s | %s | %s | %s | %s | %.1f | %.2f | %s |",
			s.Concurrency, s.Requests, s.OK, s.Errors, s.RateLimited,
			ms(s.TTFTP50), ms(s.TTFTP99), ms(s.ITLP50), ms(s.ITLP99), ms(s.E2EP50),
			s.TokensPerSec, s.RequestsPerSec, cachedCells(s))
		if r.EngineRate > 0 {
			fmt.Fprintf(&b, " %.1f |", 100*s.EngineFraction)
		}
		if r.Scenario == MultiTurn {
			fmt.Fprintf(&b, " %s | %s | %s | %s |", msOrDash(s.TTFTFirstP50, s.FirstTurns), msOrDash(s.TTFTFirstP99, s.FirstTurns),
				msOrDash(s.TTFTLaterP50, s.LaterTurns), msOrDash(s.TTFTLaterP99, s.LaterTurns))
		}
		b.WriteByte('\n')
	}
	if r.Scenario == MultiTurn {
		byTurnTable(&b, sums)
	}
	if r.EngineRate > 0 {
		fmt.Fprintf(&b, "\nAgainst the engine's %s tok/s (--engine-rate):\n\n", thousands(r.EngineRate))
		for _, s := range sums {
			fmt.Fprintf(&b, "- c=%d: %s\n", s.Concurrency, r.engineNote(s))
		}
	}
	if errs := firstErrors(r.Levels, 3); len(errs) > 0 {
		b.WriteString("\nFirst errors:\n\n")
		for _, e := range errs {
			fmt.Fprintf(&b, "- %s\n", mdEscape(e))
		}
	}
	return b.Bytes()
}

// conditions is the line under the title: what was sent and when.
func (r *Report) conditions(sums []Summary) string {
	var what string
	switch r.Scenario {
	case SharedPrefix:
		what = fmt.Sprintf("Streaming %s requests, scenario shared-prefix: each starts with one of %d shared prompts of ≈ %d tokens; prompt ≈ %d tokens (%s)",
			r.Endpoint, r.Prefixes, r.PrefixTokens, r.PromptTokens, promptNote(sums))
	case MultiTurn:
		what = fmt.Sprintf("Streaming %s requests, scenario chat: conversations of %d turns, each turn re-sending the history, the last ≈ %d tokens (%s)",
			r.Endpoint, r.Turns, r.HistoryTokens, promptNote(sums))
	default:
		what = fmt.Sprintf("Streaming %s requests; prompt ≈ %d tokens (%s)", r.Endpoint, r.PromptTokens, promptNote(sums))
	}
	return fmt.Sprintf("%s, max_tokens %d; started %s.", what, r.MaxTokens, r.Started.UTC().Format(time.RFC3339))
}

// sampling lists the sampling parameters sent; empty when none was.
func (r *Report) sampling() string {
	var parts []string
	if r.Temperature != nil {
		parts = append(parts, fmt.Sprintf("temperature %g", *r.Temperature))
	}
	if r.TopP != nil {
		parts = append(parts, fmt.Sprintf("top_p %g", *r.TopP))
	}
	return strings.Join(parts, ", ")
}

// cachedCells renders the prompt tokens, cached tokens and cached %
// cells of a level.
func cachedCells(s Summary) string {
	prompt := "–"
	if s.PromptTokensTotal > 0 {
		prompt = strconv.Itoa(s.PromptTokensTotal)
	}
	if !s.CachedReported {
		return prompt + " | not reported | –"
	}
	return fmt.Sprintf("%s | %d | %.1f", prompt, s.CachedTokens, 100*s.CachedFraction)
}

// msOrDash is ms(d), or a dash when no request was measured.
func msOrDash(d time.Duration, n int) string {
	if n == 0 {
		return "–"
	}
	return ms(d)
}

// byTurnTable writes the TTFT p50 of each turn of each level.
func byTurnTable(b *bytes.Buffer, sums []Summary) {
	turns := 0
	for _, s := range sums {
		turns = max(turns, len(s.TTFTByTurn))
	}
	if turns == 0 {
		return
	}
	b.WriteString("\nTTFT p50 by turn, ms:\n\n| concurrency |")
	for t := range turns {
		fmt.Fprintf(b, " turn %d |", t+1)
	}
	b.WriteString("\n|" + strings.Repeat("---:|", turns+1) + "\n")
	for _, s := range sums {
		fmt.Fprintf(b, "| %d |", s.Concurrency)
		for t := range turns {
			cell := "–"
			if t < len(s.TTFTByTurn) && s.TTFTByTurn[t] > 0 {
				cell = ms(s.TTFTByTurn[t])
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		b.WriteByte('\n')
	}
}

// engineNote compares a level's output rate with the engine's: "served
// 1,234 tok/s = 41.1 % of the engine's 3,000".
func (r *Report) engineNote(s Summary) string {
	return fmt.Sprintf("served %s tok/s = %.1f %% of the engine's %s", thousands(s.TokensPerSec), 100*s.EngineFraction, thousands(r.EngineRate))
}

// thousands formats v rounded to a whole number, with commas between
// groups of three digits.
func thousands(v float64) string {
	digits := strconv.FormatFloat(math.Abs(math.Round(v)), 'f', 0, 64)
	var b strings.Builder
	if v <= -0.5 {
		b.WriteByte('-')
	}
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
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
		Title:   r.plotTitle(),
		XLabel:  "concurrency (requests in flight)",
		YLabel:  "aggregate output tokens/s",
		Y2Label: "TTFT p50 (ms)",
		XScale:  scale,
		XTicks:  c,
		Width:   900,
		Height:  480,
	})
}

// plotTitle names the model, the URL and the requests' shape.
func (r *Report) plotTitle() string {
	switch r.Scenario {
	case SharedPrefix:
		return fmt.Sprintf("%s @ %s (shared-prefix: %d × ≈%d of prompt ≈%d, max_tokens %d)", r.modelName(), r.URL, r.Prefixes, r.PrefixTokens, r.PromptTokens, r.MaxTokens)
	case MultiTurn:
		return fmt.Sprintf("%s @ %s (chat: %d turns to ≈%d, max_tokens %d)", r.modelName(), r.URL, r.Turns, r.HistoryTokens, r.MaxTokens)
	}
	return fmt.Sprintf("%s @ %s (prompt ≈%d, max_tokens %d)", r.modelName(), r.URL, r.PromptTokens, r.MaxTokens)
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
