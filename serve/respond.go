package serve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/memra-ai/memra/runtime"
)

// tokenInfo is one generated token with its logprobs.
type tokenInfo = runtime.GeneratedToken

// respHeader is what every object of one response shares.
type respHeader struct {
	id       string
	created  int64
	model    string
	logprobs bool
}

// choiceResult accumulates one choice of a blocking response.
type choiceResult struct {
	text       strings.Builder
	tokens     []tokenInfo
	finish     runtime.FinishReason
	completion int
	cached     int // prompt tokens reused from the prefix cache
}

// choiceDelta is one streamed piece of a choice.
type choiceDelta struct {
	text   string
	tokens []tokenInfo
	offset int // bytes of this choice's text before this piece
}

// shape writes one endpoint's response objects; a nil chunk is not sent.
type shape interface {
	idPrefix() string
	blocking(h *respHeader, res []choiceResult, u usage) any
	begin(h *respHeader, index int) any
	// delta and finish return the chunks to send, in order.
	delta(h *respHeader, index int, d choiceDelta) []any
	finish(h *respHeader, index int, reason string) []any
	usage(h *respHeader, u usage) any
}

// generate runs every choice and writes the response, blocking or streamed.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, p *genParams, prompts [][]int32, sh shape) {
	if e := s.modelFailed(p.model); e != nil {
		writeShaped(w, sh, e)
		return
	}
	if !s.enter() {
		writeShaped(w, sh, errDraining(s.retryAfterSeconds()))
		return
	}
	defer s.leave()
	ctx, cancel := s.requestContext(r)
	defer cancel()
	p.scope = tenantOf(r.Context()) + p.scope
	g, e := s.start(ctx, p, prompts)
	if e != nil {
		writeShaped(w, sh, e)
		return
	}
	h := &respHeader{id: newID(sh.idPrefix()), created: unixNow(), model: p.model.ID, logprobs: p.logprobs}
	res := make([]choiceResult, g.choices)
	timers := make([]tokenTimer, g.choices)
	for i := range timers {
		timers[i] = tokenTimer{m: s.metrics, model: p.model.ID, start: time.Now()}
	}
	var sse eventStream
	if p.stream {
		sse = startStream(w, sh)
		for i := range res {
			if c := sh.begin(h, i); c != nil {
				sse.send(c)
			}
		}
	}
	for ce := range g.events {
		ev, c := ce.ev, &res[ce.index]
		if ev.Err != nil {
			cancel()
			if errors.Is(ev.Err, context.Canceled) && r.Context().Err() != nil {
				return // the client left
			}
			s.log.Error("generation failed", "model", p.model.ID, "id", h.id, "err", ev.Err)
			ae := s.engineError(ev.Err, g.prompts[ce.index], p)
			if sse != nil {
				sse.fail(ae)
			} else {
				writeShaped(w, sh, ae)
			}
			return
		}
		n := len(ev.Tokens)
		if n == 0 && ev.Text != "" {
			n = 1
		}
		timers[ce.index].tokens(n)
		if ev.Text != "" || (p.logprobs && len(ev.Tokens) > 0) {
			if sse != nil {
				for _, chunk := range sh.delta(h, ce.index, choiceDelta{text: ev.Text, tokens: ev.Tokens, offset: c.text.Len()}) {
					sse.send(chunk)
				}
			}
			c.text.WriteString(ev.Text)
			if p.logprobs {
				c.tokens = append(c.tokens, ev.Tokens...)
			}
		}
		if ev.Done {
			if err := g.maskErr(ce.index); err != nil {
				// The constraint failed mid-generation (a grammar plugin
				// trapped or timed out): the output is not what was asked.
				cancel()
				ae := s.pluginFailure("the grammar plugin failed during generation, so the output was abandoned",
					"grammar", err, "model", p.model.ID, "response", h.id)
				if sse != nil {
					sse.fail(ae)
				} else {
					writeShaped(w, sh, ae)
				}
				return
			}
			c.finish = ev.Finish
			c.completion = ev.Usage.CompletionTokens
			c.cached = ev.Usage.CachedTokens
			if sse != nil {
				for _, chunk := range sh.finish(h, ce.index, string(ev.Finish)) {
					sse.send(chunk)
				}
			}
		}
		if sse != nil && sse.failed() {
			cancel() // the client is gone: free the sequences
			return
		}
	}
	if ctx.Err() != nil {
		// The choices' ends were dropped with the context: the client
		// left, or the server cut the request at the end of a drain.
		if r.Context().Err() == nil && s.base.Err() != nil {
			ae := errShutDown(s.retryAfterSeconds())
			if sse != nil {
				sse.fail(ae)
			} else {
				writeShaped(w, sh, ae)
			}
		}
		return
	}
	completion, cached := make([]int, len(res)), make([]int, len(res))
	for i := range res {
		completion[i], cached[i] = res[i].completion, res[i].cached
	}
	u := g.totals(p.n, completion, cached)
	if s.cfg.UsageCost {
		u.Cost = p.model.cost(u.PromptTokens, u.PromptDetails.CachedTokens, u.CompletionTokens)
	}
	s.metrics.promptTokens.WithLabelValues(p.model.ID).Add(float64(u.PromptTokens))
	s.metrics.completionTokens.WithLabelValues(p.model.ID).Add(float64(u.CompletionTokens))
	if sse == nil {
		writeJSON(w, http.StatusOK, sh.blocking(h, res, u))
		return
	}
	if p.includeUsage {
		sse.send(sh.usage(h, u))
	}
	sse.done()
}
