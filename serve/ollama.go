package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/memra-ai/memra/serve/tools"
)

// The Ollama API (/api/chat, /api/generate, /api/tags, /api/show,
// /api/embed, /api/embeddings, /api/version): Ollama's field names and
// defaults, mapped onto the same request path as the OpenAI routes (chat
// template, tools, structured output, reasoning, admission, auth,
// metrics), so a client written for Ollama works unchanged.

// Ollama's documented sampling defaults, applied where a request's options
// leave a field out.
const (
	ollamaTemperature   = 0.8
	ollamaTopK          = 40
	ollamaTopP          = 0.9
	ollamaRepeatPenalty = 1.1
	ollamaRepeatLastN   = 64
)

// ollamaOptions are the options Ollama requests carry. The runner's own
// settings (num_ctx, num_batch, num_gpu, num_thread, use_mmap, …) and the
// samplers memra does not have (mirostat, typical_p, tfs_z) are accepted
// and ignored.
type ollamaOptions struct {
	Temperature      *float64        `json:"temperature"`
	TopK             *int            `json:"top_k"`
	TopP             *float64        `json:"top_p"`
	MinP             *float64        `json:"min_p"`
	Seed             *int64          `json:"seed"`
	NumPredict       *int            `json:"num_predict"`
	Stop             json.RawMessage `json:"stop"`
	RepeatPenalty    *float64        `json:"repeat_penalty"`
	RepeatLastN      *int            `json:"repeat_last_n"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
}

// ollamaChatRequest is the body of POST /api/chat.
type ollamaChatRequest struct {
	Model     string          `json:"model"`
	Messages  json.RawMessage `json:"messages"`
	Tools     json.RawMessage `json:"tools"`
	Format    json.RawMessage `json:"format"`
	Options   *ollamaOptions  `json:"options"`
	Stream    *bool           `json:"stream"`
	Think     json.RawMessage `json:"think"`
	KeepAlive json.RawMessage `json:"keep_alive"`
}

// ollamaGenerateRequest is the body of POST /api/generate.
type ollamaGenerateRequest struct {
	Model     string          `json:"model"`
	Prompt    string          `json:"prompt"`
	Suffix    string          `json:"suffix"`
	System    string          `json:"system"`
	Template  string          `json:"template"`
	Context   []int64         `json:"context"`
	Raw       bool            `json:"raw"`
	Format    json.RawMessage `json:"format"`
	Options   *ollamaOptions  `json:"options"`
	Stream    *bool           `json:"stream"`
	Think     json.RawMessage `json:"think"`
	Images    []string        `json:"images"`
	KeepAlive json.RawMessage `json:"keep_alive"`
}

// ollamaError is Ollama's error body.
type ollamaError struct {
	Error string `json:"error"`
}

// writeOllamaError sends e in Ollama's shape.
func writeOllamaError(w http.ResponseWriter, e *apiError) {
	writeShaped(w, &ollamaShape{}, e)
}

// lookupOllama finds a model by alias, also as Ollama names it
// ("alias:latest").
func (s *Server) lookupOllama(name string) (*Model, *apiError) {
	if m, ok := s.byID[name]; ok {
		return m, nil
	}
	if base, ok := strings.CutSuffix(name, ":latest"); ok {
		if m, ok := s.byID[base]; ok {
			return m, nil
		}
	}
	if name == "" {
		return nil, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "model", Message: "model is required"}
	}
	return nil, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model '%s' not found", name)}
}

// apply fills c's sampling fields from o and Ollama's defaults, and
// returns the penalty window (0: all of the history, -1: penalties off).
func (o *ollamaOptions) apply(c *commonFields) (window int, e *apiError) {
	if o == nil {
		o = &ollamaOptions{}
	}
	def := func(v *float64, d float64) *float64 {
		if v != nil {
			return v
		}
		return &d
	}
	c.Temperature, c.TopP = def(o.Temperature, ollamaTemperature), def(o.TopP, ollamaTopP)
	c.RepetitionPenalty = def(o.RepeatPenalty, ollamaRepeatPenalty)
	k := ollamaTopK
	if o.TopK != nil {
		k = *o.TopK
	}
	c.TopK, c.MinP, c.Seed = &k, o.MinP, o.Seed
	c.PresencePenalty, c.FrequencyPenalty = o.PresencePenalty, o.FrequencyPenalty
	if n := o.NumPredict; n != nil && *n > 0 {
		c.MaxTokens = n // -1 (no limit) and -2 (fill the context) generate until the end or the context
	}
	if len(o.Stop) > 0 {
		c.Stop = o.Stop
	}
	window = ollamaRepeatLastN
	if o.RepeatLastN != nil {
		switch n := *o.RepeatLastN; {
		case n == 0:
			window = -1
		case n == -1:
			window = 0 // num_ctx: the whole context
		case n < -1:
			return 0, badRequest("repeat_last_n", "repeat_last_n must be -1 (the context), 0 (off) or positive, got %d", n)
		default:
			window = n
		}
	}
	return window, nil
}

// setWindow installs the penalty window apply returned.
func (p *genParams) setWindow(window int) {
	if window < 0 {
		p.sampling.RepeatPenalty, p.sampling.PresencePenalty, p.sampling.FrequencyPenalty = 1, 0, 0
		return
	}
	p.sampling.PenaltyLastN = window
}

// ollamaFormat turns format ("json" or a JSON schema) into response_format.
func ollamaFormat(raw json.RawMessage) (json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `""` {
		return nil, nil
	}
	if string(raw) == `"json"` {
		return json.RawMessage(`{"type":"json_object"}`), nil
	}
	if raw[0] != '{' {
		return nil, badRequest("format", `format must be "json" or a JSON schema object`)
	}
	b, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "format", "schema": raw, "strict": true}})
	return b, nil
}

// ollamaThink maps think (true, false, or "low", "medium", "high") to a
// reasoning effort; nil leaves the template's default.
func ollamaThink(raw json.RawMessage) (*string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var on bool
	if json.Unmarshal(raw, &on) == nil {
		effort := "none"
		if on {
			effort = "medium"
		}
		return &effort, nil
	}
	var level string
	if json.Unmarshal(raw, &level) == nil && (level == "low" || level == "medium" || level == "high") {
		return &level, nil
	}
	return nil, badRequest("think", `think must be true, false, "low", "medium" or "high"`)
}

// streamOn reads Ollama's stream flag: on unless false.
func streamOn(b *bool) *bool {
	on := b == nil || *b
	return &on
}

// loadResponse answers Ollama's load and unload requests (no prompt, no
// messages): the model is always loaded here.
func loadResponse(w http.ResponseWriter, m *Model, chat bool, keepAlive json.RawMessage) {
	reason := "load"
	if k := string(bytes.TrimSpace(keepAlive)); k == "0" || k == `"0"` || k == `"0s"` {
		reason = "unload"
	}
	out := map[string]any{"model": m.ID, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "done": true, "done_reason": reason}
	if chat {
		out["message"] = map[string]any{"role": "assistant", "content": ""}
	} else {
		out["response"] = ""
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	var req ollamaChatRequest
	if e := decodeBody(r, &req); e != nil {
		writeOllamaError(w, e)
		return
	}
	m, e := s.lookupOllama(req.Model)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	if len(bytes.TrimSpace(req.Messages)) == 0 || string(req.Messages) == "null" || string(bytes.TrimSpace(req.Messages)) == "[]" {
		loadResponse(w, m, true, req.KeepAlive)
		return
	}
	msgs, e := ollamaMessages(req.Messages)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	chat := &chatRequest{Messages: msgs, Tools: req.Tools}
	chat.Model, chat.Stream = m.ID, streamOn(req.Stream)
	window, e := req.Options.apply(&chat.commonFields)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	if chat.ResponseFormat, e = ollamaFormat(req.Format); e != nil {
		writeOllamaError(w, e)
		return
	}
	if chat.ReasoningEffort, e = ollamaThink(req.Think); e != nil {
		writeOllamaError(w, e)
		return
	}
	c, e := s.prepareChat(m, chat)
	if e != nil {
		writeOllamaError(w, ollamaParam(e))
		return
	}
	c.p.setWindow(window)
	c.p.includeUsage = c.p.stream // the last line carries the counts
	sh := &ollamaShape{chat: true, model: m.ID, family: c.plan.family, reasoning: c.plan.reasoning, startInside: c.startInside, start: time.Now()}
	s.generate(w, r, &c.p, [][]int32{c.prompt}, sh)
}

// ollamaMessages checks Ollama's messages: text only (images are refused),
// tool calls with arguments as objects (which the template takes as they
// are). thinking and tool_name pass through.
func ollamaMessages(raw json.RawMessage) (json.RawMessage, *apiError) {
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badRequest("messages", "messages must be an array of message objects: %v", err)
	}
	for i, m := range msgs {
		if imgs := bytes.TrimSpace(m["images"]); len(imgs) > 0 && string(imgs) != "null" && string(imgs) != "[]" {
			return nil, badRequest("messages", "messages[%d] has images; this server runs text models only", i)
		}
	}
	return raw, nil
}

func (s *Server) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	var req ollamaGenerateRequest
	if e := decodeBody(r, &req); e != nil {
		writeOllamaError(w, e)
		return
	}
	m, e := s.lookupOllama(req.Model)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	switch {
	case len(req.Images) > 0:
		writeOllamaError(w, badRequest("images", "images are not supported; this server runs text models only"))
		return
	case req.Suffix != "":
		writeOllamaError(w, badRequest("suffix", "suffix (fill in the middle) is not supported"))
		return
	case req.Template != "":
		writeOllamaError(w, badRequest("template", "template is not supported: the model's own chat template is used (or raw: true for none)"))
		return
	case req.Prompt == "" && len(req.Context) == 0:
		loadResponse(w, m, false, req.KeepAlive)
		return
	}
	var common commonFields
	common.Model, common.Stream = m.ID, streamOn(req.Stream)
	window, e := req.Options.apply(&common)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	if common.ResponseFormat, e = ollamaFormat(req.Format); e != nil {
		writeOllamaError(w, e)
		return
	}
	effort, e := ollamaThink(req.Think)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	sh := &ollamaShape{model: m.ID, start: time.Now()}
	var p *genParams
	var prompt []int32
	if req.Raw || m.Template == nil {
		if p, prompt, e = s.rawGeneration(m, &common, req.Prompt); e != nil {
			writeOllamaError(w, ollamaParam(e))
			return
		}
	} else {
		var msgs []chatMsgOut
		if req.System != "" {
			msgs = append(msgs, chatMsgOut{Role: "system", Content: &req.System})
		}
		msgs = append(msgs, chatMsgOut{Role: "user", Content: &req.Prompt})
		raw, _ := json.Marshal(msgs)
		chat := &chatRequest{commonFields: common, Messages: raw, ReasoningEffort: effort}
		c, e := s.prepareChat(m, chat)
		if e != nil {
			writeOllamaError(w, ollamaParam(e))
			return
		}
		p, prompt = &c.p, c.prompt
		sh.reasoning, sh.startInside = c.plan.reasoning, c.startInside
	}
	if len(req.Context) > 0 {
		ctx, e := contextTokens(req.Context, m)
		if e != nil {
			writeOllamaError(w, e)
			return
		}
		prompt = append(ctx, prompt...)
		if e := p.checkFits(len(prompt)); e != nil {
			writeOllamaError(w, e)
			return
		}
	}
	p.setWindow(window)
	p.includeUsage = p.stream
	s.generate(w, r, p, [][]int32{prompt}, sh)
}

// rawGeneration prepares a prompt sent as it is (raw, or a model without a
// chat template): tokenized with the vocabulary's BOS and control tokens.
func (s *Server) rawGeneration(m *Model, c *commonFields, prompt string) (*genParams, []int32, *apiError) {
	p := &genParams{}
	if e := c.validate(m, c.MaxTokens, p); e != nil {
		return nil, nil, e
	}
	if e := s.structured(m, c, p); e != nil {
		return nil, nil, e
	}
	ids := m.Engine.Tokenizer().Encode(prompt, true, true)
	if len(ids) == 0 {
		return nil, nil, badRequest("prompt", "the prompt is empty")
	}
	if e := p.checkFits(len(ids)); e != nil {
		return nil, nil, e
	}
	return p, ids, nil
}

// contextTokens checks the token ids of a request's context (a previous
// exchange, prepended to the prompt).
func contextTokens(ids []int64, m *Model) ([]int32, *apiError) {
	out, i := tokenIDs(ids, m.Engine.Tokenizer().VocabSize())
	if i >= 0 {
		return nil, badRequest("context", "context[%d] is %d, not a token id of this model", i, ids[i])
	}
	return out, nil
}

// ollamaParam renames the OpenAI fields an error message names to the
// Ollama options they came from.
func ollamaParam(e *apiError) *apiError {
	c := *e
	for _, r := range [][2]string{{"max_completion_tokens", "num_predict"}, {"max_tokens", "num_predict"},
		{"repetition_penalty", "repeat_penalty"}, {"response_format", "format"}, {"reasoning_effort", "think"}} {
		c.Message = strings.ReplaceAll(c.Message, r[0], r[1])
		if c.Param == r[0] {
			c.Param = r[1]
		}
	}
	return &c
}

// hasTools reports whether m's template shows a tool-call syntax memra
// parses.
func hasTools(m *Model) bool {
	return m.Template != nil && tools.Detect(templateSource(m)) != tools.None
}
