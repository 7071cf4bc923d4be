package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/tools"
)

// ollamaShape writes /api/chat and /api/generate responses: one object, or
// NDJSON lines of deltas ending in a line with done, done_reason, the
// token counts and the durations (nanoseconds). Reasoning goes to
// thinking, tool calls to message.tool_calls with their arguments as
// objects, each call sent whole once complete.
type ollamaShape struct {
	chat        bool // /api/chat (message) rather than /api/generate (response)
	model       string
	family      tools.Family
	reasoning   bool
	startInside bool
	start       time.Time

	first time.Time // the first token's arrival
	rs    *tools.Reasoner
	ps    *tools.Parser
	call  *ollamaCall     // the call being parsed, sent once complete
	args  strings.Builder // its arguments so far
	ended runtime.FinishReason
}

// ollamaCall is one entry of message.tool_calls.
type ollamaCall struct {
	Function ollamaFunction `json:"function"`
}

type ollamaFunction struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ollamaMessage is a chat response's message.
type ollamaMessage struct {
	Role      string       `json:"role"`
	Content   string       `json:"content"`
	Thinking  string       `json:"thinking,omitempty"`
	ToolCalls []ollamaCall `json:"tool_calls,omitempty"`
}

func (*ollamaShape) idPrefix() string { return "" }

func (o *ollamaShape) chunk(done bool) map[string]any {
	return map[string]any{"model": o.model, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "done": done}
}

// body puts content, thinking and calls where the endpoint wants them.
func (o *ollamaShape) body(c map[string]any, content, thinking string, calls []ollamaCall) map[string]any {
	if o.chat {
		c["message"] = ollamaMessage{Role: "assistant", Content: content, Thinking: thinking, ToolCalls: calls}
		return c
	}
	c["response"] = content
	if thinking != "" {
		c["thinking"] = thinking
	}
	return c
}

// final adds the last line's fields: the reason and the counts and
// durations Ollama reports.
func (o *ollamaShape) final(c map[string]any, reason runtime.FinishReason, u usage) map[string]any {
	now := time.Now()
	first := o.first
	if first.IsZero() {
		first = now
	}
	c["done_reason"] = string(reason)
	c["total_duration"] = now.Sub(o.start).Nanoseconds()
	c["load_duration"] = 0
	c["prompt_eval_count"] = u.PromptTokens
	c["prompt_eval_duration"] = first.Sub(o.start).Nanoseconds()
	c["eval_count"] = u.CompletionTokens
	c["eval_duration"] = now.Sub(first).Nanoseconds()
	if u.Cost != nil {
		c["cost"] = u.Cost
	}
	return c
}

func (o *ollamaShape) blocking(h *respHeader, res []choiceResult, u usage) any {
	family := tools.None // /api/generate returns no calls
	if o.chat {
		family = o.family
	}
	thinking, content, parsed := splitOutput(res[0].text.String(), o.reasoning, o.startInside, family)
	var calls []ollamaCall
	for _, c := range parsed {
		calls = append(calls, ollamaCall{Function: ollamaFunction{Name: c.Name, Arguments: argsObject(c.Arguments)}})
	}
	return o.final(o.body(o.chunk(true), content, thinking, calls), res[0].finish, u)
}

// argsObject is a call's arguments as the JSON object Ollama sends.
func argsObject(args string) json.RawMessage {
	if json.Valid([]byte(args)) && strings.HasPrefix(strings.TrimSpace(args), "{") {
		return json.RawMessage(args)
	}
	return json.RawMessage(`{}`)
}

func (o *ollamaShape) begin(*respHeader, int) any {
	o.rs, o.ps = tools.NewReasoner(o.startInside), tools.NewParser(o.family)
	return nil
}

func (o *ollamaShape) delta(_ *respHeader, _ int, d choiceDelta) []any {
	if o.first.IsZero() {
		o.first = time.Now()
	}
	thinking, content := "", d.text
	if o.reasoning {
		thinking, content = o.rs.Add(d.text)
	}
	return o.pieces(thinking, content, false)
}

func (o *ollamaShape) finish(_ *respHeader, _ int, reason string) []any {
	thinking, content := "", ""
	if o.reasoning {
		thinking, content = o.rs.Flush()
	}
	o.ended = runtime.FinishReason(reason)
	return o.pieces(thinking, content, true)
}

// pieces turns a delta into lines: thinking, content, and each call once
// the next begins or the output ends.
func (o *ollamaShape) pieces(thinking, content string, flush bool) []any {
	parts := []tools.Delta{{Content: content}}
	if o.chat && o.family != tools.None {
		parts = o.ps.Add(content)
		if flush {
			parts = append(parts, o.ps.Flush()...)
		}
	}
	var out []any
	if thinking != "" {
		out = append(out, o.body(o.chunk(false), "", thinking, nil))
	}
	var text strings.Builder
	emitText := func() {
		if text.Len() > 0 {
			out = append(out, o.body(o.chunk(false), text.String(), "", nil))
			text.Reset()
		}
	}
	for _, p := range parts {
		switch {
		case p.Name != "":
			emitText()
			out = append(out, o.sendCall()...)
			o.call = &ollamaCall{Function: ollamaFunction{Name: p.Name}}
		case p.Args != "":
			o.args.WriteString(p.Args)
		default:
			text.WriteString(p.Content)
		}
	}
	emitText()
	if flush {
		out = append(out, o.sendCall()...)
	}
	return out
}

// sendCall emits the call being parsed, if any.
func (o *ollamaShape) sendCall() []any {
	if o.call == nil {
		return nil
	}
	c := o.call
	o.call = nil
	c.Function.Arguments = argsObject(o.args.String())
	o.args.Reset()
	return []any{o.body(o.chunk(false), "", "", []ollamaCall{*c})}
}

func (o *ollamaShape) usage(_ *respHeader, u usage) any {
	return o.final(o.body(o.chunk(true), "", "", nil), o.ended, u)
}

func (*ollamaShape) errorBody(e *apiError) any { return ollamaError{Error: e.Message} }

func (o *ollamaShape) newStream(w http.ResponseWriter) eventStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	n := &ndjson{sseWriter: &sseWriter{w: w, rc: http.NewResponseController(w)}}
	n.flush()
	return n
}

// ndjson writes one JSON object a line.
type ndjson struct{ *sseWriter }

func (n *ndjson) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic("BUG: stream line does not marshal: " + err.Error())
	}
	if n.err != nil {
		return
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		n.err = err
		return
	}
	n.flush()
}

func (n *ndjson) done() {}

func (n *ndjson) fail(e *apiError) { n.send(ollamaError{Error: e.Message}) }
