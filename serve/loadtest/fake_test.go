package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is an OpenAI-style streaming endpoint with controllable delays and
// faults. It records every request, the text it streamed back and the most
// requests in flight. Each reply is distinct: " r<n>w<i>" for content chunk
// i of request n. With prefixCache it counts a prompt's leading words that
// an earlier prompt and its reply began with, and reports them as
// usage.prompt_tokens_details.cached_tokens, as a server with a prefix
// cache does (prompt and reply tokens kept).
type fake struct {
	firstDelay  time.Duration // before the first content chunk
	tokenDelay  time.Duration // between content chunks
	tokens      int           // content chunks per response
	every429    int           // every n-th request is refused with 429
	fault       string        // fault of every faultEvery-th request: malformed, error-event, no-done, status500
	faultEvery  int
	noUsage     bool // never send usage
	prefixCache bool // report cached_tokens from a simulated prefix cache

	count, inflight, maxInflight atomic.Int64

	mu      sync.Mutex
	paths   []string
	auths   []string
	bodies  []map[string]any
	raw     [][]byte   // the request bodies as sent
	replies []string   // the text streamed for each body; "" until done
	cache   [][]string // the prompt and reply words of every answered request
}

// promptWords returns the words of a request's prompt: the completions
// prompt, or the contents of every chat message in order.
func promptWords(body map[string]any) []string {
	if p, ok := body["prompt"].(string); ok {
		return strings.Fields(p)
	}
	var w []string
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		c, _ := mm["content"].(string)
		w = append(w, strings.Fields(c)...)
	}
	return w
}

// cached returns the longest run of leading words that prompt shares with
// a cached sequence. The caller holds f.mu.
func (f *fake) cached(prompt []string) int {
	best := 0
	for _, c := range f.cache {
		n := 0
		for n < len(c) && n < len(prompt) && c[n] == prompt[n] {
			n++
		}
		best = max(best, n)
	}
	return best
}

func (f *fake) start(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv
}

func (f *fake) enter() {
	cur := f.inflight.Add(1)
	for {
		m := f.maxInflight.Load()
		if cur <= m || f.maxInflight.CompareAndSwap(m, cur) {
			return
		}
	}
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.count.Add(1))
	f.enter()
	left := false
	leave := func() {
		if !left {
			left = true
			f.inflight.Add(-1)
		}
	}
	defer leave()
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	words := promptWords(body)
	f.mu.Lock()
	idx := len(f.bodies)
	f.paths = append(f.paths, r.URL.Path)
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	f.bodies = append(f.bodies, body)
	f.raw = append(f.raw, raw)
	f.replies = append(f.replies, "")
	cached := f.cached(words)
	f.mu.Unlock()

	fault := ""
	if f.faultEvery > 0 && n%f.faultEvery == 0 {
		fault = f.fault
	}
	if f.every429 > 0 && n%f.every429 == 0 {
		leave()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"slots full","type":"rate_limit_error"}}`)
		return
	}
	if fault == "status500" {
		leave()
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "oops")
		return
	}
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(data string) {
		fmt.Fprintf(w, "data: %s\n\n", data)
		fl.Flush()
	}
	piece := func(text string) string {
		if chat {
			return fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q}}]}`, text)
		}
		return fmt.Sprintf(`{"object":"text_completion","choices":[{"index":0,"text":%q}]}`, text)
	}
	if chat {
		send(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
	}
	sleep := func(d time.Duration) bool {
		select {
		case <-r.Context().Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !sleep(f.firstDelay) {
		return
	}
	var reply strings.Builder
	for i := range f.tokens {
		if i > 0 && !sleep(f.tokenDelay) {
			return
		}
		text := fmt.Sprintf(" r%dw%d", n, i)
		reply.WriteString(text)
		send(piece(text))
		if i == 1 {
			switch fault {
			case "malformed":
				leave()
				send(`{"choices":[{"delta":{"content":"x"`)
				return
			case "error-event":
				leave()
				send(`{"error":{"message":"engine failed","type":"server_error"}}`)
				return
			}
		}
	}
	if fault == "no-done" {
		return
	}
	f.mu.Lock()
	f.replies[idx] = reply.String()
	f.cache = append(f.cache, append(words[:len(words):len(words)], strings.Fields(reply.String())...))
	f.mu.Unlock()
	opts, _ := body["stream_options"].(map[string]any)
	if !f.noUsage && opts["include_usage"] == true {
		prompt := len(words)
		if _, ok := body["messages"]; ok {
			prompt += 5
		}
		details := ""
		if f.prefixCache {
			details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, cached)
		}
		send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%s}}`,
			prompt, f.tokens, prompt+f.tokens, details))
	}
	// Leave before [DONE]: the client cannot start its next request before
	// this one has stopped counting as in flight.
	leave()
	send("[DONE]")
}
