package serve

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// parameterSamples is a valid use of each request parameter: the members
// to add to a chat request and to a completions request ("" where that
// endpoint does not take it).
var parameterSamples = map[string]struct{ chat, completions string }{
	"max_tokens":            {`"max_tokens":2`, `"max_tokens":2`},
	"temperature":           {`"temperature":0.5`, `"temperature":0.5`},
	"top_p":                 {`"top_p":0.9`, `"top_p":0.9`},
	"top_k":                 {`"top_k":5`, `"top_k":5`},
	"min_p":                 {`"min_p":0.1`, `"min_p":0.1`},
	"seed":                  {`"seed":7`, `"seed":7`},
	"cache_salt":            {`"cache_salt":"s"`, `"cache_salt":"s"`},
	"speculative":           {`"speculative":false`, `"speculative":false`},
	"presence_penalty":      {`"presence_penalty":0.5`, `"presence_penalty":0.5`},
	"frequency_penalty":     {`"frequency_penalty":0.5`, `"frequency_penalty":0.5`},
	"repetition_penalty":    {`"repetition_penalty":1.1`, `"repetition_penalty":1.1`},
	"logit_bias":            {`"logit_bias":{"65":1}`, `"logit_bias":{"65":1}`},
	"n":                     {`"n":2`, `"n":2`},
	"stop":                  {`"stop":["\n"]`, `"stop":["\n"]`},
	"stream":                {`"stream":true`, `"stream":true`},
	"stream_options":        {`"stream":true,"stream_options":{"include_usage":true}`, `"stream":true,"stream_options":{"include_usage":true}`},
	"ignore_eos":            {`"ignore_eos":true`, `"ignore_eos":true`},
	"response_format":       {`"response_format":{"type":"json_object"}`, `"response_format":{"type":"json_object"}`},
	"grammar":               {`"grammar":"root ::= \"a\""`, `"grammar":"root ::= \"a\""`},
	"max_completion_tokens": {`"max_completion_tokens":2`, ``},
	"logprobs":              {`"logprobs":true`, `"logprobs":2`},
	"top_logprobs":          {`"logprobs":true,"top_logprobs":2`, ``},
	"tools":                 {`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`, ``},
	"tool_choice":           {`"tool_choice":"none"`, ``},
	"parallel_tool_calls":   {`"parallel_tool_calls":false`, ``},
	"reasoning_effort":      {`"reasoning_effort":"low"`, ``},
	"chat_template_kwargs":  {`"chat_template_kwargs":{"x":1}`, ``},
	"echo":                  {``, `"echo":true`},
}

func listedParameters(t *testing.T, s *testServer, id string) []string {
	t.Helper()
	status, _, raw := s.do(t, "GET", "/v1/models/"+id, "")
	require.Equal(t, http.StatusOK, status, string(raw))
	var m modelObject
	require.NoError(t, json.Unmarshal(raw, &m))
	return m.SupportedParameters
}

// TestSupportedParameters: every field /v1/models lists is accepted (a
// request using it succeeds), every field the request decoders take is
// listed or deliberately left out, and a model lacking a capability (a
// chat template, token bytes) does not list what needs it.
func TestSupportedParameters(t *testing.T) {
	s := newTestServer(t, nil, nil)
	listed := listedParameters(t, s, "fake")
	for _, p := range listed {
		sample, ok := parameterSamples[p]
		require.True(t, ok, "listed parameter %q has no sample in parameterSamples", p)
		if sample.chat != "" {
			status, _, raw := s.do(t, "POST", "/v1/chat/completions",
				`{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":2,`+sample.chat+`}`)
			require.Equal(t, http.StatusOK, status, "%s on chat: %s", p, raw)
		}
		if sample.completions != "" {
			status, _, raw := s.do(t, "POST", "/v1/completions", `{"model":"fake","prompt":"hi","max_tokens":2,`+sample.completions+`}`)
			require.Equal(t, http.StatusOK, status, "%s on completions: %s", p, raw)
		}
	}
	// Every field the decoders read is listed, but the inputs and the two
	// fields taken only in a trivial form, which are refused otherwise.
	var fields func(reflect.Type) []string
	fields = func(rt reflect.Type) []string {
		var out []string
		for i := range rt.NumField() {
			f := rt.Field(i)
			if f.Anonymous {
				out = append(out, fields(f.Type)...)
			} else {
				out = append(out, strings.Split(f.Tag.Get("json"), ",")[0])
			}
		}
		return out
	}
	for _, f := range append(fields(reflect.TypeFor[chatRequest]()), fields(reflect.TypeFor[completionRequest]())...) {
		switch f {
		case "model", "messages", "prompt":
		case "suffix", "best_of":
			require.NotContains(t, listed, f)
			value := map[string]string{"suffix": `"x"`, "best_of": `3`}[f]
			status, _, raw := s.do(t, "POST", "/v1/completions", `{"model":"fake","prompt":"hi","`+f+`":`+value+`}`)
			require.Equal(t, http.StatusBadRequest, status, string(raw))
			require.Contains(t, string(raw), `"param":"`+f+`"`)
		default:
			require.Contains(t, listed, f, "the request field %q is taken but not listed", f)
		}
	}

	// Without a chat template and without token bytes.
	plain := &plainEngine{newFakeEngine()}
	s = newTestServer(t, nil, func(c *Config) { c.Models = append(c.Models, Model{ID: "plain", Engine: plain}) })
	listed = listedParameters(t, s, "plain")
	for _, p := range []string{"tools", "tool_choice", "max_completion_tokens", "reasoning_effort", "response_format", "grammar"} {
		require.NotContains(t, listed, p)
	}
	for _, p := range []string{"max_tokens", "temperature", "echo", "logprobs", "stream"} {
		require.Contains(t, listed, p)
	}
	for _, p := range []string{"response_format", "grammar"} {
		status, _, raw := s.do(t, "POST", "/v1/completions", `{"model":"plain","prompt":"hi",`+parameterSamples[p].completions+`}`)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", p, raw)
	}
	require.True(t, slices.Contains(listedParameters(t, s, "fake"), "grammar"))
}

// plainEngine is a fake engine whose tokenizer gives no token bytes.
type plainEngine struct{ *fakeEngine }

type plainTokenizer struct{ Tokenizer }

func (e *plainEngine) Tokenizer() Tokenizer { return plainTokenizer{fakeTokenizer{}} }
