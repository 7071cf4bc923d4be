package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/runtime"
)

// Limits of request fields, OpenAI's where it has one.
const (
	maxStops        = 4
	maxN            = 128
	maxChoices      = 128 // prompts × n in one completions request
	maxTopLogprobs  = 20
	maxLogitBiasAbs = 100
	maxCacheSalt    = 1024
)

// commonFields are the request fields shared by chat and text completions.
// Unknown fields are ignored, as OpenAI does.
type commonFields struct {
	Model             string             `json:"model"`
	MaxTokens         *int               `json:"max_tokens"`
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	Seed              *int64             `json:"seed"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	N                 *int               `json:"n"`
	Stop              json.RawMessage    `json:"stop"`
	Stream            *bool              `json:"stream"`
	StreamOptions     *streamOptions     `json:"stream_options"`
	IgnoreEOS         *bool              `json:"ignore_eos"`
	// ResponseFormat is OpenAI's response_format: text, json_object or
	// json_schema, enforced while decoding.
	ResponseFormat json.RawMessage `json:"response_format"`
	// Grammar is a GBNF grammar (llama.cpp's field) as a string, or
	// {"plugin": NAME, "source": "…"} for a grammar plugin; enforced while
	// decoding.
	Grammar json.RawMessage `json:"grammar"`
	// CacheSalt narrows the prefix-cache scope within the tenant (vLLM's
	// field): only requests with the same key and salt share cached pages.
	CacheSalt *string `json:"cache_salt"`
	// Speculative turns the server's speculative decoding off (false) or
	// on (true, where the server runs a drafter) for this request.
	Speculative *bool `json:"speculative"`
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// genParams is a validated request, ready to become runtime.Requests.
type genParams struct {
	model        *Model
	maxTokens    int // 0: until the context is full
	sampling     runtime.SamplingParams
	stop         []string
	n            int
	stream       bool
	includeUsage bool
	ignoreEOS    bool
	scope        string // the prefix-cache scope: tenant and cache_salt
	speculative  *bool  // the request's speculative, or nil
	logprobs     bool
	topLogprobs  int
	// newMask, when set, gives each choice its own constraint. A mask with
	// a Close method (a grammar plugin's Matcher) is closed when its
	// sequence has ended.
	newMask func() (runtime.Mask, error)
}

// decodeBody reads the JSON body into v, mapping every failure to a 4xx.
func decodeBody(r *http.Request, v any) *apiError {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest,
				Message: fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit)}
		}
		if isTimeout(err) {
			return &apiError{Status: http.StatusRequestTimeout, Type: typeInvalidRequest, Code: "request_timeout",
				Message: "the request body did not arrive within the server's read timeout (--read-timeout)"}
		}
		return badRequest("", "reading request body: %v", err)
	}
	if len(bytes.TrimSpace(buf.Bytes())) == 0 {
		return badRequest("", "request body is empty; expected a JSON object")
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field != "":
			field := strings.TrimPrefix(te.Field, "commonFields.")
			return badRequest(field, "invalid type for '%s': expected %s, got JSON %s",
				field, goTypeName(te.Type.String()), te.Value)
		case errors.As(err, &te):
			return badRequest("", "request body must be a JSON object, got JSON %s", te.Value)
		case errors.As(err, &se):
			return badRequest("", "request body is not valid JSON: %v (at byte %d)", err, se.Offset)
		default:
			return badRequest("", "request body is not valid JSON: %v", err)
		}
	}
	return nil
}

// goTypeName spells a Go type as the JSON type a client should send.
func goTypeName(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "map"), strings.HasPrefix(t, "serve."):
		return "an object"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return t
}

// validate checks the shared fields against the model and fills p.
// maxTokens is max_tokens or its chat alias max_completion_tokens.
func (c *commonFields) validate(m *Model, maxTokens *int, p *genParams) *apiError {
	ctxLen := m.Engine.Info().ContextLength
	p.model = m
	if maxTokens != nil {
		switch {
		case *maxTokens < 1:
			return badRequest("max_tokens", "max_tokens must be at least 1, got %d", *maxTokens)
		case ctxLen > 0 && *maxTokens > ctxLen:
			return badRequest("max_tokens", "max_tokens is %d, more than the model's context length of %d tokens",
				*maxTokens, ctxLen)
		}
		p.maxTokens = *maxTokens
	}
	s := &p.sampling
	s.Temperature = 1 // OpenAI's default
	if err := rangeF(&s.Temperature, c.Temperature, "temperature", 0, 2); err != nil {
		return err
	}
	s.TopP = 1
	if err := rangeF(&s.TopP, c.TopP, "top_p", 0, 1); err != nil {
		return err
	}
	if err := rangeF(&s.MinP, c.MinP, "min_p", 0, 1); err != nil {
		return err
	}
	if err := rangeF(&s.PresencePenalty, c.PresencePenalty, "presence_penalty", -2, 2); err != nil {
		return err
	}
	if err := rangeF(&s.FrequencyPenalty, c.FrequencyPenalty, "frequency_penalty", -2, 2); err != nil {
		return err
	}
	if c.RepetitionPenalty != nil && (*c.RepetitionPenalty <= 0 || *c.RepetitionPenalty > 10) {
		return badRequest("repetition_penalty", "repetition_penalty must be in (0, 10], got %g", *c.RepetitionPenalty)
	}
	if c.RepetitionPenalty != nil {
		s.RepeatPenalty = float32(*c.RepetitionPenalty)
	}
	if c.TopK != nil {
		if *c.TopK < -1 {
			return badRequest("top_k", "top_k must be -1 (off), 0 (off) or positive, got %d", *c.TopK)
		}
		s.TopK = *c.TopK
	}
	if c.Seed != nil {
		seed := uint64(*c.Seed)
		s.Seed = &seed
	}
	if len(c.LogitBias) > 0 {
		vocab := m.Engine.Tokenizer().VocabSize()
		s.LogitBias = make(map[int32]float32, len(c.LogitBias))
		for k, v := range c.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil || id < 0 || int(id) >= vocab {
				return badRequest("logit_bias", "logit_bias key %q is not a token id of this model (0 to %d)", k, vocab-1)
			}
			if math.IsNaN(v) || v < -maxLogitBiasAbs || v > maxLogitBiasAbs {
				return badRequest("logit_bias", "logit_bias value for token %s must be between -100 and 100, got %g", k, v)
			}
			s.LogitBias[int32(id)] = float32(v)
		}
	}
	p.n = 1
	if c.N != nil {
		if *c.N < 1 || *c.N > maxN {
			return badRequest("n", "n must be between 1 and %d, got %d", maxN, *c.N)
		}
		p.n = *c.N
	}
	stop, err := parseStop(c.Stop)
	if err != nil {
		return err
	}
	p.stop = stop
	p.stream = c.Stream != nil && *c.Stream
	if c.StreamOptions != nil {
		if !p.stream {
			return badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		p.includeUsage = c.StreamOptions.IncludeUsage != nil && *c.StreamOptions.IncludeUsage
	}
	p.ignoreEOS = c.IgnoreEOS != nil && *c.IgnoreEOS
	p.speculative = c.Speculative
	if c.CacheSalt != nil {
		if *c.CacheSalt == "" || len(*c.CacheSalt) > maxCacheSalt {
			return badRequest("cache_salt", "cache_salt must be a non-empty string of at most %d bytes", maxCacheSalt)
		}
		p.scope = "\x00salt:" + *c.CacheSalt
	}
	return nil
}

// rangeF copies *src into *dst after checking lo ≤ *src ≤ hi.
func rangeF(dst *float32, src *float64, name string, lo, hi float64) *apiError {
	if src == nil {
		return nil
	}
	if math.IsNaN(*src) || *src < lo || *src > hi {
		return badRequest(name, "%s must be between %g and %g, got %g", name, lo, hi, *src)
	}
	*dst = float32(*src)
	return nil
}

// parseStop accepts null, a string or a list of up to 4 non-empty strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "stop must be a string or a list of strings")
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "stop has %d entries; at most %d are allowed", len(list), maxStops)
	}
	for i, s := range list {
		if s == "" {
			return nil, badRequest("stop", "stop[%d] is empty", i)
		}
	}
	return list, nil
}

// checkFits rejects a prompt that, with max_tokens, does not fit the context.
func (p *genParams) checkFits(promptTokens int) *apiError {
	ctxLen := p.model.Engine.Info().ContextLength
	if ctxLen <= 0 {
		return nil
	}
	if promptTokens+p.maxTokens > ctxLen || promptTokens >= ctxLen {
		return tooLong(promptTokens, p.maxTokens, ctxLen)
	}
	return nil
}

func tooLong(promptTokens, maxTokens, ctxLen int) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "messages",
		Code: "context_length_exceeded",
		Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens "+
			"(%d in the prompt, %d for max_tokens). Please reduce the prompt or max_tokens.",
			ctxLen, promptTokens+maxTokens, promptTokens, maxTokens)}
}

// runtimeRequest builds the engine request of choice i; the error is the
// mask's (a grammar plugin that refused its source).
func (p *genParams) runtimeRequest(prompt []int32, i int) (runtime.Request, error) {
	s := p.sampling
	if s.Seed != nil && i > 0 {
		seed := *s.Seed + uint64(i) // n > 1 with a seed: distinct but reproducible choices
		s.Seed = &seed
	}
	var mask runtime.Mask
	if p.newMask != nil {
		var err error
		if mask, err = p.newMask(); err != nil {
			return runtime.Request{}, err
		}
	}
	return runtime.Request{
		Mask:        mask,
		Prompt:      prompt,
		MaxTokens:   p.maxTokens,
		Sampling:    s,
		Stop:        p.stop,
		IgnoreEOS:   p.ignoreEOS,
		Logprobs:    p.logprobs,
		TopLogprobs: p.topLogprobs,
		CacheScope:  p.scope,
		Speculative: p.speculative,
	}, nil
}
