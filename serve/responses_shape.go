package serve

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/tools"
)

// responsesShape writes Response objects and the Responses API's stream
// events, splitting reasoning and function calls out of the text as
// chatShape does.
type responsesShape struct {
	req         *responsesRequest
	model       *Model
	family      tools.Family
	reasoning   bool // split <think> blocks
	startInside bool
	summary     bool // reasoning.summary was asked for: the reasoning text is the summary

	// streaming state (one choice)
	seq      int
	rs       *tools.Reasoner
	ps       *tools.Parser
	out      []map[string]any     // output items so far (for response.completed)
	open     map[string]any       // the item being streamed, or nil
	text     strings.Builder      // the open item's text or arguments
	thinking strings.Builder      // all reasoning text (its tokens are counted)
	ended    runtime.FinishReason // the choice's finish reason
}

func newResponsesShape(req *responsesRequest, c *preparedChat, m *Model) *responsesShape {
	return &responsesShape{req: req, model: m, family: c.plan.family, reasoning: c.plan.reasoning,
		startInside: c.startInside, summary: req.Reasoning != nil && req.Reasoning.Summary != nil}
}

// events are several stream events returned as one chunk.
type events []map[string]any

func (*responsesShape) idPrefix() string { return "resp_" }

// response is the Response object with output, status and usage.
func (rs *responsesShape) response(h *respHeader, status string, output []map[string]any, u *usage) map[string]any {
	req := rs.req
	format := json.RawMessage(`{"type":"text"}`)
	if req.Text != nil && len(req.Text.Format) > 0 && string(req.Text.Format) != "null" {
		format = req.Text.Format
	}
	toolsOut := json.RawMessage(`[]`)
	if len(req.Tools) > 0 && string(req.Tools) != "null" {
		toolsOut = req.Tools
	}
	choice := json.RawMessage(`"auto"`)
	if len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null" {
		choice = req.ToolChoice
	}
	meta := json.RawMessage(`{}`)
	if len(req.Metadata) > 0 && string(req.Metadata) != "null" {
		meta = req.Metadata
	}
	reasoning := map[string]any{"effort": nil, "summary": nil}
	if r := req.Reasoning; r != nil {
		reasoning["effort"], reasoning["summary"] = r.Effort, r.Summary
	}
	if output == nil {
		output = []map[string]any{}
	}
	obj := map[string]any{
		"id": h.id, "object": "response", "created_at": h.created, "status": status, "error": nil,
		"incomplete_details": nil, "instructions": req.Instructions, "max_output_tokens": req.MaxOutputTokens,
		"model": h.model, "output": output, "parallel_tool_calls": req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		"previous_response_id": nil, "reasoning": reasoning, "store": false, "temperature": req.Temperature,
		"text": map[string]any{"format": format}, "tool_choice": choice, "tools": toolsOut, "top_p": req.TopP,
		"truncation": "disabled", "metadata": meta, "usage": nil,
	}
	if status == "incomplete" {
		obj["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	if u != nil {
		ru := map[string]any{"input_tokens": u.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": u.PromptDetails.CachedTokens},
			"output_tokens": u.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": rs.reasoningTokens()},
			"total_tokens": u.TotalTokens}
		if u.Cost != nil {
			ru["cost"] = u.Cost
		}
		obj["usage"] = ru
	}
	return obj
}

// reasoningTokens counts the tokens of the reasoning text.
func (rs *responsesShape) reasoningTokens() int {
	if rs.thinking.Len() == 0 {
		return 0
	}
	return len(rs.model.Engine.Tokenizer().Encode(rs.thinking.String(), false, false))
}

func statusOf(f runtime.FinishReason) string {
	if f == runtime.FinishLength {
		return "incomplete"
	}
	return "completed"
}

// Output items.
func messageItem(id, status, text string) map[string]any {
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant",
		"content": []map[string]any{outputText(text)}}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func callItem(id, callID, name, args, status string) map[string]any {
	return map[string]any{"type": "function_call", "id": id, "call_id": callID, "name": name, "arguments": args, "status": status}
}

func (rs *responsesShape) reasoningItem(id, text string) map[string]any {
	summary := []map[string]any{}
	if rs.summary {
		summary = append(summary, map[string]any{"type": "summary_text", "text": text})
	}
	return map[string]any{"type": "reasoning", "id": id, "summary": summary}
}

func (rs *responsesShape) blocking(h *respHeader, res []choiceResult, u usage) any {
	reasoning, content, calls := splitOutput(res[0].text.String(), rs.reasoning, rs.startInside, rs.family)
	status := statusOf(res[0].finish)
	var out []map[string]any
	if reasoning != "" {
		rs.thinking.WriteString(reasoning)
		out = append(out, rs.reasoningItem(newID("rs_"), reasoning))
	}
	if content != "" || len(calls) == 0 {
		out = append(out, messageItem(newID("msg_"), status, content))
	}
	for _, c := range calls {
		out = append(out, callItem(newID("fc_"), newID("call_"), c.Name, c.Arguments, "completed"))
	}
	return rs.response(h, status, out, &u)
}

// event numbers and returns one stream event.
func (rs *responsesShape) event(typ string, fields map[string]any) map[string]any {
	fields["type"], fields["sequence_number"] = typ, rs.seq
	rs.seq++
	return fields
}

func (rs *responsesShape) begin(h *respHeader, _ int) any {
	rs.rs, rs.ps = tools.NewReasoner(rs.startInside), tools.NewParser(rs.family)
	return events{
		rs.event("response.created", map[string]any{"response": rs.response(h, "in_progress", nil, nil)}),
		rs.event("response.in_progress", map[string]any{"response": rs.response(h, "in_progress", nil, nil)}),
	}
}

func (rs *responsesShape) delta(h *respHeader, _ int, d choiceDelta) []any {
	reasoning, content := "", d.text
	if rs.reasoning {
		reasoning, content = rs.rs.Add(d.text)
	}
	parts := []tools.Delta{{Content: content}}
	if rs.family != tools.None {
		parts = rs.ps.Add(content)
	}
	return rs.pieces(reasoning, parts)
}

func (rs *responsesShape) finish(h *respHeader, _ int, reason string) []any {
	reasoning, content := "", ""
	if rs.reasoning {
		reasoning, content = rs.rs.Flush()
	}
	parts := []tools.Delta{{Content: content}}
	if rs.family != tools.None {
		parts = append(rs.ps.Add(content), rs.ps.Flush()...)
	}
	rs.ended = runtime.FinishReason(reason)
	out := rs.pieces(reasoning, parts)
	out = append(out, rs.close()...)
	if len(rs.out) == 0 { // nothing at all: an empty message, as a response always has output
		out = append(out, rs.openMessage()...)
		out = append(out, rs.close()...)
	}
	return out
}

func (rs *responsesShape) usage(h *respHeader, u usage) any {
	return rs.event("response.completed", map[string]any{"response": rs.response(h, statusOf(rs.ended), rs.out, &u)})
}

// pieces turns reasoning text and parsed parts into events, opening and
// closing output items as the kind of text changes.
func (rs *responsesShape) pieces(reasoning string, parts []tools.Delta) []any {
	var out []any
	if reasoning != "" {
		rs.thinking.WriteString(reasoning)
		if rs.open == nil || rs.open["type"] != "reasoning" {
			out = append(out, rs.close()...)
			out = append(out, rs.openReasoning()...)
		}
		rs.text.WriteString(reasoning)
		if rs.summary {
			out = append(out, rs.event("response.reasoning_summary_text.delta", map[string]any{"item_id": rs.open["id"],
				"output_index": len(rs.out), "summary_index": 0, "delta": reasoning}))
		}
	}
	for _, p := range parts {
		switch {
		case p.Name != "":
			out = append(out, rs.close()...)
			item := callItem(newID("fc_"), newID("call_"), p.Name, "", "in_progress")
			rs.open = item
			out = append(out, rs.event("response.output_item.added", map[string]any{"output_index": len(rs.out), "item": clone(item)}))
		case p.Args != "":
			rs.text.WriteString(p.Args)
			out = append(out, rs.event("response.function_call_arguments.delta", map[string]any{"item_id": rs.open["id"],
				"output_index": len(rs.out), "delta": p.Args}))
		case p.Content != "":
			if rs.open == nil || rs.open["type"] != "message" {
				out = append(out, rs.close()...)
				out = append(out, rs.openMessage()...)
			}
			rs.text.WriteString(p.Content)
			out = append(out, rs.event("response.output_text.delta", map[string]any{"item_id": rs.open["id"],
				"output_index": len(rs.out), "content_index": 0, "delta": p.Content, "logprobs": []any{}}))
		}
	}
	return out
}

func (rs *responsesShape) openReasoning() []any {
	item := rs.reasoningItem(newID("rs_"), "")
	item["summary"] = []map[string]any{}
	rs.open = item
	out := []any{rs.event("response.output_item.added", map[string]any{"output_index": len(rs.out), "item": clone(item)})}
	if rs.summary {
		out = append(out, rs.event("response.reasoning_summary_part.added", map[string]any{"item_id": item["id"],
			"output_index": len(rs.out), "summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}}))
	}
	return out
}

func (rs *responsesShape) openMessage() []any {
	item := map[string]any{"type": "message", "id": newID("msg_"), "status": "in_progress", "role": "assistant", "content": []any{}}
	rs.open = item
	return []any{
		rs.event("response.output_item.added", map[string]any{"output_index": len(rs.out), "item": clone(item)}),
		rs.event("response.content_part.added", map[string]any{"item_id": item["id"], "output_index": len(rs.out),
			"content_index": 0, "part": outputText("")}),
	}
}

// close ends the open item: its done events, and the item joins the output.
func (rs *responsesShape) close() []any {
	item := rs.open
	if item == nil {
		return nil
	}
	rs.open = nil
	text := rs.text.String()
	rs.text.Reset()
	idx := len(rs.out)
	status := statusOf(rs.ended)
	var out []any
	switch item["type"] {
	case "message":
		part := outputText(text)
		out = append(out,
			rs.event("response.output_text.done", map[string]any{"item_id": item["id"], "output_index": idx, "content_index": 0, "text": text, "logprobs": []any{}}),
			rs.event("response.content_part.done", map[string]any{"item_id": item["id"], "output_index": idx, "content_index": 0, "part": part}))
		item = messageItem(item["id"].(string), status, text)
	case "function_call":
		out = append(out, rs.event("response.function_call_arguments.done", map[string]any{"item_id": item["id"],
			"output_index": idx, "name": item["name"], "arguments": text}))
		item = callItem(item["id"].(string), item["call_id"].(string), item["name"].(string), text, "completed")
	case "reasoning":
		if rs.summary {
			out = append(out,
				rs.event("response.reasoning_summary_text.done", map[string]any{"item_id": item["id"], "output_index": idx, "summary_index": 0, "text": text}),
				rs.event("response.reasoning_summary_part.done", map[string]any{"item_id": item["id"], "output_index": idx, "summary_index": 0,
					"part": map[string]any{"type": "summary_text", "text": text}}))
		}
		item = rs.reasoningItem(item["id"].(string), text)
	}
	rs.out = append(rs.out, item)
	return append(out, rs.event("response.output_item.done", map[string]any{"output_index": idx, "item": item}))
}

func clone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// newStream: the Responses API's named server-sent events.
func (rs *responsesShape) newStream(w http.ResponseWriter) eventStream {
	return &namedSSE{sseWriter: newSSE(w), shape: rs}
}

// namedSSE writes each event as "event: TYPE" and "data: JSON", with no
// [DONE] at the end; an error is an "error" event.
type namedSSE struct {
	*sseWriter
	shape *responsesShape
}

func (n *namedSSE) send(v any) {
	switch x := v.(type) {
	case events:
		for _, e := range x {
			n.send(e)
		}
		return
	case map[string]any:
		b, err := json.Marshal(x)
		if err != nil {
			panic("BUG: stream event does not marshal: " + err.Error())
		}
		if n.err != nil {
			return
		}
		typ, _ := x["type"].(string)
		if _, err := n.w.Write([]byte("event: " + typ + "\ndata: " + string(b) + "\n\n")); err != nil {
			n.err = err
			return
		}
		n.flush()
		return
	}
	panic("BUG: a Responses stream event is not an object")
}

func (n *namedSSE) done() {}

func (n *namedSSE) fail(e *apiError) {
	n.send(n.shape.event("error", map[string]any{"code": nullable(e.Code), "message": e.Message, "param": nullable(e.Param)}))
}
