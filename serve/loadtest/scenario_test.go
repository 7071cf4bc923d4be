package loadtest

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bodyMessages returns the role and content of each chat message of body.
func bodyMessages(t *testing.T, body map[string]any) [][2]string {
	t.Helper()
	msgs, ok := body["messages"].([]any)
	require.True(t, ok, "no messages in %v", body)
	out := make([][2]string, len(msgs))
	for i, m := range msgs {
		mm := m.(map[string]any)
		out[i] = [2]string{mm["role"].(string), mm["content"].(string)}
	}
	return out
}

func TestRandomBodyUnchanged(t *testing.T) {
	// Without a scenario or sampling parameters the body is the one
	// earlier versions sent, byte for byte.
	for _, e := range []Endpoint{Chat, Completions} {
		cfg := Config{Model: "m", Endpoint: e, IgnoreEOS: true, Seed: 7}.withDefaults()
		r := &runner{cfg: cfg}
		got := r.body(randomWork{r: r, level: 4}.next(9))
		prompt := promptFor(7, 4, 9, 512)
		want := map[string]any{"model": "m", "max_tokens": 128, "stream": true,
			"stream_options": map[string]bool{"include_usage": true}, "ignore_eos": true}
		if e == Completions {
			want["prompt"] = prompt
		} else {
			want["messages"] = []map[string]string{{"role": "user", "content": prompt}}
		}
		wantJSON, err := json.Marshal(want)
		require.NoError(t, err)
		require.Equal(t, string(wantJSON), string(got))
		require.NotContains(t, string(got), "temperature")
		require.NotContains(t, string(got), "top_p")
	}
}

func TestSamplingSentOnlyWhenSet(t *testing.T) {
	temp, topP := 0.7, 0.95
	zero := 0.0
	tests := []struct {
		name           string
		temp, topP     *float64
		wantT, wantTop any
	}{
		{"unset", nil, nil, nil, nil},
		{"temperature", &temp, nil, 0.7, nil},
		{"top_p", nil, &topP, nil, 0.95},
		{"both", &temp, &topP, 0.7, 0.95},
		{"greedy", &zero, nil, 0.0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{tokens: 1}
			srv := f.start(t)
			rep := run(t, Config{URL: srv.URL, Concurrency: []int{1}, Requests: 2, PromptTokens: 8, MaxTokens: 1, Warmup: 1,
				Temperature: tc.temp, TopP: tc.topP})
			require.Len(t, f.bodies, 3)
			for _, b := range f.bodies {
				got, ok := b["temperature"]
				require.Equal(t, tc.wantT != nil, ok, "temperature present")
				require.Equal(t, tc.wantT, got)
				got, ok = b["top_p"]
				require.Equal(t, tc.wantTop != nil, ok, "top_p present")
				require.Equal(t, tc.wantTop, got)
			}
			md := string(rep.Markdown())
			if tc.temp == nil && tc.topP == nil {
				require.NotContains(t, md, "Sampling:")
			} else {
				require.Contains(t, md, "Sampling: ")
			}
		})
	}
}

func TestSharedPrefix(t *testing.T) {
	const prefixes, prefixTokens, promptTokens, requests = 3, 40, 80, 9
	for _, e := range []Endpoint{Chat, Completions} {
		t.Run(string(e), func(t *testing.T) {
			f := &fake{tokens: 2, prefixCache: true}
			srv := f.start(t)
			rep := run(t, Config{URL: srv.URL, Endpoint: e, Scenario: SharedPrefix, Prefixes: prefixes, PrefixTokens: prefixTokens,
				PromptTokens: promptTokens, Concurrency: []int{1}, Requests: requests, MaxTokens: 2, Warmup: 1, Seed: 3})
			require.Len(t, f.bodies, 1+requests)
			var want []string
			for i := range prefixes {
				want = append(want, sharedPrefix(3, i, prefixTokens))
				require.Len(t, strings.Fields(want[i]), prefixTokens)
			}
			require.NotEqual(t, want[0], want[1])
			require.NotEqual(t, want[1], want[2])
			require.NotEqual(t, want[0], want[2])
			seenSuffix := map[string]bool{}
			// One worker: the server sees the requests in Seq order,
			// after the warm-up.
			for seq, b := range f.bodies[1:] {
				prefix := want[seq%prefixes]
				var suffix string
				if e == Chat {
					msgs := bodyMessages(t, b)
					require.Len(t, msgs, 2)
					require.Equal(t, [2]string{"system", prefix}, [2]string{msgs[0][0], msgs[0][1]}, "request %d", seq)
					require.Equal(t, "user", msgs[1][0])
					suffix = msgs[1][1]
				} else {
					p := b["prompt"].(string)
					require.True(t, strings.HasPrefix(p, prefix+"\n\n"), "request %d", seq)
					suffix = strings.TrimPrefix(p, prefix+"\n\n")
				}
				require.Len(t, strings.Fields(suffix), promptTokens-prefixTokens)
				head := strings.Join(strings.Fields(suffix)[:8], " ")
				require.False(t, seenSuffix[head], "request %d repeats a user text", seq)
				seenSuffix[head] = true
			}
			// The fake's prefix cache holds each shared prompt after its
			// first use: the later requests find it.
			lv := rep.Levels[0]
			for _, s := range lv.Samples {
				require.True(t, s.CachedReported)
				if s.Seq < prefixes {
					require.Less(t, s.CachedTokens, prefixTokens, "request %d", s.Seq)
				} else {
					require.GreaterOrEqual(t, s.CachedTokens, prefixTokens, "request %d", s.Seq)
				}
			}
			sum := lv.Summary()
			require.True(t, sum.CachedReported)
			require.GreaterOrEqual(t, sum.CachedTokens, (requests-prefixes)*prefixTokens)
			require.InDelta(t, float64(sum.CachedTokens)/float64(sum.PromptTokensTotal), sum.CachedFraction, 1e-12)
			require.Greater(t, sum.CachedFraction, 0.3)
			require.Less(t, sum.CachedFraction, 0.6)
			md := string(rep.Markdown())
			require.Contains(t, md, "scenario shared-prefix: each starts with one of 3 shared prompts of ≈ 40 tokens; prompt ≈ 80 tokens")
			require.NotContains(t, md, "not reported")
		})
	}
}

func TestSharedPrefixDependsOnSeed(t *testing.T) {
	require.Equal(t, sharedPrefix(1, 2, 50), sharedPrefix(1, 2, 50))
	require.NotEqual(t, sharedPrefix(1, 2, 50), sharedPrefix(2, 2, 50))
	require.NotEqual(t, sharedPrefix(1, 2, 50), suffixFor(1, 0, 2, 50), "prefixes and user texts come from different streams")
}

// exchange holds what the fake received and answered for one request.
type exchange struct {
	body  map[string]any
	reply string
}

func TestMultiTurn(t *testing.T) {
	const turns, history, maxTokens = 4, 400, 8
	share := (history - (turns-1)*maxTokens) / (turns + 1) // 75 words each
	for _, e := range []Endpoint{Chat, Completions} {
		for _, c := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/c=%d", e, c), func(t *testing.T) {
				f := &fake{tokens: maxTokens, prefixCache: true}
				srv := f.start(t)
				rep := run(t, Config{URL: srv.URL, Endpoint: e, Scenario: MultiTurn, Turns: turns, HistoryTokens: history,
					MaxTokens: maxTokens, Concurrency: []int{c}, Requests: 2 * turns * c, Seed: 5})
				require.Len(t, f.bodies, 2*turns*c)
				var ex []exchange
				for i, b := range f.bodies {
					ex = append(ex, exchange{b, f.replies[i]})
				}
				// Each request of turn k ≥ 2 extends the request of turn k-1
				// of its conversation by the reply the fake streamed to it
				// and a new user message.
				firstTurns, systems := 0, map[string]bool{}
				for _, x := range ex {
					words := promptWords(x.body)
					if e == Chat {
						msgs := bodyMessages(t, x.body)
						require.Equal(t, "system", msgs[0][0])
						require.Zero(t, len(msgs)%2)
						k := len(msgs) / 2
						require.LessOrEqual(t, k, turns)
						for i := 1; i < len(msgs); i++ {
							role := map[bool]string{true: "user", false: "assistant"}[i%2 == 1]
							require.Equal(t, role, msgs[i][0])
						}
						require.Len(t, strings.Fields(msgs[0][1]), share)
						require.Len(t, strings.Fields(msgs[len(msgs)-1][1]), share)
						require.Len(t, words, share*(k+1)+maxTokens*(k-1), "turn %d", k)
						if k == 1 {
							firstTurns++
							systems[msgs[0][1]] = true
							continue
						}
						prev := findPrevious(t, ex, func(p exchange) bool {
							pm := bodyMessages(t, p.body)
							return len(pm) == len(msgs)-2 && equalMessages(pm, msgs[:len(msgs)-2])
						})
						require.Equal(t, [2]string{"assistant", prev.reply}, msgs[len(msgs)-2])
					} else {
						p := x.body["prompt"].(string)
						// share·(k+1) + maxTokens·(k-1) words at turn k
						k := (len(words) - share + maxTokens) / (share + maxTokens)
						require.Len(t, words, share*(k+1)+maxTokens*(k-1))
						require.True(t, strings.HasPrefix(p, strings.Join(words[:share], " ")+"\n\n"), "the system prompt, then the first user message")
						if k == 1 {
							firstTurns++
							systems[strings.Join(words[:share], " ")] = true
							continue
						}
						prev := findPrevious(t, ex, func(q exchange) bool {
							head := q.body["prompt"].(string) + q.reply + "\n\n"
							return strings.HasPrefix(p, head) && !strings.Contains(p[len(head):], "\n\n")
						})
						rest := strings.TrimPrefix(p, prev.body["prompt"].(string)+prev.reply+"\n\n")
						require.Len(t, strings.Fields(rest), share)
					}
				}
				require.Len(t, systems, firstTurns, "every conversation has its own system prompt")
				if c == 1 {
					require.Equal(t, 2, firstTurns)
				}

				// The last turn's prompt is about HistoryTokens long.
				require.InDelta(t, history, share*(turns+1)+maxTokens*(turns-1), float64(turns+1))

				lv := rep.Levels[0]
				last := map[int]int{}
				for _, s := range lv.Samples {
					require.True(t, s.OK(), s.Error)
					require.Equal(t, last[s.Worker]%turns+1, s.Turn, "worker %d seq %d", s.Worker, s.Seq)
					last[s.Worker] = s.Turn
					if s.Turn > 1 {
						// The fake cached the previous turn's prompt and reply.
						require.GreaterOrEqual(t, s.CachedTokens, share*s.Turn+maxTokens*(s.Turn-1))
					} else {
						require.Less(t, s.CachedTokens, share)
					}
				}
				sum := lv.Summary()
				require.Equal(t, firstTurns, sum.FirstTurns)
				require.Equal(t, 2*turns*c-firstTurns, sum.LaterTurns)
				require.Len(t, sum.TTFTByTurn, turns)
				md := string(rep.Markdown())
				require.Contains(t, md, "scenario chat: conversations of 4 turns")
				require.Contains(t, md, "TTFT p50 turns ≥ 2 ms")
				require.Contains(t, md, "TTFT p50 by turn, ms:")
				require.Contains(t, md, "| turn 4 |")
			})
		}
	}
}

// findPrevious returns the one exchange that match accepts.
func findPrevious(t *testing.T, ex []exchange, match func(exchange) bool) exchange {
	t.Helper()
	var found []exchange
	for _, x := range ex {
		if match(x) {
			found = append(found, x)
		}
	}
	require.Len(t, found, 1, "the previous turn")
	return found[0]
}

func equalMessages(a, b [][2]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMultiTurnRetriesAndRestarts(t *testing.T) {
	tests := []struct {
		name  string
		f     *fake
		turns []int
	}{
		// Requests 3, 6, 9 are refused: the same turn is sent again.
		{"429", &fake{tokens: 2, every429: 3}, []int{1, 2, 3, 3, 4, 1, 1, 2, 3}},
		// Requests 3, 6, 9 fail: the conversation ends, a new one starts.
		{"500", &fake{tokens: 2, fault: "status500", faultEvery: 3}, []int{1, 2, 3, 1, 2, 3, 1, 2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.f.start(t)
			rep := run(t, Config{URL: srv.URL, Scenario: MultiTurn, Turns: 4, HistoryTokens: 200, MaxTokens: 2,
				Concurrency: []int{1}, Requests: 9, MaxBackoff: time.Millisecond})
			var got []int
			for _, s := range rep.Levels[0].Samples {
				got = append(got, s.Turn)
			}
			require.Equal(t, tc.turns, got)
			if tc.name == "429" {
				require.Equal(t, tc.f.raw[2], tc.f.raw[3], "a refused turn is re-sent unchanged")
			} else {
				require.NotEqual(t, bodyMessages(t, tc.f.bodies[2])[0], bodyMessages(t, tc.f.bodies[3])[0], "a new system prompt")
			}
		})
	}
}

func TestLaterTurnTTFT(t *testing.T) {
	turn := func(seq, turn int, ttft time.Duration) Sample {
		s := sample(seq, ttft, ms1, 4)
		s.Turn = turn
		return s
	}
	failed := turn(7, 2, 900*ms1)
	failed.Error = "HTTP 500: oops"
	l := Level{Concurrency: 2, Wall: time.Second, Samples: []Sample{
		turn(0, 1, 100*ms1), turn(1, 2, 10*ms1), turn(2, 3, 30*ms1), turn(3, 1, 120*ms1),
		turn(4, 2, 20*ms1), turn(5, 3, 40*ms1), failed, turn(8, 4, 50*ms1),
	}}
	s := l.Summary()
	require.Equal(t, 2, s.FirstTurns)
	require.Equal(t, 5, s.LaterTurns, "the failed turn is left out")
	require.Equal(t, 110*ms1, s.TTFTFirstP50)
	require.Equal(t, 119800*time.Microsecond, s.TTFTFirstP99)
	require.Equal(t, 30*ms1, s.TTFTLaterP50, "median of 10, 20, 30, 40, 50")
	require.Equal(t, 49600*time.Microsecond, s.TTFTLaterP99)
	require.Equal(t, []time.Duration{110 * ms1, 15 * ms1, 35 * ms1, 50 * ms1}, s.TTFTByTurn)
	require.Equal(t, 40*ms1, s.TTFTP50, "the overall percentiles keep every turn")

	// Other scenarios have no turns.
	r := fixedReport().Levels[0].Summary()
	require.Zero(t, r.FirstTurns+r.LaterTurns)
	require.Nil(t, r.TTFTByTurn)
}

func TestCachedFraction(t *testing.T) {
	withCache := func(seq, prompt, cached int) Sample {
		s := sample(seq, ms1, ms1, 2)
		s.PromptTokens, s.CachedTokens, s.CachedReported = prompt, cached, true
		return s
	}
	l := Level{Concurrency: 1, Wall: time.Second, Samples: []Sample{
		withCache(0, 1000, 0), withCache(1, 1000, 900), withCache(2, 2000, 1500),
		sample(3, ms1, ms1, 2), // usage without cached_tokens
	}}
	s := l.Summary()
	require.True(t, s.CachedReported)
	require.Equal(t, 2400, s.CachedTokens)
	require.Equal(t, 1000+1000+2000+530, s.PromptTokensTotal)
	require.InDelta(t, 2400.0/4000, s.CachedFraction, 1e-12, "over the requests that reported it")
	require.Equal(t, "4530 | 2400 | 60.0", cachedCells(s))

	none := fixedReport().Levels[0].Summary()
	require.False(t, none.CachedReported)
	require.Zero(t, none.CachedFraction)
	require.Equal(t, "1060 | not reported | –", cachedCells(none))
	require.Equal(t, "– | not reported | –", cachedCells(Summary{}))
}

func TestEngineRate(t *testing.T) {
	rep := fixedReport()
	rep.EngineRate = 3000
	rep.Levels = []Level{{Concurrency: 8, Wall: 2 * time.Second, Samples: []Sample{
		sample(0, ms1, ms1, 1234), sample(1, ms1, ms1, 1234)}}}
	s := rep.Summaries()[0]
	require.InDelta(t, 1234.0, s.TokensPerSec, 1e-9)
	require.InDelta(t, 1234.0/3000, s.EngineFraction, 1e-12)
	require.Equal(t, "served 1,234 tok/s = 41.1 % of the engine's 3,000", rep.engineNote(s))
	md := string(rep.Markdown())
	require.Contains(t, md, "| % of engine |")
	require.Contains(t, md, "| 1234.0 | 1.00 | 1060 | not reported | – | 41.1 |")
	require.Contains(t, md, "- c=8: served 1,234 tok/s = 41.1 % of the engine's 3,000\n")

	rep.EngineRate = 0
	require.Zero(t, rep.Summaries()[0].EngineFraction)
	require.NotContains(t, string(rep.Markdown()), "engine")
}

func TestThousands(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0"}, {7.4, "7"}, {999.6, "1,000"}, {1234, "1,234"}, {123456, "123,456"},
		{1234567.8, "1,234,568"}, {-1234, "-1,234"}, {-0.2, "0"}, {math.Round(99999.5), "100,000"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, thousands(tc.v), "%v", tc.v)
	}
}

func TestScenarioDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	require.Equal(t, Random, c.Scenario)
	require.Equal(t, 512, c.PromptTokens)
	require.Equal(t, 4, c.Prefixes)
	require.Equal(t, 1024, c.PrefixTokens)
	require.Equal(t, 8, c.Turns)
	require.Equal(t, 4096, c.HistoryTokens)

	require.Equal(t, 1024+128, Config{Scenario: SharedPrefix}.withDefaults().PromptTokens)
	require.Equal(t, 300+128, Config{Scenario: SharedPrefix, PrefixTokens: 300}.withDefaults().PromptTokens)
	require.Equal(t, 900, Config{Scenario: SharedPrefix, PromptTokens: 900}.withDefaults().PromptTokens)
	require.Equal(t, (4096-7*128)/9, Config{Scenario: MultiTurn}.withDefaults().shareTokens())
}
