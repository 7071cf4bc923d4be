package serve

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// agentEngine is a fake engine for the agent surfaces. With a Mask it
// samples uniformly among the tokens the mask allows (seeded), the worst
// case for structured output; without one it replays script in pieces of
// chunk bytes, so tags and markers cross event boundaries.
type agentEngine struct {
	script string
	chunk  int
}

func (a *agentEngine) Info() runtime.ModelInfo {
	return runtime.ModelInfo{Name: "agent", Arch: "fake", VocabSize: fakeVocab, ContextLength: 8192, Device: "cpu"}
}
func (a *agentEngine) Tokenizer() Tokenizer { return fakeTokenizer{} }
func (a *agentEngine) Stats() Stats         { return Stats{} }
func (a *agentEngine) Drain()               {}

func (a *agentEngine) Submit(ctx context.Context, req runtime.Request) (<-chan runtime.Event, error) {
	out := make(chan runtime.Event, 8192)
	go func() {
		defer close(out)
		u := runtime.Usage{PromptTokens: len(req.Prompt)}
		if req.Mask == nil {
			for i := 0; i < len(a.script); i += a.chunk {
				piece := a.script[i:min(i+a.chunk, len(a.script))]
				u.CompletionTokens += len(piece)
				out <- runtime.Event{Text: piece}
			}
			out <- runtime.Event{Done: true, Finish: runtime.FinishStop, Usage: u}
			return
		}
		seed := uint64(1)
		if req.Sampling.Seed != nil {
			seed = *req.Sampling.Seed
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		logits := make([]float32, fakeVocab)
		var allowed []int32
		for u.CompletionTokens < req.MaxTokens {
			clear(logits)
			req.Mask.Apply(logits)
			allowed = allowed[:0]
			for id, v := range logits {
				if !math.IsInf(float64(v), -1) {
					allowed = append(allowed, int32(id))
				}
			}
			if len(allowed) == 0 {
				out <- runtime.Event{Err: runtime.ErrNoCandidates, Done: true}
				return
			}
			tok := allowed[rng.IntN(len(allowed))]
			req.Mask.Accept(tok)
			u.CompletionTokens++
			if tok == fakeEOS {
				out <- runtime.Event{Done: true, Finish: runtime.FinishStop, Usage: u}
				return
			}
			out <- runtime.Event{Text: string([]byte{byte(tok)})}
		}
		out <- runtime.Event{Done: true, Finish: runtime.FinishLength, Usage: u}
	}()
	return out, nil
}

// sourceTemplate is fakeTemplate with a source, so the server detects the
// tool syntax and thinking from it; it records the last render context.
type sourceTemplate struct {
	fakeTemplate
	src  string
	last *json.RawMessage
}

func (s sourceTemplate) Source() string { return s.src }

func (s sourceTemplate) Render(ctx json.RawMessage) (string, error) {
	if s.last != nil {
		*s.last = append(json.RawMessage(nil), ctx...)
	}
	out, err := s.fakeTemplate.Render(ctx)
	if strings.Contains(s.src, "enable_thinking") && strings.Contains(string(ctx), `"enable_thinking":true`) {
		out += "<think>\n" // like DeepSeek-R1 distills: the output starts inside the block
	}
	return out, err
}

// newAgentServer serves one model "m" on e with a template of source src.
func newAgentServer(t *testing.T, e Engine, src string, last *json.RawMessage) *testServer {
	t.Helper()
	s, err := New(Config{Host: "127.0.0.1", StartTime: time.Unix(1700000000, 0),
		Models: []Model{{ID: "m", Engine: e, Template: sourceTemplate{src: src, last: last}}}})
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &testServer{Server: s, ts: ts}
}

const (
	hermesSource  = `{{ '<tool_call>' }}{% if enable_thinking %}<think>{% endif %}`
	llamaSource   = `<|start_header_id|>{"name": function name, "parameters": …}`
	mistralSource = `[TOOL_CALLS]{{ tool_calls|tojson }}`
)
