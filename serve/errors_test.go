package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const chatOK = `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0}`

// errorCases are bad requests: each must get its 4xx, OpenAI's error shape,
// a message that says what is wrong and, where there is one, the field.
var errorCases = []struct {
	name, method, path, body string
	status                   int
	param, msg               string
}{
	{"malformed json", "POST", "/v1/chat/completions", `{"model":`, 400, "", "not valid JSON"},
	{"not an object", "POST", "/v1/chat/completions", `[1,2]`, 400, "", "JSON object"},
	{"empty body", "POST", "/v1/chat/completions", ``, 400, "", "empty"},
	{"messages missing", "POST", "/v1/chat/completions", `{"model":"fake"}`, 400, "messages", "messages"},
	{"messages empty", "POST", "/v1/chat/completions", `{"model":"fake","messages":[]}`, 400, "messages", "empty"},
	{"messages not array", "POST", "/v1/chat/completions", `{"model":"fake","messages":"hi"}`, 400, "messages", "array"},
	{"bad role", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role", "role"},
	{"role wrong type", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":3,"content":"x"}]}`, 400, "messages[0].role", "role"},
	{"content missing", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user"}]}`, 400, "messages[0].content", "required"},
	{"image part", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content", "image_url"},
	{"max_tokens string", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"max_tokens":"5"}`, 400, "max_tokens", "max_tokens"},
	{"max_tokens negative", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`, 400, "max_tokens", "at least 1"},
	{"max_tokens huge", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"max_tokens":100000000}`, 400, "max_tokens", "context length"},
	{"max_tokens overflow", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"max_tokens":1e40}`, 400, "max_tokens", "max_tokens"},
	{"prompt plus max_tokens too long", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"max_tokens":250}`, 400, "messages", "maximum context length is 256"},
	{"temperature out of range", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"temperature":3}`, 400, "temperature", "temperature"},
	{"temperature wrong type", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"temperature":"hot"}`, 400, "temperature", "temperature"},
	{"top_p out of range", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"top_p":1.5}`, 400, "top_p", "top_p"},
	{"n zero", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"n":0}`, 400, "n", "n must be"},
	{"n huge", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"n":1000}`, 400, "n", "n must be"},
	{"stop too many", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]}`, 400, "stop", "at most 4"},
	{"stop wrong type", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"stop":5}`, 400, "stop", "stop"},
	{"logit_bias bad key", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"logit_bias":{"abc":1}}`, 400, "logit_bias", "token id"},
	{"logit_bias key out of vocab", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"logit_bias":{"99999":1}}`, 400, "logit_bias", "token id"},
	{"logit_bias value", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"logit_bias":{"5":101}}`, 400, "logit_bias", "between -100 and 100"},
	{"logit_bias wrong type", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"logit_bias":[1]}`, 400, "logit_bias", "logit_bias"},
	{"top_logprobs without logprobs", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"top_logprobs":3}`, 400, "top_logprobs", "requires logprobs"},
	{"top_logprobs too many", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs", "between 0 and 20"},
	{"stream_options without stream", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, 400, "stream_options", "stream is true"},
	{"response_format json_schema without schema", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}`, 400, "response_format", "without a schema"},
	{"response_format unsupported keyword", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer","multipleOf":3}}}}`, 400, "response_format", "multipleOf"},
	{"response_format bad type", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}`, 400, "response_format", "not one of"},
	{"response_format bad schema", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"frog"}}}}`, 400, "response_format", "frog"},
	{"grammar syntax", "POST", "/v1/completions", `{"model":"fake","prompt":"x","grammar":"root ::= \"a"}`, 400, "grammar", "grammar"},
	{"grammar not a string", "POST", "/v1/completions", `{"model":"fake","prompt":"x","grammar":5}`, 400, "grammar", "GBNF"},
	{"grammar object, unknown member", "POST", "/v1/completions", `{"model":"fake","prompt":"x","grammar":{"a":1}}`, 400, "grammar", `unknown field "a"`},
	{"grammar object without plugin", "POST", "/v1/completions", `{"model":"fake","prompt":"x","grammar":{"source":"a"}}`, 400, "grammar", `"plugin" is required`},
	{"grammar plugin not configured", "POST", "/v1/completions", `{"model":"fake","prompt":"x","grammar":{"plugin":"regex","source":"a"}}`, 400, "grammar", "no grammar plugins are configured"},
	{"grammar plugin not configured, chat n=2", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"n":2,"grammar":{"plugin":"regex","source":"a"}}`, 400, "grammar", `unknown grammar plugin: "regex"`},
	{"grammar plugin with response_format", "POST", "/v1/completions", `{"model":"fake","prompt":"x","grammar":{"plugin":"regex","source":"a"},"response_format":{"type":"json_object"}}`, 400, "grammar", "cannot be combined"},
	{"grammar with response_format", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}`, 400, "grammar", "cannot be combined"},
	{"tool_choice bad", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"}`, 400, "tool_choice", "not one of"},
	{"tool_choice required without tools", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, 400, "tool_choice", "needs tools"},
	{"tool_choice unknown function", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice", "not in tools"},
	{"tool_choice required, no syntax", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`, 400, "tool_choice", "no known tool-call syntax"},
	{"tools bad type", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"tools":[{"type":"retrieval"}]}`, 400, "tools", "only \"function\""},
	{"reasoning_effort bad", "POST", "/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"}`, 400, "reasoning_effort", "one of none"},
	{"unknown model", "POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model", "does not exist"},
	{"prompt missing", "POST", "/v1/completions", `{"model":"fake"}`, 400, "prompt", "required"},
	{"prompt wrong type", "POST", "/v1/completions", `{"model":"fake","prompt":{"a":1}}`, 400, "prompt", "prompt must be"},
	{"prompt empty list", "POST", "/v1/completions", `{"model":"fake","prompt":[]}`, 400, "prompt", "empty"},
	{"prompt token out of vocab", "POST", "/v1/completions", `{"model":"fake","prompt":[1,2,99999]}`, 400, "prompt", "not a token id"},
	{"prompt negative token", "POST", "/v1/completions", `{"model":"fake","prompt":[[-1]]}`, 400, "prompt", "not a token id"},
	{"prompt too long", "POST", "/v1/completions", `{"model":"fake","prompt":"` + strings.Repeat("x", 300) + `"}`, 400, "prompt", "maximum context length"},
	{"completion logprobs too many", "POST", "/v1/completions", `{"model":"fake","prompt":"x","logprobs":50}`, 400, "logprobs", "logprobs"},
	{"completion unknown model", "POST", "/v1/completions", `{"model":"nope","prompt":"x"}`, 404, "model", "does not exist"},
	{"unknown path", "GET", "/v1/nothing", ``, 404, "", "no endpoint"},
	{"unknown model get", "GET", "/v1/models/nope", ``, 404, "model", "does not exist"},
	{"wrong method chat", "GET", "/v1/chat/completions", ``, 405, "", "not allowed"},
	{"wrong method models", "DELETE", "/v1/models", ``, 405, "", "not allowed"},
}

func TestErrors(t *testing.T) {
	s := newTestServer(t, nil, nil)
	for _, c := range errorCases {
		t.Run(c.name, func(t *testing.T) {
			status, hdr, body := s.do(t, c.method, c.path, c.body)
			require.Equal(t, c.status, status, string(body))
			require.Equal(t, "application/json", hdr.Get("Content-Type"))
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Contains(t, e.Error.Message, c.msg)
			require.Equal(t, "invalid_request_error", e.Error.Type)
			if c.param != "" {
				require.NotNil(t, e.Error.Param, string(body))
				require.Equal(t, c.param, *e.Error.Param)
			}
		})
	}
	// The server keeps serving after every bad request.
	status, _, body := s.do(t, "POST", "/v1/chat/completions", chatOK)
	require.Equal(t, http.StatusOK, status, string(body))
}

func TestUnknownFieldsIgnored(t *testing.T) {
	s := newTestServer(t, nil, nil)
	status, _, body := s.do(t, "POST", "/v1/chat/completions",
		`{"model":"fake","messages":[{"role":"user","content":"x","name":"bob"}],"max_tokens":2,"user":"u1","metadata":{"a":1},"frobnicate":true}`)
	require.Equal(t, http.StatusOK, status, string(body))
}

func TestBodyLimit(t *testing.T) {
	s := newTestServer(t, nil, func(c *Config) { c.MaxBody = 1024 })
	big := `{"model":"fake","prompt":"` + strings.Repeat("x", 2000) + `"}`
	status, _, body := s.do(t, "POST", "/v1/completions", big)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, string(body))
	require.Contains(t, string(body), "larger than the limit of 1024 bytes")
}

func TestPanicRecovered(t *testing.T) {
	eng := newFakeEngine()
	eng.panics = true
	s := newTestServer(t, eng, nil)
	status, _, body := s.do(t, "POST", "/v1/chat/completions", chatOK)
	require.Equal(t, http.StatusInternalServerError, status)
	require.Contains(t, string(body), `"type":"server_error"`)
	// The other model still serves.
	status, _, _ = s.do(t, "POST", "/v1/chat/completions", strings.Replace(chatOK, `"fake"`, `"fake-2"`, 1))
	require.Equal(t, http.StatusOK, status)
}

// FuzzRequests posts arbitrary bodies: the server answers every one with a
// JSON body and never with a 5xx.
func FuzzRequests(f *testing.F) {
	for _, c := range errorCases {
		if c.method == "POST" {
			f.Add(c.path == "/v1/chat/completions", c.body)
		}
	}
	f.Add(true, chatOK)
	f.Add(false, `{"prompt":[[1,2],[3]],"n":2,"echo":true,"max_tokens":2,"stream":true}`)
	f.Add(true, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"logprobs":true,"top_logprobs":1,"max_tokens":1,"chat_template_kwargs":{"x":1}}`)
	eng := newFakeEngine()
	s, err := New(Config{Host: "127.0.0.1", Models: []Model{{ID: "fake", Engine: eng, Template: fakeTemplate{}}}})
	require.NoError(f, err)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, chat bool, body string) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		req, err := http.NewRequest("POST", path, strings.NewReader(body))
		require.NoError(t, err)
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		require.Less(t, rec.code, 500, rec.buf.String())
		if rec.code != 200 {
			require.True(t, json.Valid(rec.buf.Bytes()), rec.buf.String())
		}
	})
}

// recorder is a minimal flushable ResponseWriter for handler-level tests.
type recorder struct {
	hdr  http.Header
	code int
	buf  bytes.Buffer
}

func newRecorder() *recorder { return &recorder{hdr: http.Header{}, code: 200} }

func (r *recorder) Header() http.Header         { return r.hdr }
func (r *recorder) WriteHeader(c int)           { r.code = c }
func (r *recorder) Write(b []byte) (int, error) { return r.buf.Write(b) }
func (r *recorder) Flush()                      {}
