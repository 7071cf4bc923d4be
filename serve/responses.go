package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The Responses API (POST /v1/responses), stateless: a request carries
// the whole conversation as input items, which become chat messages
// rendered by the model's chat template, so everything /v1/chat/completions
// does (tools, tool_choice, structured output, reasoning) works the same.
// What needs a stored response (previous_response_id, store: true,
// conversation, background, item_reference) is refused with a 400.

// responsesRequest is the body of POST /v1/responses.
type responsesRequest struct {
	Model              string              `json:"model"`
	Input              json.RawMessage     `json:"input"`
	Instructions       *string             `json:"instructions"`
	Tools              json.RawMessage     `json:"tools"`
	ToolChoice         json.RawMessage     `json:"tool_choice"`
	ParallelToolCalls  *bool               `json:"parallel_tool_calls"`
	Text               *responsesText      `json:"text"`
	Reasoning          *responsesReasoning `json:"reasoning"`
	MaxOutputTokens    *int                `json:"max_output_tokens"`
	Temperature        *float64            `json:"temperature"`
	TopP               *float64            `json:"top_p"`
	TopK               *int                `json:"top_k"`
	MinP               *float64            `json:"min_p"`
	Seed               *int64              `json:"seed"`
	Stream             *bool               `json:"stream"`
	Store              *bool               `json:"store"`
	PreviousResponseID *string             `json:"previous_response_id"`
	Conversation       json.RawMessage     `json:"conversation"`
	Background         *bool               `json:"background"`
	Metadata           json.RawMessage     `json:"metadata"`
	CacheSalt          *string             `json:"cache_salt"`
}

type responsesText struct {
	Format json.RawMessage `json:"format"`
}

type responsesReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// responsesFormat is text.format.
type responsesFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

// responsesTool is one entry of tools: only function tools run here.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// inputItem is what the server reads of one input item.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if e := req.stateless(); e != nil {
		writeError(w, e)
		return
	}
	m, e := s.lookupModel(req.Model)
	if e != nil {
		writeError(w, e)
		return
	}
	chat, e := req.chatRequest()
	if e != nil {
		writeError(w, e)
		return
	}
	c, e := s.prepareChat(m, chat)
	if e != nil {
		writeError(w, responsesParam(e))
		return
	}
	c.p.includeUsage = c.p.stream // the last event, response.completed, carries the usage
	sh := newResponsesShape(&req, c, m)
	s.generate(w, r, &c.p, [][]int32{c.prompt}, sh)
}

// stateless refuses what needs a stored response.
func (req *responsesRequest) stateless() *apiError {
	const why = "this server keeps no responses (it is stateless): send the whole conversation as input"
	switch {
	case req.PreviousResponseID != nil && *req.PreviousResponseID != "":
		return badRequest("previous_response_id", "previous_response_id is not supported: %s", why)
	case req.Store != nil && *req.Store:
		return badRequest("store", "store: true is not supported: %s, and leave store out or false", why)
	case len(req.Conversation) > 0 && string(req.Conversation) != "null":
		return badRequest("conversation", "conversation is not supported: %s", why)
	case req.Background != nil && *req.Background:
		return badRequest("background", "background responses are not supported: %s", why)
	}
	return nil
}

// chatRequest turns the request into the chat completion it asks for.
func (req *responsesRequest) chatRequest() (*chatRequest, *apiError) {
	c := &chatRequest{}
	c.Model, c.Temperature, c.TopP, c.TopK, c.MinP, c.Seed = req.Model, req.Temperature, req.TopP, req.TopK, req.MinP, req.Seed
	c.Stream, c.CacheSalt, c.MaxCompletionTokens, c.ParallelToolCalls = req.Stream, req.CacheSalt, req.MaxOutputTokens, req.ParallelToolCalls
	msgs, e := inputMessages(req.Input, req.Instructions)
	if e != nil {
		return nil, e
	}
	c.Messages = msgs
	if c.Tools, e = chatTools(req.Tools); e != nil {
		return nil, e
	}
	if c.ToolChoice, e = chatToolChoice(req.ToolChoice); e != nil {
		return nil, e
	}
	if req.Text != nil {
		if c.ResponseFormat, e = chatResponseFormat(req.Text.Format); e != nil {
			return nil, e
		}
	}
	if req.Reasoning != nil {
		c.ReasoningEffort = req.Reasoning.Effort
		if sm := req.Reasoning.Summary; sm != nil && *sm != "auto" && *sm != "concise" && *sm != "detailed" {
			return nil, badRequest("reasoning.summary", "reasoning.summary must be auto, concise or detailed, got %q", *sm)
		}
	}
	return c, nil
}

// inputMessages turns instructions and input (a string, or a list of
// message, function_call, function_call_output and reasoning items) into
// chat messages.
func inputMessages(raw json.RawMessage, instructions *string) (json.RawMessage, *apiError) {
	var msgs []chatMsgOut
	if instructions != nil && *instructions != "" {
		msgs = append(msgs, chatMsgOut{Role: "system", Content: instructions})
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "input is required")
	}
	var text string
	var items []json.RawMessage
	switch {
	case json.Unmarshal(raw, &text) == nil:
		msgs = append(msgs, chatMsgOut{Role: "user", Content: &text})
	case json.Unmarshal(raw, &items) == nil:
		for i, it := range items {
			var e *apiError
			if msgs, e = addItem(msgs, it, i); e != nil {
				return nil, e
			}
		}
	default:
		return nil, badRequest("input", "input must be a string or an array of input items")
	}
	if len(msgs) == 0 {
		return nil, badRequest("input", "input has no messages")
	}
	out, err := json.Marshal(msgs)
	if err != nil {
		return nil, badRequest("input", "input: %v", err)
	}
	return out, nil
}

// chatMsgOut is a chat message made of input items, its keys in the
// order chat clients send them (templates may print them).
type chatMsgOut struct {
	Role       string        `json:"role"`
	Content    *string       `json:"content"` // null: an assistant message of calls only
	ToolCalls  []chatCallOut `json:"tool_calls,omitempty"`
	ToolCallID string        `json:"tool_call_id,omitempty"`
}

type chatCallOut struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

// chatToolOut is a chat tool made of a function tool.
type chatToolOut struct {
	Type     string    `json:"type"`
	Function chatFnOut `json:"function"`
}

type chatFnOut struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// addItem appends the chat form of input item i to msgs.
func addItem(msgs []chatMsgOut, raw json.RawMessage, i int) ([]chatMsgOut, *apiError) {
	param := fmt.Sprintf("input[%d]", i)
	var it inputItem
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, badRequest(param, "%s must be an input item object: %v", param, err)
	}
	switch it.Type {
	case "", "message":
		switch it.Role {
		case "user", "system", "developer", "assistant":
		default:
			return nil, badRequest(param+".role", "%s.role must be user, system, developer or assistant, got %q", param, it.Role)
		}
		text, e := itemText(it.Content, param+".content")
		if e != nil {
			return nil, e
		}
		return append(msgs, chatMsgOut{Role: it.Role, Content: &text}), nil
	case "function_call":
		if it.Name == "" || it.CallID == "" {
			return nil, badRequest(param, "%s: a function_call item needs call_id and name", param)
		}
		call := chatCallOut{ID: it.CallID, Type: "function", Function: toolFunction{Name: it.Name, Arguments: it.Arguments}}
		if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
			msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call) // parallel calls, or text then calls: one assistant message
			return msgs, nil
		}
		return append(msgs, chatMsgOut{Role: "assistant", ToolCalls: []chatCallOut{call}}), nil
	case "function_call_output":
		if it.CallID == "" {
			return nil, badRequest(param, "%s: a function_call_output item needs call_id", param)
		}
		out, e := itemText(it.Output, param+".output")
		if e != nil {
			return nil, e
		}
		return append(msgs, chatMsgOut{Role: "tool", Content: &out, ToolCallID: it.CallID}), nil
	case "reasoning":
		return msgs, nil // the model's own reasoning of an earlier turn: templates drop it
	case "item_reference":
		return nil, badRequest(param, "%s: item_reference needs stored items; this server is stateless", param)
	}
	return nil, badRequest(param+".type", "%s.type %q is not supported (message, function_call, function_call_output, reasoning)", param, it.Type)
}

// itemText reads content that is a string or a list of text parts
// (input_text, output_text, text).
func itemText(raw json.RawMessage, param string) (string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text", "summary_text":
		default:
			return "", badRequest(param, "%s[%d] has type %q; only text parts are supported", param, j, p.Type)
		}
		if p.Text == nil {
			return "", badRequest(param, "%s[%d].text is required", param, j)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// chatTools turns function tools ({type, name, description, parameters})
// into chat tools.
func chatTools(raw json.RawMessage) (json.RawMessage, *apiError) {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var ts []responsesTool
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil, badRequest("tools", "tools must be an array of tool objects: %v", err)
	}
	var out []chatToolOut
	for i, t := range ts {
		if t.Type != "function" {
			return nil, badRequest("tools", "tools[%d] has type %q; only function tools are supported", i, t.Type)
		}
		if t.Name == "" {
			return nil, badRequest("tools", "tools[%d] needs a name", i)
		}
		out = append(out, chatToolOut{Type: "function", Function: chatFnOut{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	b, _ := json.Marshal(out)
	return b, nil
}

// chatToolChoice turns {"type":"function","name":…} into the chat form;
// the words pass as they are.
func chatToolChoice(raw json.RawMessage) (json.RawMessage, *apiError) {
	if len(bytes.TrimSpace(raw)) == 0 || raw[0] == '"' || string(raw) == "null" {
		return raw, nil
	}
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Type != "function" || obj.Name == "" {
		return nil, badRequest("tool_choice", `tool_choice must be auto, none, required or {"type":"function","name":…}`)
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": obj.Name}})
	return b, nil
}

// chatResponseFormat turns text.format into response_format.
func chatResponseFormat(raw json.RawMessage) (json.RawMessage, *apiError) {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f responsesFormat
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, badRequest("text.format", "text.format must be an object with a type")
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`{"type":"json_object"}`), nil
	case "json_schema":
		if len(f.Schema) == 0 {
			return nil, badRequest("text.format", "text.format of type json_schema needs a schema")
		}
		js := map[string]any{"name": f.Name, "schema": f.Schema}
		if f.Strict != nil {
			js["strict"] = *f.Strict
		}
		b, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": js})
		return b, nil
	}
	return nil, badRequest("text.format", "text.format type %q is not one of text, json_object, json_schema", f.Type)
}

// responsesParam renames the chat fields an error names to the Responses
// API's.
func responsesParam(e *apiError) *apiError {
	for _, r := range []struct{ chat, resp string }{
		{"messages", "input"}, {"max_completion_tokens", "max_output_tokens"}, {"max_tokens", "max_output_tokens"},
		{"response_format", "text.format"}, {"reasoning_effort", "reasoning.effort"},
	} {
		if rest, ok := strings.CutPrefix(e.Param, r.chat); ok {
			c := *e
			c.Param = r.resp + rest
			c.Message = strings.ReplaceAll(c.Message, r.chat, r.resp)
			return &c
		}
	}
	return e
}
