package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// The request bodies below are those of Ollama's API documentation
// (docs/api.md), model names included: the servers serve "llama3.2" and
// "all-minilm".

// newOllamaServer serves "llama3.2" on e (with template tmpl) and the
// embedding model "all-minilm".
func newOllamaServer(t *testing.T, e Engine, tmpl Template, mod func(*Config)) *testServer {
	t.Helper()
	cfg := Config{Host: "127.0.0.1", StartTime: time.Unix(1700000000, 0), Version: "test-1",
		Models: []Model{
			{ID: "llama3.2", Engine: e, Template: tmpl, Facts: ModelFacts{Path: "/m/llama.gguf", Format: "gguf",
				Parameters: 3_212_749_888, Quantization: "Q4_K_M", Size: 2_019_393_189, Modified: time.Unix(1700000100, 0)}},
			{ID: "all-minilm", Engine: newFakeEmbedEngine(8), Pooling: runtime.PoolMean},
		}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	fe, _ := e.(*fakeEngine)
	return &testServer{Server: s, ts: ts, engine: fe}
}

// ndjsonLines decodes an NDJSON body.
func ndjsonLines(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	return out
}

// requireFinal checks the fields of the last object of a generation.
func requireFinal(t *testing.T, m map[string]any, reason string) {
	t.Helper()
	require.Equal(t, true, m["done"])
	require.Equal(t, reason, m["done_reason"])
	for _, k := range []string{"total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"} {
		require.Contains(t, m, k)
		require.GreaterOrEqual(t, m[k].(float64), 0.0, k)
	}
	require.Positive(t, m["prompt_eval_count"])
	require.Positive(t, m["total_duration"])
	_, err := time.Parse(time.RFC3339Nano, m["created_at"].(string))
	require.NoError(t, err)
}

const ollamaOptionsBody = `{
  "model": "llama3.2",
  "prompt": "Why is the sky blue?",
  "stream": false,
  "options": {
    "num_keep": 5,
    "seed": 42,
    "num_predict": 100,
    "top_k": 20,
    "top_p": 0.9,
    "min_p": 0.0,
    "typical_p": 0.7,
    "repeat_last_n": 33,
    "temperature": 0.8,
    "repeat_penalty": 1.2,
    "presence_penalty": 1.5,
    "frequency_penalty": 1.0,
    "penalize_newline": true,
    "stop": ["\n", "user:"],
    "numa": false,
    "num_ctx": 1024,
    "num_batch": 2,
    "num_gpu": 1,
    "main_gpu": 0,
    "use_mmap": true,
    "num_thread": 8
  }
}`

// TestOllamaGenerate: /api/generate streamed (Ollama's default) and not,
// with the documentation's requests: the lines and their fields, the
// options reaching the sampler, raw prompts, JSON formats, loading.
func TestOllamaGenerate(t *testing.T) {
	fe := newFakeEngine()
	s := newOllamaServer(t, fe, fakeTemplate{}, nil)

	// streamed by default
	status, hdr, raw := s.do(t, "POST", "/api/generate", `{"model": "llama3.2", "prompt": "Why is the sky blue?"}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	require.Equal(t, "application/x-ndjson", hdr.Get("Content-Type"))
	lines := ndjsonLines(t, raw)
	require.Greater(t, len(lines), 2)
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		require.Equal(t, "llama3.2", l["model"])
		require.Equal(t, false, l["done"])
		text.WriteString(l["response"].(string))
	}
	last := lines[len(lines)-1]
	requireFinal(t, last, "stop")
	require.Equal(t, "", last["response"])
	require.EqualValues(t, 41, last["eval_count"], "the fake ends with EOS after 40 tokens")
	require.Equal(t, 40, len(text.String()))
	req := fe.last.Load()
	require.Equal(t, runtime.SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.1, PenaltyLastN: 64}, req.Sampling,
		"Ollama's defaults")
	prompt, _ := fakeTemplate{}.Render(json.RawMessage(`{"messages":[{"role":"user","content":"Why is the sky blue?"}],"bos_token":"<s>"}`))
	require.Equal(t, fakeTokenizer{}.Encode(prompt, false, true), req.Prompt, "the prompt went through the chat template")

	// the options example, blocking and then streamed: the same text
	status, _, raw = s.do(t, "POST", "/api/generate", ollamaOptionsBody)
	require.Equal(t, http.StatusOK, status, string(raw))
	var one map[string]any
	require.NoError(t, json.Unmarshal(raw, &one))
	requireFinal(t, one, "stop")
	req = fe.last.Load()
	seed := uint64(42)
	require.Equal(t, runtime.SamplingParams{Temperature: 0.8, TopK: 20, TopP: 0.9, RepeatPenalty: 1.2, PresencePenalty: 1.5,
		FrequencyPenalty: 1, PenaltyLastN: 33, Seed: &seed}, req.Sampling)
	require.Equal(t, 100, req.MaxTokens)
	require.Equal(t, []string{"\n", "user:"}, req.Stop)
	status, _, raw = s.do(t, "POST", "/api/generate", strings.Replace(ollamaOptionsBody, `"stream": false`, `"stream": true`, 1))
	require.Equal(t, http.StatusOK, status)
	lines = ndjsonLines(t, raw)
	text.Reset()
	for _, l := range lines {
		text.WriteString(l["response"].(string))
	}
	require.Equal(t, one["response"], text.String())
	require.Equal(t, one["eval_count"], lines[len(lines)-1]["eval_count"])

	// raw: the prompt as sent, no template
	status, _, raw = s.do(t, "POST", "/api/generate", `{"model": "mistral", "prompt": "[INST] why is the sky blue? [/INST]", "raw": true, "stream": false}`)
	require.Equal(t, http.StatusNotFound, status)
	require.JSONEq(t, `{"error":"model 'mistral' not found"}`, string(raw))
	status, _, raw = s.do(t, "POST", "/api/generate", `{"model": "llama3.2:latest", "prompt": "[INST] why is the sky blue? [/INST]", "raw": true, "stream": false}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	require.Equal(t, fakeTokenizer{}.Encode("[INST] why is the sky blue? [/INST]", true, true), fe.last.Load().Prompt)

	// JSON mode and a schema install a constraint
	for _, format := range []string{`"json"`, `{"type": "object", "properties": {"age": {"type": "integer"}, "available": {"type": "boolean"}}, "required": ["age", "available"]}`} {
		status, _, raw = s.do(t, "POST", "/api/generate", `{"model": "llama3.2", "prompt": "Ollama is 22 years old and is busy saving the world. Respond using JSON", "stream": false, "format": `+format+`}`)
		require.Equal(t, http.StatusOK, status, string(raw))
		require.NotNil(t, fe.last.Load().Mask, format)
	}

	// load and unload
	for body, reason := range map[string]string{`{"model": "llama3.2"}`: "load", `{"model": "llama3.2", "keep_alive": 0}`: "unload"} {
		status, _, raw = s.do(t, "POST", "/api/generate", body)
		require.Equal(t, http.StatusOK, status)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		require.Equal(t, map[string]any{"model": "llama3.2", "created_at": m["created_at"], "response": "", "done": true, "done_reason": reason}, m)
	}

	// refusals in Ollama's error shape
	for body, want := range map[string]string{
		`{"model": "llama3.2", "prompt": "x", "suffix": "y"}`:                                  "suffix",
		`{"model": "llama3.2", "prompt": "x", "images": ["aGk="]}`:                             "images",
		`{"model": "llama3.2", "prompt": "x", "options": {"temperature": 3}, "stream": false}`: "temperature must be between 0 and 2",
		`{"model": "llama3.2", "prompt": "x", "format": "yaml"}`:                               "format must be",
	} {
		status, _, raw = s.do(t, "POST", "/api/generate", body)
		require.Equal(t, http.StatusBadRequest, status, body)
		var e map[string]string
		require.NoError(t, json.Unmarshal(raw, &e), string(raw))
		require.Contains(t, e["error"], want, body)
		require.Len(t, e, 1)
	}
}

// TestOllamaChat: /api/chat streamed and not, with the documentation's
// requests: message deltas, the final counts, history, and a tool call
// whose arguments come as an object.
func TestOllamaChat(t *testing.T) {
	fe := newFakeEngine()
	s := newOllamaServer(t, fe, fakeTemplate{}, nil)
	status, _, raw := s.do(t, "POST", "/api/chat", `{"model": "llama3.2", "messages": [{"role": "user", "content": "why is the sky blue?"}]}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	lines := ndjsonLines(t, raw)
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		msg := l["message"].(map[string]any)
		require.Equal(t, "assistant", msg["role"])
		text.WriteString(msg["content"].(string))
		require.Equal(t, false, l["done"])
	}
	requireFinal(t, lines[len(lines)-1], "stop")
	require.Equal(t, map[string]any{"role": "assistant", "content": ""}, lines[len(lines)-1]["message"])

	history := `{"model": "llama3.2", "stream": false, "options": {"seed": 101, "temperature": 0}, "messages": [
	  {"role": "user", "content": "why is the sky blue?"},
	  {"role": "assistant", "content": "due to rayleigh scattering."},
	  {"role": "user", "content": "how is that different than mie scattering?"}]}`
	status, _, raw = s.do(t, "POST", "/api/chat", history)
	require.Equal(t, http.StatusOK, status, string(raw))
	var one map[string]any
	require.NoError(t, json.Unmarshal(raw, &one))
	requireFinal(t, one, "stop")
	content := one["message"].(map[string]any)["content"].(string)
	require.NotEmpty(t, content)
	require.Len(t, fe.last.Load().Prompt, 1+len("user: why is the sky blue?\nassistant: due to rayleigh scattering.\nuser: how is that different than mie scattering?\nassistant:"))
	// the same request streamed gives the same text
	status, _, raw = s.do(t, "POST", "/api/chat", strings.Replace(history, `"stream": false`, `"stream": true`, 1))
	require.Equal(t, http.StatusOK, status)
	text.Reset()
	for _, l := range ndjsonLines(t, raw) {
		text.WriteString(l["message"].(map[string]any)["content"].(string))
	}
	require.Equal(t, content, text.String())

	// load
	status, _, raw = s.do(t, "POST", "/api/chat", `{"model": "llama3.2", "messages": []}`)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(raw), `"done_reason":"load"`)

	// images are refused
	status, _, raw = s.do(t, "POST", "/api/chat", `{"model": "llama3.2", "messages": [{"role": "user", "content": "what is in this image?", "images": ["iVBORw0KGgo"]}]}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(raw), `"error":"messages[0] has images`)
}

const ollamaToolsBody = `{
  "model": "llama3.2",
  "messages": [{"role": "user", "content": "What is the weather today in Paris?"}],
  "stream": false,
  "tools": [{
    "type": "function",
    "function": {
      "name": "get_current_weather",
      "description": "Get the current weather for a location",
      "parameters": {
        "type": "object",
        "properties": {
          "location": {"type": "string", "description": "The location to get the weather for, e.g. San Francisco, CA"},
          "format": {"type": "string", "description": "The format to return the weather in, e.g. 'celsius' or 'fahrenheit'", "enum": ["celsius", "fahrenheit"]}
        },
        "required": ["location", "format"]
      }
    }
  }]
}`

func TestOllamaChatTools(t *testing.T) {
	script := `<tool_call>{"name": "get_current_weather", "arguments": {"format": "celsius", "location": "Paris, FR"}}</tool_call>`
	var last json.RawMessage
	s := newOllamaServer(t, &agentEngine{script: script, chunk: 5}, sourceTemplate{src: hermesSource, last: &last}, nil)
	want := []any{map[string]any{"function": map[string]any{"name": "get_current_weather",
		"arguments": map[string]any{"format": "celsius", "location": "Paris, FR"}}}}
	status, _, raw := s.do(t, "POST", "/api/chat", ollamaToolsBody)
	require.Equal(t, http.StatusOK, status, string(raw))
	var one map[string]any
	require.NoError(t, json.Unmarshal(raw, &one))
	msg := one["message"].(map[string]any)
	require.Equal(t, "", msg["content"])
	require.Equal(t, want, msg["tool_calls"])
	requireFinal(t, one, "stop")
	require.Contains(t, string(last), `"get_current_weather"`, "the tools reach the template")

	status, _, raw = s.do(t, "POST", "/api/chat", strings.Replace(ollamaToolsBody, `"stream": false`, `"stream": true`, 1))
	require.Equal(t, http.StatusOK, status)
	var calls []any
	for _, l := range ndjsonLines(t, raw) {
		if tc, ok := l["message"].(map[string]any)["tool_calls"]; ok {
			calls = append(calls, tc.([]any)...)
		}
	}
	require.Equal(t, want, calls, "the call is sent whole, its arguments an object")

	// the next turn: the call and its result, as Ollama clients send them
	next := `{"model": "llama3.2", "stream": false, "messages": [
	  {"role": "user", "content": "What is the weather today in Paris?"},
	  {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_current_weather", "arguments": {"format": "celsius", "location": "Paris, FR"}}}]},
	  {"role": "tool", "content": "22 degrees", "tool_name": "get_current_weather"}]}`
	status, _, raw = s.do(t, "POST", "/api/chat", next)
	require.Equal(t, http.StatusOK, status, string(raw))
	require.Contains(t, string(last), `"arguments":{"format":"celsius","location":"Paris, FR"}`)
	require.Contains(t, string(last), `"tool_name":"get_current_weather"`)
}

// TestOllamaThinking: think splits the reasoning into thinking.
func TestOllamaThinking(t *testing.T) {
	s := newOllamaServer(t, &agentEngine{script: "<think>Light scatters.</think>Rayleigh.", chunk: 3}, sourceTemplate{src: "<think>"}, nil)
	status, _, raw := s.do(t, "POST", "/api/chat", `{"model": "llama3.2", "messages": [{"role": "user", "content": "why is the sky blue?"}], "think": true, "stream": false}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	var one map[string]any
	require.NoError(t, json.Unmarshal(raw, &one))
	require.Equal(t, map[string]any{"role": "assistant", "content": "Rayleigh.", "thinking": "Light scatters."}, one["message"])
	status, _, raw = s.do(t, "POST", "/api/generate", `{"model": "llama3.2", "prompt": "why is the sky blue?", "think": true}`)
	require.Equal(t, http.StatusOK, status)
	var thinking, response strings.Builder
	for _, l := range ndjsonLines(t, raw) {
		if s, ok := l["thinking"].(string); ok {
			thinking.WriteString(s)
		}
		response.WriteString(l["response"].(string))
	}
	require.Equal(t, "Light scatters.", thinking.String())
	require.Equal(t, "Rayleigh.", response.String())
}

// TestOllamaModels: /api/tags, /api/show and /api/version.
func TestOllamaModels(t *testing.T) {
	s := newOllamaServer(t, newFakeEngine(), sourceTemplate{src: hermesSource}, nil)
	status, _, raw := s.do(t, "GET", "/api/tags", ``)
	require.Equal(t, http.StatusOK, status)
	var tags struct {
		Models []map[string]any `json:"models"`
	}
	require.NoError(t, json.Unmarshal(raw, &tags))
	require.Len(t, tags.Models, 2)
	m := tags.Models[0]
	require.Equal(t, "llama3.2:latest", m["name"])
	require.Equal(t, "llama3.2:latest", m["model"])
	require.EqualValues(t, 2_019_393_189, m["size"])
	require.Len(t, m["digest"], 64)
	require.Equal(t, time.Unix(1700000100, 0).UTC().Format(time.RFC3339Nano), m["modified_at"])
	require.Equal(t, map[string]any{"parent_model": "", "format": "gguf", "family": "fake", "families": []any{"fake"},
		"parameter_size": "3.2B", "quantization_level": "Q4_K_M"}, m["details"])
	require.Equal(t, "all-minilm:latest", tags.Models[1]["name"])

	status, _, raw = s.do(t, "POST", "/api/show", `{"model": "llama3.2"}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	var show map[string]any
	require.NoError(t, json.Unmarshal(raw, &show))
	for _, k := range []string{"modelfile", "parameters", "template", "details", "model_info", "capabilities", "modified_at"} {
		require.Contains(t, show, k)
	}
	require.Equal(t, hermesSource, show["template"])
	require.Equal(t, []any{"completion", "tools", "thinking"}, show["capabilities"])
	require.Equal(t, map[string]any{"general.architecture": "fake", "general.parameter_count": 3212749888.0, "fake.context_length": 256.0}, show["model_info"])
	require.Contains(t, show["parameters"], "temperature 0.8")
	status, _, raw = s.do(t, "POST", "/api/show", `{"name": "all-minilm"}`)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(raw), `"capabilities":["embedding"]`)
	require.Contains(t, string(raw), `"fake.embedding_length":8`)
	status, _, raw = s.do(t, "POST", "/api/show", `{"model": "llava"}`)
	require.Equal(t, http.StatusNotFound, status)
	require.JSONEq(t, `{"error":"model 'llava' not found"}`, string(raw))

	status, _, raw = s.do(t, "GET", "/api/version", ``)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"version":"test-1"}`, string(raw))
}

// TestOllamaEmbed: /api/embed with one and several inputs, truncation,
// and the older /api/embeddings.
func TestOllamaEmbed(t *testing.T) {
	s := newOllamaServer(t, newFakeEngine(), fakeTemplate{}, nil)
	tok := fakeTokenizer{}
	status, _, raw := s.do(t, "POST", "/api/embed", `{"model": "all-minilm", "input": "Why is the sky blue?"}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	var r struct {
		Model           string      `json:"model"`
		Embeddings      [][]float32 `json:"embeddings"`
		TotalDuration   int64       `json:"total_duration"`
		LoadDuration    *int64      `json:"load_duration"`
		PromptEvalCount int         `json:"prompt_eval_count"`
	}
	require.NoError(t, json.Unmarshal(raw, &r))
	require.Equal(t, "all-minilm", r.Model)
	require.Equal(t, [][]float32{fakeEmbedding(tok.Encode("Why is the sky blue?", true, false), 8)}, r.Embeddings)
	require.Equal(t, 21, r.PromptEvalCount)
	require.NotNil(t, r.LoadDuration)
	require.Positive(t, r.TotalDuration)

	status, _, raw = s.do(t, "POST", "/api/embed", `{"model": "all-minilm", "input": ["Why is the sky blue?", "Why is the grass green?"]}`)
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, json.Unmarshal(raw, &r))
	require.Len(t, r.Embeddings, 2)
	require.Equal(t, fakeEmbedding(tok.Encode("Why is the grass green?", true, false), 8), r.Embeddings[1])

	long := strings.Repeat("a", 300) // past the 256-position context
	status, _, raw = s.do(t, "POST", "/api/embed", `{"model": "all-minilm", "input": "`+long+`", "truncate": false}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(raw), `"error":"input 0 has 301 tokens`)
	status, _, raw = s.do(t, "POST", "/api/embed", `{"model": "all-minilm", "input": "`+long+`"}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	require.NoError(t, json.Unmarshal(raw, &r))
	require.Equal(t, 256, r.PromptEvalCount, "cut to the context")

	status, _, raw = s.do(t, "POST", "/api/embeddings", `{"model": "all-minilm", "prompt": "Here is an article about llamas..."}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	var old map[string][]float32
	require.NoError(t, json.Unmarshal(raw, &old))
	require.Equal(t, fakeEmbedding(tok.Encode("Here is an article about llamas...", true, false), 8), old["embedding"])

	status, _, raw = s.do(t, "POST", "/api/embed", `{"model": "llama3.2", "input": "x"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(raw), "does not serve embeddings")
}

// TestOllamaAdmissionAuthMetrics: the Ollama routes sit behind the same
// keys, count in the same metrics, and get 429 from the same admission.
func TestOllamaAdmissionAuthMetrics(t *testing.T) {
	full := newFakeEngine()
	full.maxRunning, full.maxQueue = 0, 0
	s := newOllamaServer(t, full, fakeTemplate{}, func(c *Config) { c.APIKeys = []string{"sk-o"} })
	status, _, raw := s.do(t, "POST", "/api/chat", `{"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}`)
	require.Equal(t, http.StatusUnauthorized, status, string(raw))
	auth := []string{"Authorization", "Bearer sk-o"}
	for _, stream := range []string{"true", "false"} {
		status, hdr, raw := s.do(t, "POST", "/api/chat", `{"model": "llama3.2", "stream": `+stream+`, "messages": [{"role": "user", "content": "hi"}]}`, auth...)
		require.Equal(t, http.StatusTooManyRequests, status, string(raw))
		require.Equal(t, "1", hdr.Get("Retry-After"))
		var e map[string]string
		require.NoError(t, json.Unmarshal(raw, &e))
		require.Contains(t, e["error"], "at capacity")
	}
	s.do(t, "GET", "/api/tags", ``, auth...)
	_, _, body := s.do(t, "GET", "/metrics", ``, auth...)
	require.Contains(t, string(body), `memra_http_requests_total{endpoint="/api/chat",status="429"} 2`)
	require.Contains(t, string(body), `memra_http_requests_total{endpoint="/api/chat",status="401"} 1`)
	require.Contains(t, string(body), `memra_http_requests_total{endpoint="/api/tags",status="200"} 1`)
}
