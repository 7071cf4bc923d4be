package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// respEvent is one event of a Responses stream: its SSE name and data.
type respEvent struct {
	name string
	data map[string]any
}

// responseEvents splits a Responses stream into its named events; each
// event's name must be its data's type, and sequence numbers count up
// from 0.
func responseEvents(t *testing.T, body []byte) []respEvent {
	t.Helper()
	var out []respEvent
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d), line)
			require.Equal(t, name, d["type"], "the event's name is its type")
			require.EqualValues(t, len(out), d["sequence_number"])
			out = append(out, respEvent{name, d})
			name = ""
		default:
			t.Fatalf("unexpected stream line %q", line)
		}
	}
	return out
}

func eventNames(evs []respEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
	}
	return out
}

func postJSON(t *testing.T, s *testServer, path, body string) (int, map[string]any, []byte) {
	t.Helper()
	status, _, raw := s.do(t, "POST", path, body)
	var m map[string]any
	if status == http.StatusOK && !strings.Contains(body, `"stream":true`) {
		require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	}
	return status, m, raw
}

// TestResponsesText: a plain text response, blocking and streamed: the
// Response object's fields, the stream's events in order, the deltas
// joining to the blocking text, and the last event carrying the usage.
func TestResponsesText(t *testing.T) {
	s := newTestServer(t, nil, nil)
	status, r, raw := postJSON(t, s, "/v1/responses", `{"model":"fake","input":"hi","instructions":"Be brief.","max_output_tokens":6,"temperature":0}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	require.Equal(t, "response", r["object"])
	require.True(t, strings.HasPrefix(r["id"].(string), "resp_"))
	require.Equal(t, "incomplete", r["status"], "max_output_tokens cut it")
	require.Equal(t, map[string]any{"reason": "max_output_tokens"}, r["incomplete_details"])
	require.Equal(t, "Be brief.", r["instructions"])
	require.Equal(t, false, r["store"])
	require.EqualValues(t, 6, r["max_output_tokens"])
	out := r["output"].([]any)
	require.Len(t, out, 1)
	msg := out[0].(map[string]any)
	require.Equal(t, "message", msg["type"])
	require.Equal(t, "assistant", msg["role"])
	text := msg["content"].([]any)[0].(map[string]any)["text"].(string)
	require.Len(t, text, 6)
	u := r["usage"].(map[string]any)
	require.EqualValues(t, 6, u["output_tokens"])
	require.EqualValues(t, u["input_tokens"].(float64)+6, u["total_tokens"])
	// the instructions reached the template as a system message
	prompt := fakeTemplate{}
	want, _ := prompt.Render(json.RawMessage(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"bos_token":"<s>"}`))
	require.EqualValues(t, len(fakeTokenizer{}.Encode(want, false, true)), u["input_tokens"])

	status, _, raw = s.do(t, "POST", "/v1/responses", `{"model":"fake","input":"hi","instructions":"Be brief.","max_output_tokens":6,"temperature":0,"stream":true}`)
	require.Equal(t, http.StatusOK, status)
	evs := responseEvents(t, raw)
	names := eventNames(evs)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}, names[:4])
	require.Equal(t, []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}, names[len(names)-4:])
	var joined strings.Builder
	for _, e := range evs[4 : len(evs)-4] {
		require.Equal(t, "response.output_text.delta", e.name)
		joined.WriteString(e.data["delta"].(string))
	}
	require.Equal(t, text, joined.String())
	require.Equal(t, text, evs[len(evs)-4].data["text"])
	done := evs[len(evs)-1].data["response"].(map[string]any)
	require.Equal(t, "incomplete", done["status"])
	require.Equal(t, text, done["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
	require.EqualValues(t, 6, done["usage"].(map[string]any)["output_tokens"])
	require.Nil(t, evs[0].data["response"].(map[string]any)["usage"])
}

// TestResponsesFunctionCall: a model's tool call becomes a function_call
// output item; streamed, its arguments arrive in
// response.function_call_arguments.delta events that join to the item's
// arguments, and the next turn's function_call and function_call_output
// items reach the template as the assistant's call and the tool's answer.
func TestResponsesFunctionCall(t *testing.T) {
	script := `Let me check.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>`
	var last json.RawMessage
	s := newAgentServer(t, &agentEngine{script: script, chunk: 3}, hermesSource, &last)
	tools := `"tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	status, r, raw := postJSON(t, s, "/v1/responses", `{"model":"m","input":"Weather in Paris?",`+tools+`}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	out := r["output"].([]any)
	require.Len(t, out, 2)
	require.Equal(t, "Let me check.", out[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
	call := out[1].(map[string]any)
	require.Equal(t, "function_call", call["type"])
	require.Equal(t, "get_weather", call["name"])
	require.Equal(t, `{"city":"Paris"}`, call["arguments"])
	require.True(t, strings.HasPrefix(call["call_id"].(string), "call_"))
	require.Equal(t, "completed", r["status"])
	require.Contains(t, string(last), `"tools":[{"type":"function","function":{"name":"get_weather"`, "chat tools reach the template")

	_, _, raw = s.do(t, "POST", "/v1/responses", `{"model":"m","input":"Weather in Paris?","stream":true,`+tools+`}`)
	evs := responseEvents(t, raw)
	var args strings.Builder
	var added, doneArgs map[string]any
	for _, e := range evs {
		switch e.name {
		case "response.output_item.added":
			if item := e.data["item"].(map[string]any); item["type"] == "function_call" {
				added = item
			}
		case "response.function_call_arguments.delta":
			require.Equal(t, added["id"], e.data["item_id"])
			args.WriteString(e.data["delta"].(string))
		case "response.function_call_arguments.done":
			doneArgs = e.data
		}
	}
	require.NotNil(t, added)
	require.Equal(t, "get_weather", added["name"])
	require.Equal(t, `{"city":"Paris"}`, args.String())
	require.Equal(t, `{"city":"Paris"}`, doneArgs["arguments"])
	final := evs[len(evs)-1].data["response"].(map[string]any)["output"].([]any)
	require.Equal(t, `{"city":"Paris"}`, final[1].(map[string]any)["arguments"])

	// the next turn sends the call and its output back
	next := `{"model":"m",` + tools + `,"input":[{"role":"user","content":"Weather in Paris?"},` +
		`{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"sunny"}]}`
	status, _, raw = s.do(t, "POST", "/v1/responses", next)
	require.Equal(t, http.StatusOK, status, string(raw))
	var ctx struct {
		Messages []map[string]any `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(last, &ctx))
	require.Len(t, ctx.Messages, 3)
	require.Equal(t, "assistant", ctx.Messages[1]["role"])
	tc := ctx.Messages[1]["tool_calls"].([]any)[0].(map[string]any)
	require.Equal(t, "call_1", tc["id"])
	require.Equal(t, map[string]any{"city": "Paris"}, tc["function"].(map[string]any)["arguments"], "arguments reach the template as an object")
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, ctx.Messages[2])
}

// TestResponsesReasoning: a model's <think> block becomes a reasoning item,
// whose summary is its text when reasoning.summary is asked for; its tokens
// are counted in output_tokens_details.
func TestResponsesReasoning(t *testing.T) {
	s := newAgentServer(t, &agentEngine{script: "<think>Two and two.</think>Four.", chunk: 4}, "<think>", nil)
	for _, summary := range []bool{true, false} {
		body := `{"model":"m","input":"2+2?","reasoning":{"effort":"high"`
		if summary {
			body += `,"summary":"auto"`
		}
		body += `}}`
		status, r, raw := postJSON(t, s, "/v1/responses", body)
		require.Equal(t, http.StatusOK, status, string(raw))
		out := r["output"].([]any)
		require.Len(t, out, 2)
		rs := out[0].(map[string]any)
		require.Equal(t, "reasoning", rs["type"])
		if summary {
			require.Equal(t, []any{map[string]any{"type": "summary_text", "text": "Two and two."}}, rs["summary"])
		} else {
			require.Equal(t, []any{}, rs["summary"])
		}
		require.Equal(t, "Four.", out[1].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
		require.EqualValues(t, len("Two and two."), r["usage"].(map[string]any)["output_tokens_details"].(map[string]any)["reasoning_tokens"])
		require.Equal(t, "high", r["reasoning"].(map[string]any)["effort"])

		_, _, raw = s.do(t, "POST", "/v1/responses", strings.TrimSuffix(body, "}")+`,"stream":true}`)
		evs := responseEvents(t, raw)
		var thought, answer strings.Builder
		for _, e := range evs {
			switch e.name {
			case "response.reasoning_summary_text.delta":
				thought.WriteString(e.data["delta"].(string))
			case "response.output_text.delta":
				answer.WriteString(e.data["delta"].(string))
			}
		}
		if summary {
			require.Equal(t, "Two and two.", thought.String())
		} else {
			require.Empty(t, thought.String())
		}
		require.Equal(t, "Four.", answer.String())
		final := evs[len(evs)-1].data["response"].(map[string]any)
		require.Equal(t, r["output"].([]any)[0].(map[string]any)["summary"], final["output"].([]any)[0].(map[string]any)["summary"])
	}
}

// TestResponsesStructured: text.format json_schema constrains the output
// as response_format does.
func TestResponsesStructured(t *testing.T) {
	s := newAgentServer(t, &agentEngine{}, "", nil)
	body := `{"model":"m","input":"A person","max_output_tokens":400,"seed":3,"text":{"format":{"type":"json_schema","name":"person","strict":true,` +
		`"schema":{"type":"object","properties":{"age":{"type":"integer"}},"required":["age"],"additionalProperties":false}}}}`
	status, r, raw := postJSON(t, s, "/v1/responses", body)
	require.Equal(t, http.StatusOK, status, string(raw))
	text := r["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
	var v struct {
		Age *int `json:"age"`
	}
	require.NoError(t, json.Unmarshal([]byte(text), &v), text)
	require.NotNil(t, v.Age)
	require.Equal(t, "json_schema", r["text"].(map[string]any)["format"].(map[string]any)["type"])
}

// TestResponsesRefusals: what needs stored state, and what is not text or
// function tools, is a 400 naming the field.
func TestResponsesRefusals(t *testing.T) {
	s := newTestServer(t, nil, nil)
	for _, c := range []struct{ body, param, text string }{
		{`{"model":"fake","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", "stateless"},
		{`{"model":"fake","input":"hi","store":true}`, "store", "stateless"},
		{`{"model":"fake","input":"hi","conversation":"conv_1"}`, "conversation", "stateless"},
		{`{"model":"fake","input":"hi","background":true}`, "background", "not supported"},
		{`{"model":"fake"}`, "input", "input is required"},
		{`{"model":"fake","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content", "only text parts"},
		{`{"model":"fake","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0]", "stateless"},
		{`{"model":"fake","input":[{"role":"robot","content":"x"}]}`, "input[0].role", "must be user"},
		{`{"model":"fake","input":"hi","tools":[{"type":"web_search"}]}`, "tools", "only function tools"},
		{`{"model":"fake","input":"hi","text":{"format":{"type":"yaml"}}}`, "text.format", "not one of"},
		{`{"model":"fake","input":"hi","reasoning":{"summary":"long"}}`, "reasoning.summary", "auto, concise or detailed"},
		{`{"model":"fake","input":"hi","max_output_tokens":0}`, "max_output_tokens", "at least 1"},
	} {
		status, _, raw := s.do(t, "POST", "/v1/responses", c.body)
		require.Equal(t, http.StatusBadRequest, status, c.body)
		require.Contains(t, string(raw), `"param":"`+c.param+`"`, c.body)
		require.Contains(t, string(raw), c.text, c.body)
	}
	// store: false is the only store there is
	status, _, raw := s.do(t, "POST", "/v1/responses", `{"model":"fake","input":"hi","store":false,"max_output_tokens":2}`)
	require.Equal(t, http.StatusOK, status, string(raw))
}
