package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/plugin"
)

// choiceEvent is one engine event tagged with the choice it belongs to.
type choiceEvent struct {
	index int
	ev    runtime.Event
}

// generation is every choice of one HTTP request, running in the engine.
type generation struct {
	events  <-chan choiceEvent // merged, closed when every choice ended
	choices int
	prompts []int          // prompt tokens of each choice
	masks   []runtime.Mask // each choice's constraint, or nil
}

// maskErr returns the failure that ended choice i's grammar plugin early
// (a trap, a timeout), if any. Call it after the choice's Done event: the
// engine sets it before sending that event. The built-in masks' Err is not
// consulted: it was never part of a response.
func (g *generation) maskErr(i int) error {
	if m, ok := g.masks[i].(*plugin.Matcher); ok {
		return m.Err()
	}
	return nil
}

// closeMask releases a mask that holds resources (a grammar plugin's
// Matcher); the engine must be done with it.
func closeMask(m runtime.Mask) {
	if c, ok := m.(interface{ Close() }); ok {
		c.Close()
	}
}

// start submits prompts × p.n engine requests (choice index = prompt·n + j)
// under ctx. Every choice's mask is made first, so a grammar plugin that
// refuses its source fails the request before anything runs. On the first
// refusal it returns; the caller cancels ctx, which ends what was already
// submitted. Each mask is closed once its sequence's channel is closed.
func (s *Server) start(ctx context.Context, p *genParams, prompts [][]int32) (*generation, *apiError) {
	g := &generation{choices: len(prompts) * p.n}
	reqs := make([]runtime.Request, 0, g.choices)
	for pi, prompt := range prompts {
		for j := 0; j < p.n; j++ {
			req, err := p.runtimeRequest(prompt, pi*p.n+j)
			if err != nil {
				for _, r := range reqs {
					closeMask(r.Mask)
				}
				return nil, s.pluginMaskError(err)
			}
			reqs = append(reqs, req)
			g.prompts = append(g.prompts, len(prompt))
			g.masks = append(g.masks, req.Mask)
		}
	}
	out := make(chan choiceEvent, 2*len(reqs))
	var wg sync.WaitGroup
	defer func() {
		go func() {
			wg.Wait()
			close(out)
		}()
	}()
	var chans []<-chan runtime.Event
	if ge, ok := p.model.Engine.(GroupSubmitter); ok {
		var err error
		if chans, err = ge.SubmitGroup(ctx, reqs); err != nil {
			for _, r := range reqs {
				closeMask(r.Mask)
			}
			return nil, s.engineError(err, len(reqs[0].Prompt), p)
		}
	}
	for idx, req := range reqs {
		var ch <-chan runtime.Event
		if chans != nil {
			ch = chans[idx]
		} else {
			var err error
			if ch, err = p.model.Engine.Submit(ctx, req); err != nil {
				for _, r := range reqs[idx:] {
					closeMask(r.Mask)
				}
				return nil, s.engineError(err, len(req.Prompt), p)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer closeMask(req.Mask)
			for ev := range ch {
				select {
				case out <- choiceEvent{idx, ev}:
				case <-ctx.Done():
					for range ch { // the engine ends the sequence and closes
					}
					return
				}
			}
		}()
	}
	g.events = out
	return g, nil
}

// engineError maps an engine refusal or failure to what the client sees.
func (s *Server) engineError(err error, promptTokens int, p *genParams) *apiError {
	if s.markFailed(p.model, err) {
		return errModelFailed(p.model.ID)
	}
	if s.base.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, runtime.ErrClosed)) {
		return errShutDown(s.retryAfterSeconds())
	}
	switch {
	case errors.Is(err, runtime.ErrOverloaded):
		return &apiError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "rate_limit_exceeded",
			Message:    "the server is at capacity (running and queued requests are full); retry later",
			RetryAfter: s.retryAfterSeconds()}
	case errors.Is(err, runtime.ErrTooMany):
		return badRequest("n", "%d choices cannot run at once on this server (%v); lower n", p.n, err)
	case errors.Is(err, runtime.ErrTooLong):
		return tooLong(promptTokens, p.maxTokens, p.model.Engine.Info().ContextLength)
	case errors.Is(err, runtime.ErrBadRequest):
		return badRequest("", "%v", err)
	case errors.Is(err, runtime.ErrDraining):
		return errDraining(s.retryAfterSeconds())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: 499, Type: typeInvalidRequest, Message: "request cancelled"}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: "generation failed: " + err.Error()}
}

// errShutDown ends a request that the server cut because it shut down
// (the drain timed out) while the request ran; retrying it elsewhere, or
// here once restarted, is the client's move.
func errShutDown(retry int) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_shutting_down",
		Message: "the server is shutting down and ended this request before it finished; retry it", RetryAfter: retry}
}

func errDraining(retry int) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Code: "server_draining",
		Message: "the server is shutting down and does not admit new requests", RetryAfter: retry}
}

func (s *Server) retryAfterSeconds() int {
	sec := int(math.Ceil(s.cfg.RetryAfter.Seconds()))
	return max(sec, 1)
}

// tokenTimer observes time to first token and inter-token latency of one
// choice into the metrics.
type tokenTimer struct {
	m       *metrics
	model   string
	start   time.Time
	last    time.Time
	started bool
}

func (t *tokenTimer) tokens(n int) {
	if n == 0 {
		return
	}
	now := time.Now()
	if !t.started {
		t.started = true
		t.m.ttft.WithLabelValues(t.model).Observe(now.Sub(t.start).Seconds())
	} else if n > 0 {
		per := now.Sub(t.last).Seconds() / float64(n)
		for range n {
			t.m.itl.WithLabelValues(t.model).Observe(per)
		}
	}
	t.last = now
}

// totals sums the usage of every choice: prompt tokens count once per prompt
// (not once per n), and so do their cached tokens (those of the prompt's
// first choice), completion tokens once per choice.
func (g *generation) totals(n int, completion, cached []int) usage {
	var u usage
	for i, pt := range g.prompts {
		if i%n == 0 {
			u.PromptTokens += pt
			u.PromptDetails.CachedTokens += cached[i]
		}
	}
	for _, c := range completion {
		u.CompletionTokens += c
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens     int          `json:"prompt_tokens"`
	CompletionTokens int          `json:"completion_tokens"`
	TotalTokens      int          `json:"total_tokens"`
	PromptDetails    promptDetail `json:"prompt_tokens_details"`
	// Cost is the request's price from the model metadata's prices
	// (Config.UsageCost), an exact decimal.
	Cost *costValue `json:"cost,omitempty"`
}

// promptDetail is OpenAI's prompt_tokens_details: the prompt tokens read
// from the prefix cache instead of computed.
type promptDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// finiteLogprob keeps JSON encodable: -Inf (an impossible token) becomes
// OpenAI's floor of -9999.
func finiteLogprob(v float32) float64 {
	f := float64(v)
	if math.IsInf(f, 0) || math.IsNaN(f) || f < -9999 {
		return -9999
	}
	return f
}

// bytesOf spells token bytes as OpenAI's list of integers.
func bytesOf(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}
