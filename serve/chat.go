package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/memra-ai/memra/serve/plugin"
	"github.com/memra-ai/memra/serve/tools"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	commonFields
	Messages            json.RawMessage `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	ReasoningEffort     *string         `json:"reasoning_effort"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
}

// chatMessageIn is what the server checks of each message; the template
// receives the message as the client sent it.
type chatMessageIn struct {
	Role      any             `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// Response shapes of chat completions.
type (
	chatCompletion struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		Usage   *usage       `json:"usage,omitempty"`
	}
	chatChoice struct {
		Index        int           `json:"index"`
		Message      chatMessage   `json:"message"`
		Logprobs     *chatLogprobs `json:"logprobs"`
		FinishReason string        `json:"finish_reason"`
	}
	chatMessage struct {
		Role             string     `json:"role"`
		Content          *string    `json:"content"` // null when the message is only tool calls
		ReasoningContent *string    `json:"reasoning_content,omitempty"`
		ToolCalls        []toolCall `json:"tool_calls,omitempty"`
	}
	chatLogprobs struct {
		Content []chatTokenLogprob `json:"content"`
	}
	chatTokenLogprob struct {
		Token       string         `json:"token"`
		Logprob     float64        `json:"logprob"`
		Bytes       []int          `json:"bytes"`
		TopLogprobs []chatTopToken `json:"top_logprobs"`
	}
	chatTopToken struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	chatChunk struct {
		ID      string            `json:"id"`
		Object  string            `json:"object"`
		Created int64             `json:"created"`
		Model   string            `json:"model"`
		Choices []chatChunkChoice `json:"choices"`
		Usage   *usage            `json:"usage,omitempty"`
	}
	chatChunkChoice struct {
		Index        int           `json:"index"`
		Delta        chatDelta     `json:"delta"`
		Logprobs     *chatLogprobs `json:"logprobs"`
		FinishReason *string       `json:"finish_reason"`
	}
	chatDelta struct {
		Role             string     `json:"role,omitempty"`
		Content          *string    `json:"content,omitempty"`
		ReasoningContent *string    `json:"reasoning_content,omitempty"`
		ToolCalls        []toolCall `json:"tool_calls,omitempty"`
	}
)

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	m, e := s.lookupModel(req.Model)
	if e != nil {
		writeError(w, e)
		return
	}
	c, e := s.prepareChat(m, &req)
	if e != nil {
		writeError(w, e)
		return
	}
	sh := &chatShape{family: c.plan.family, reasoning: c.plan.reasoning, startInside: c.startInside}
	s.generate(w, r, &c.p, [][]int32{c.prompt}, sh)
}

// preparedChat is a chat request ready to generate: its parameters, its
// tool and reasoning plan, and the rendered prompt's tokens.
type preparedChat struct {
	p           genParams
	plan        agentPlan
	prompt      []int32
	startInside bool // the prompt opened a <think> block
}

// prepareChat validates req for m, installs its constraints and renders
// its prompt: what /v1/chat/completions, /v1/responses and /api/chat share.
func (s *Server) prepareChat(m *Model, req *chatRequest) (*preparedChat, *apiError) {
	c := &preparedChat{}
	p := &c.p
	maxTok := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxTok = req.MaxCompletionTokens
	}
	if e := req.validate(m, maxTok, p); e != nil {
		return nil, e
	}
	if e := req.validateChat(p); e != nil {
		return nil, e
	}
	if e := s.structured(m, &req.commonFields, p); e != nil {
		return nil, e
	}
	plan, e := s.planAgent(m, req, p)
	if e != nil {
		return nil, e
	}
	prompt, text, e := s.renderChat(m, req, plan)
	if e != nil {
		return nil, e
	}
	if e := p.checkFits(len(prompt)); e != nil {
		return nil, e
	}
	c.plan, c.prompt = plan, prompt
	c.startInside = plan.reasoning && tools.PromptOpensThinking(text)
	return c, nil
}

// validateChat checks the chat-only fields.
func (req *chatRequest) validateChat(p *genParams) *apiError {
	if req.Logprobs != nil && *req.Logprobs {
		p.logprobs = true
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > maxTopLogprobs {
			return badRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *req.TopLogprobs)
		}
		if !p.logprobs && *req.TopLogprobs > 0 {
			return badRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		p.topLogprobs = *req.TopLogprobs
	}
	if len(req.Messages) == 0 || string(req.Messages) == "null" {
		return badRequest("messages", "messages is required and must be a non-empty array")
	}
	var msgs []chatMessageIn
	if err := json.Unmarshal(req.Messages, &msgs); err != nil {
		return badRequest("messages", "messages must be an array of message objects: %v", err)
	}
	if len(msgs) == 0 {
		return badRequest("messages", "messages must not be empty")
	}
	for i, msg := range msgs {
		role, ok := msg.Role.(string)
		if !ok || !chatRoles[role] {
			return badRequest(fmt.Sprintf("messages[%d].role", i),
				"messages[%d].role must be one of system, developer, user, assistant, tool; got %v", i, msg.Role)
		}
		if e := checkContent(msg.Content, i, role == "assistant" && len(msg.ToolCalls) > 0); e != nil {
			return e
		}
	}
	return nil
}

// checkContent accepts a string, or a list of text parts (null for an
// assistant message with tool calls).
func checkContent(raw json.RawMessage, i int, nullOK bool) *apiError {
	param := fmt.Sprintf("messages[%d].content", i)
	if len(raw) == 0 || string(raw) == "null" {
		if nullOK {
			return nil
		}
		return badRequest(param, "%s is required", param)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return badRequest(param, "%s must be a string or an array of content parts", param)
	}
	for j, part := range parts {
		if part.Type != "text" {
			return badRequest(param, "%s[%d] has type %q; only \"text\" parts are supported", param, j, part.Type)
		}
		if part.Text == nil {
			return badRequest(param, "%s[%d].text is required", param, j)
		}
	}
	return nil
}

// renderChat applies the model's template and tokenizes the result, parsing
// control tokens and adding BOS only if the text does not start with it.
// It returns the token ids and the rendered text.
func (s *Server) renderChat(m *Model, req *chatRequest, plan agentPlan) ([]int32, string, *apiError) {
	if m.Template == nil {
		return nil, "", badRequest("model", "model %q has no chat template; use /v1/completions", m.ID)
	}
	tok := m.Engine.Tokenizer()
	bos, eos := tok.TokenText(tok.BOS()), tok.TokenText(tok.EOS())
	msgs, e := templateMessages(req.Messages)
	if e != nil {
		return nil, "", e
	}
	var ctx bytes.Buffer
	ctx.WriteString(`{"messages":`)
	ctx.Write(msgs)
	if plan.renderTools && len(req.Tools) > 0 && string(req.Tools) != "null" {
		ctx.WriteString(`,"tools":`)
		ctx.Write(req.Tools)
	}
	ctx.WriteString(`,"add_generation_prompt":true,"bos_token":`)
	writeJSONString(&ctx, bos)
	ctx.WriteString(`,"eos_token":`)
	writeJSONString(&ctx, eos)
	if plan.enableThinking != nil {
		fmt.Fprintf(&ctx, `,"enable_thinking":%t`, *plan.enableThinking)
	}
	if e := appendKwargs(&ctx, req.ChatTemplateKwargs); e != nil {
		return nil, "", e
	}
	ctx.WriteByte('}')
	text, err := m.Template.Render(ctx.Bytes())
	if err != nil {
		if pluginFailed(err) {
			return nil, "", s.pluginFailure("the chat template plugin failed", "", err, "model", m.ID)
		}
		return nil, "", badRequest("messages", "the chat template failed on these messages: %v", err)
	}
	ids := tok.Encode(text, false, true)
	if tok.AddBOS() && (bos == "" || !strings.HasPrefix(text, bos)) {
		ids = append([]int32{tok.BOS()}, ids...)
	}
	if len(ids) == 0 {
		return nil, "", badRequest("messages", "the rendered prompt is empty")
	}
	return ids, text, nil
}

// pluginFailed tells a template plugin's own failure (a trap, a timeout, no
// free instance…), a 500, from a template refusing the messages, a 400.
func pluginFailed(err error) bool {
	for _, e := range []error{plugin.ErrPluginTrap, plugin.ErrPluginTimeout, plugin.ErrPluginMemory,
		plugin.ErrPluginOutput, plugin.ErrPluginBusy, plugin.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s)
	b.Write(q)
}

// appendKwargs adds the members of chat_template_kwargs, in order.
func appendKwargs(b *bytes.Buffer, raw json.RawMessage) *apiError {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return badRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return badRequest("chat_template_kwargs", "chat_template_kwargs: %v", err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return badRequest("chat_template_kwargs", "chat_template_kwargs: %v", err)
		}
		b.WriteByte(',')
		writeJSONString(b, k.(string))
		b.WriteByte(':')
		b.Write(v)
	}
	return nil
}

func (h *respHeader) chatChunk(choices ...chatChunkChoice) chatChunk {
	return chatChunk{ID: h.id, Object: "chat.completion.chunk", Created: h.created, Model: h.model, Choices: choices}
}

func chatLP(toks []tokenInfo) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, t := range toks {
		e := chatTokenLogprob{Token: string(t.Bytes), Logprob: finiteLogprob(t.Logprob), Bytes: bytesOf(t.Bytes),
			TopLogprobs: []chatTopToken{}}
		for _, a := range t.Top {
			e.TopLogprobs = append(e.TopLogprobs, chatTopToken{Token: string(a.Bytes),
				Logprob: finiteLogprob(a.Logprob), Bytes: bytesOf(a.Bytes)})
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}

// requestContext joins the client's context with the server's force-cancel.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// unixNow is the created timestamp of responses.
func unixNow() int64 { return time.Now().Unix() }
