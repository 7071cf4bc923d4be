package loadtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is an OpenAI-style streaming endpoint with controllable delays and
// faults. It records every request and the most requests in flight.
type fake struct {
	firstDelay time.Duration // before the first content chunk
	tokenDelay time.Duration // between content chunks
	tokens     int           // content chunks per response
	every429   int           // every n-th request is refused with 429
	fault      string        // fault of every faultEvery-th request: malformed, error-event, no-done, status500
	faultEvery int
	noUsage    bool // never send usage

	count, inflight, maxInflight atomic.Int64

	mu     sync.Mutex
	paths  []string
	auths  []string
	bodies []map[string]any
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
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	f.bodies = append(f.bodies, body)
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
	for i := range f.tokens {
		if i > 0 && !sleep(f.tokenDelay) {
			return
		}
		send(piece(fmt.Sprintf(" w%d", i)))
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
	opts, _ := body["stream_options"].(map[string]any)
	if !f.noUsage && opts["include_usage"] == true {
		prompt := 0
		if p, ok := body["prompt"].(string); ok {
			prompt = len(strings.Fields(p))
		} else if msgs, ok := body["messages"].([]any); ok && len(msgs) > 0 {
			m, _ := msgs[0].(map[string]any)
			c, _ := m["content"].(string)
			prompt = len(strings.Fields(c)) + 5
		}
		send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			prompt, f.tokens, prompt+f.tokens))
	}
	// Leave before [DONE]: the client cannot start its next request before
	// this one has stopped counting as in flight.
	leave()
	send("[DONE]")
}
