package serve

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/grammar"
	"github.com/memra-ai/memra/serve/tools"
)

// agentPlan is how one chat request treats tools and reasoning.
type agentPlan struct {
	renderTools    bool         // pass tools to the template (false for tool_choice none)
	family         tools.Family // tool-call syntax parsed from the output; None: no parsing
	reasoning      bool         // split <think> blocks into reasoning_content
	enableThinking *bool        // enable_thinking for the template, from reasoning_effort
}

// Wire shapes of tool calls: message.tool_calls entries and their deltas.
type (
	toolCall struct {
		Index    *int         `json:"index,omitempty"` // deltas only
		ID       string       `json:"id,omitempty"`
		Type     string       `json:"type,omitempty"`
		Function toolFunction `json:"function"`
	}
	toolFunction struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
)

var reasoningEfforts = map[string]bool{"none": false, "minimal": false, "low": true, "medium": true, "high": true}

// templateSource is the source of m's template, when it tells.
func templateSource(m *Model) string {
	if src, ok := m.Template.(interface{ Source() string }); ok {
		return src.Source()
	}
	return ""
}

// planAgent reads tools, tool_choice and reasoning_effort; with
// tool_choice required or a named function it installs the constraint
// that makes the model write one well-formed call.
func (s *Server) planAgent(m *Model, req *chatRequest, p *genParams) (agentPlan, *apiError) {
	src := templateSource(m)
	plan := agentPlan{renderTools: true}
	plan.reasoning = strings.Contains(src, "<think>") || strings.Contains(src, "enable_thinking") ||
		strings.Contains(src, "reasoning_content")
	if req.ReasoningEffort != nil {
		on, ok := reasoningEfforts[*req.ReasoningEffort]
		if !ok {
			return plan, badRequest("reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high; got %q",
				*req.ReasoningEffort)
		}
		if strings.Contains(src, "enable_thinking") {
			plan.enableThinking = &on
		}
	}
	list, err := tools.ParseTools(req.Tools)
	if err == nil {
		err = tools.CheckSchemas(list)
	}
	if err != nil {
		return plan, badRequest("tools", "%v", err)
	}
	choice, err := tools.ParseChoice(req.ToolChoice)
	if err != nil {
		return plan, badRequest("tool_choice", "%v", err)
	}
	if choice.Mode == "none" || len(list) == 0 {
		plan.renderTools = choice.Mode != "none"
		if choice.Mode == "required" || choice.Mode == "function" {
			return plan, badRequest("tool_choice", "tool_choice %s needs tools", choice.Mode)
		}
		return plan, nil
	}
	if choice.Mode == "function" && !hasTool(list, choice.Name) {
		return plan, badRequest("tool_choice", "tool_choice names function %q, which is not in tools", choice.Name)
	}
	plan.family = tools.Detect(src)
	if choice.Mode == "auto" {
		return plan, nil
	}
	if p.newMask != nil {
		return plan, badRequest("tool_choice", "tool_choice %s cannot be combined with response_format or grammar", choice.Mode)
	}
	if plan.family == tools.None {
		return plan, badRequest("tool_choice", "model %q's chat template has no known tool-call syntax, "+
			"so tool_choice %s cannot be enforced", m.ID, choice.Mode)
	}
	phases, err := tools.CallGrammars(plan.family, list, choice.Name)
	if err != nil {
		return plan, grammarError("tools", err)
	}
	mv := s.cons.vocabulary(m)
	if mv == nil {
		return plan, noVocab("tool_choice", m)
	}
	if len(phases) == 1 {
		p.newMask = func() (runtime.Mask, error) { return grammar.NewSamplerMask(phases[0], mv.vocab), nil }
	} else {
		p.newMask = func() (runtime.Mask, error) { return tools.NewChainMask(mv.vocab, mv.eog, phases...), nil }
	}
	return plan, nil
}

func hasTool(list []tools.Tool, name string) bool {
	for _, t := range list {
		if t.Function.Name == name {
			return true
		}
	}
	return false
}

// templateMessages returns the messages as the template should see them:
// in an assistant message with tool calls, a null content becomes ""
// (templates test it with "in" and "is string"), and the arguments, which
// OpenAI clients send as a JSON string, become the object they hold
// (templates render them with tojson). Other fields pass unchanged.
func templateMessages(raw json.RawMessage) (json.RawMessage, *apiError) {
	if !bytes.Contains(raw, []byte(`"tool_calls"`)) {
		return raw, nil
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return raw, nil // validateChat accepted it; leave it as sent
	}
	for _, msg := range msgs {
		tc, ok := msg["tool_calls"]
		if c := bytes.TrimSpace(msg["content"]); ok && (len(c) == 0 || string(c) == "null") {
			msg["content"] = json.RawMessage(`""`)
		}
		if !ok {
			continue
		}
		var calls []map[string]json.RawMessage
		if json.Unmarshal(tc, &calls) != nil {
			continue
		}
		for _, c := range calls {
			var fn map[string]json.RawMessage
			if json.Unmarshal(c["function"], &fn) != nil || fn == nil {
				continue
			}
			var args string
			if json.Unmarshal(fn["arguments"], &args) != nil {
				continue
			}
			trimmed := strings.TrimSpace(args)
			if strings.HasPrefix(trimmed, "{") && json.Valid([]byte(trimmed)) {
				fn["arguments"] = json.RawMessage(trimmed)
				c["function"], _ = json.Marshal(fn)
			}
		}
		msg["tool_calls"], _ = json.Marshal(calls)
	}
	out, err := json.Marshal(msgs)
	if err != nil {
		return nil, badRequest("messages", "messages: %v", err)
	}
	return out, nil
}

// chatShape writes chat.completion and chat.completion.chunk objects,
// splitting reasoning and tool calls out of the text when the plan says so.
type chatShape struct {
	family      tools.Family
	reasoning   bool
	startInside bool // the prompt opened a <think> block
	streams     map[int]*chatStream
}

// chatStream is the parsing state of one streamed choice.
type chatStream struct {
	r     *tools.Reasoner
	p     *tools.Parser
	calls int
}

func (*chatShape) idPrefix() string { return "chatcmpl-" }

// plain reports whether text passes through untouched.
func (c *chatShape) plain() bool { return c.family == tools.None && !c.reasoning }

func (c *chatShape) blocking(h *respHeader, res []choiceResult, u usage) any {
	out := chatCompletion{ID: h.id, Object: "chat.completion", Created: h.created, Model: h.model, Usage: &u}
	for i := range res {
		text := res[i].text.String()
		msg := chatMessage{Role: "assistant", Content: &text}
		finish := string(res[i].finish)
		if !c.plain() {
			reasoning, content, calls := splitOutput(text, c.reasoning, c.startInside, c.family)
			msg.Content = &content
			if reasoning != "" {
				msg.ReasoningContent = &reasoning
			}
			for _, call := range calls {
				msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: newID("call_"), Type: "function",
					Function: toolFunction{Name: call.Name, Arguments: call.Arguments}})
			}
			if len(calls) > 0 {
				if content == "" {
					msg.Content = nil
				}
				if finish == string(runtime.FinishStop) {
					finish = "tool_calls"
				}
			}
		}
		ch := chatChoice{Index: i, Message: msg, FinishReason: finish}
		if h.logprobs {
			ch.Logprobs = chatLP(res[i].tokens)
		}
		out.Choices = append(out.Choices, ch)
	}
	return out
}

func (c *chatShape) begin(h *respHeader, index int) any {
	if c.streams == nil {
		c.streams = map[int]*chatStream{}
	}
	c.streams[index] = &chatStream{r: tools.NewReasoner(c.startInside), p: tools.NewParser(c.family)}
	empty := ""
	return h.chatChunk(chatChunkChoice{Index: index, Delta: chatDelta{Role: "assistant", Content: &empty}})
}

func (c *chatShape) delta(h *respHeader, index int, d choiceDelta) []any {
	if c.plain() {
		ch := chatChunkChoice{Index: index, Delta: chatDelta{Content: &d.text}}
		if h.logprobs {
			ch.Logprobs = chatLP(d.tokens)
		}
		return []any{h.chatChunk(ch)}
	}
	st := c.streams[index]
	reasoning, content := "", d.text
	if c.reasoning {
		reasoning, content = st.r.Add(d.text)
	}
	out := c.pieces(h, index, st, reasoning, st.p.Add(content))
	if h.logprobs && len(d.tokens) > 0 {
		if len(out) == 0 {
			empty := ""
			out = []chatChunkChoice{{Index: index, Delta: chatDelta{Content: &empty}}}
		}
		out[0].Logprobs = chatLP(d.tokens)
	}
	return c.chunks(h, out)
}

func (c *chatShape) finish(h *respHeader, index int, reason string) []any {
	var out []chatChunkChoice
	if !c.plain() {
		st := c.streams[index]
		reasoning, content := "", ""
		if c.reasoning {
			reasoning, content = st.r.Flush()
		}
		parts := append(st.p.Add(content), st.p.Flush()...)
		out = c.pieces(h, index, st, reasoning, parts)
		if st.calls > 0 && reason == string(runtime.FinishStop) {
			reason = "tool_calls"
		}
	}
	out = append(out, chatChunkChoice{Index: index, FinishReason: &reason})
	return c.chunks(h, out)
}

// pieces turns reasoning text and parsed parts into chunk choices: one for
// the reasoning, one per run of content, and per call, as OpenAI streams
// them, a header (index, id, type, name, empty arguments) as soon as the
// call is certain, then its arguments fragment by fragment.
func (c *chatShape) pieces(h *respHeader, index int, st *chatStream, reasoning string, parts []tools.Delta) []chatChunkChoice {
	var out []chatChunkChoice
	if reasoning != "" {
		out = append(out, chatChunkChoice{Index: index, Delta: chatDelta{ReasoningContent: &reasoning}})
	}
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			s := text.String()
			out = append(out, chatChunkChoice{Index: index, Delta: chatDelta{Content: &s}})
			text.Reset()
		}
	}
	for _, part := range parts {
		switch {
		case part.Name != "":
			flush()
			i := st.calls
			st.calls++
			out = append(out, chatChunkChoice{Index: index, Delta: chatDelta{ToolCalls: []toolCall{{Index: &i,
				ID: newID("call_"), Type: "function", Function: toolFunction{Name: part.Name}}}}})
		case part.Args != "":
			flush()
			i := st.calls - 1
			out = append(out, chatChunkChoice{Index: index, Delta: chatDelta{ToolCalls: []toolCall{{Index: &i,
				Function: toolFunction{Arguments: part.Args}}}}})
		default:
			text.WriteString(part.Content)
		}
	}
	flush()
	return out
}

func (c *chatShape) chunks(h *respHeader, choices []chatChunkChoice) []any {
	out := make([]any, len(choices))
	for i, ch := range choices {
		out[i] = h.chatChunk(ch)
	}
	return out
}

func (*chatShape) usage(h *respHeader, u usage) any {
	c := h.chatChunk()
	c.Choices = []chatChunkChoice{}
	c.Usage = &u
	return c
}

// splitOutput splits a finished text into its reasoning (where the
// template reasons; startInside: the prompt opened the block), its content
// and the tool calls of family in it (none for tools.None): the blocking
// responses of every API shape.
func splitOutput(text string, reasoning, startInside bool, family tools.Family) (thinking, content string, calls []tools.Call) {
	content = text
	if reasoning {
		thinking, content = tools.SplitReasoning(text, startInside)
	}
	if family != tools.None {
		content, calls = tools.Parse(family, content)
	}
	return thinking, content, calls
}
