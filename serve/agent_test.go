package serve

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

const userMsg = `"messages":[{"role":"user","content":"weather in Paris?"}]`

// chatBody builds a chat request for model m from extra members.
func chatBody(extra string) string {
	return `{"model":"m",` + userMsg + extra + `}`
}

// streamedMessage reassembles a streamed choice 0 the way the openai SDK
// does, checking that tool-call deltas have OpenAI's shape.
type streamedMessage struct {
	content, reasoning string
	calls              []map[string]string
	fragments          []int // argument deltas per call
	finish             string
}

func assemble(t *testing.T, chunks []any) streamedMessage {
	t.Helper()
	var m streamedMessage
	for _, c := range chunks {
		for _, ch := range c.(map[string]any)["choices"].([]any) {
			choice := ch.(map[string]any)
			if f, ok := choice["finish_reason"].(string); ok {
				m.finish = f
			}
			d := choice["delta"].(map[string]any)
			if s, ok := d["content"].(string); ok {
				m.content += s
			}
			if s, ok := d["reasoning_content"].(string); ok {
				m.reasoning += s
			}
			tcs, _ := d["tool_calls"].([]any)
			for _, x := range tcs {
				tc := x.(map[string]any)
				i := int(tc["index"].(float64))
				fn := tc["function"].(map[string]any)
				if i == len(m.calls) { // first delta of a call: id, type, name, empty arguments
					require.Regexp(t, `^call_[0-9a-f]{24}$`, tc["id"])
					require.Equal(t, "function", tc["type"])
					require.Equal(t, "", fn["arguments"])
					m.calls = append(m.calls, map[string]string{"name": fn["name"].(string)})
					m.fragments = append(m.fragments, 0)
					continue
				}
				require.Less(t, i, len(m.calls))
				require.NotContains(t, tc, "id")
				require.NotContains(t, fn, "name")
				require.NotEmpty(t, fn["arguments"])
				m.calls[i]["arguments"] += fn["arguments"].(string)
				m.fragments[i]++
			}
		}
	}
	return m
}

func TestToolCallParsing(t *testing.T) {
	tools := `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	for _, tc := range []struct {
		name, src, script string
		content           any // nil: null
		calls             []map[string]string
		finish            string
	}{
		{"hermes one", hermesSource, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", nil,
			[]map[string]string{{"name": "get_weather", "arguments": `{"city":"Paris"}`}}, "tool_calls"},
		{"hermes parallel", hermesSource, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>", nil,
			[]map[string]string{{"name": "get_weather", "arguments": `{"city":"Paris"}`}, {"name": "get_weather", "arguments": `{"city":"Rome"}`}}, "tool_calls"},
		{"hermes text and call", hermesSource, "Checking.\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>", "Checking.",
			[]map[string]string{{"name": "get_weather", "arguments": `{}`}}, "tool_calls"},
		{"hermes malformed", hermesSource, "<tool_call>{\"name\": \"get_weather\" \"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"get_weather\" \"arguments\": {}}</tool_call>", nil, "stop"},
		{"hermes malformed once streamed", hermesSource, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", </tool_call>", nil,
			[]map[string]string{{"name": "get_weather", "arguments": `{"city":"Paris"}`}}, "tool_calls"},
		{"hermes escapes and unicode", hermesSource, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"S\\u00e3o \\\"Paulo\\\" é 東京 😀\"}}</tool_call>", nil,
			[]map[string]string{{"name": "get_weather", "arguments": `{"city":"S\u00e3o \"Paulo\" é 東京 😀"}`}}, "tool_calls"},
		{"llama3 parallel", llamaSource, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Bergen\"}}", nil,
			[]map[string]string{{"name": "get_weather", "arguments": `{"city":"Oslo"}`}, {"name": "get_weather", "arguments": `{"city":"Bergen"}`}}, "tool_calls"},
		{"mistral parallel", mistralSource, "One moment.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}]", "One moment.",
			[]map[string]string{{"name": "get_weather", "arguments": `{"city":"Lyon"}`}, {"name": "get_weather", "arguments": `{"city":"Nice"}`}}, "tool_calls"},
		{"llama3", llamaSource, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", nil,
			[]map[string]string{{"name": "get_weather", "arguments": `{"city":"Oslo"}`}}, "tool_calls"},
		{"plain text", hermesSource, "It is sunny.", "It is sunny.", nil, "stop"},
	} {
		for _, chunk := range []int{1, 3, 1000} {
			t.Run(fmt.Sprintf("%s/chunk%d", tc.name, chunk), func(t *testing.T) {
				srv := newAgentServer(t, &agentEngine{script: tc.script, chunk: chunk}, tc.src, nil)
				status, _, raw := srv.do(t, "POST", "/v1/chat/completions", chatBody(tools))
				require.Equal(t, 200, status, string(raw))
				var resp struct {
					Choices []struct {
						Message struct {
							Content   any `json:"content"`
							ToolCalls []struct {
								ID       string            `json:"id"`
								Type     string            `json:"type"`
								Function map[string]string `json:"function"`
							} `json:"tool_calls"`
						} `json:"message"`
						FinishReason string `json:"finish_reason"`
					} `json:"choices"`
				}
				require.NoError(t, json.Unmarshal(raw, &resp))
				msg := resp.Choices[0].Message
				require.Equal(t, tc.content, msg.Content)
				require.Equal(t, tc.finish, resp.Choices[0].FinishReason)
				require.Len(t, msg.ToolCalls, len(tc.calls))
				for i, c := range msg.ToolCalls {
					require.Regexp(t, `^call_`, c.ID)
					require.Equal(t, "function", c.Type)
					require.Equal(t, tc.calls[i], c.Function)
				}

				status, _, raw = srv.do(t, "POST", "/v1/chat/completions", chatBody(tools+`,"stream":true`))
				require.Equal(t, 200, status)
				m := assemble(t, streamJSON(t, raw))
				want := ""
				if s, ok := tc.content.(string); ok {
					want = s
				}
				require.Equal(t, want, m.content)
				require.Equal(t, tc.finish, m.finish)
				if tc.calls == nil {
					require.Empty(t, m.calls)
				} else {
					require.Equal(t, tc.calls, m.calls)
				}
				if chunk == 1 {
					for i, n := range m.fragments {
						require.GreaterOrEqual(t, n, max(2, len(m.calls[i]["arguments"])/2), "call %d: arguments stream token by token", i)
					}
				}
			})
		}
	}
}

func TestToolChoiceNoneDropsTools(t *testing.T) {
	var ctx json.RawMessage
	srv := newAgentServer(t, &agentEngine{script: "ok", chunk: 1}, hermesSource, &ctx)
	tools := `,"tools":[{"type":"function","function":{"name":"f"}}]`
	status, _, raw := srv.do(t, "POST", "/v1/chat/completions", chatBody(tools))
	require.Equal(t, 200, status, string(raw))
	require.Contains(t, string(ctx), `"tools":[`)
	status, _, raw = srv.do(t, "POST", "/v1/chat/completions", chatBody(tools+`,"tool_choice":"none"`))
	require.Equal(t, 200, status, string(raw))
	require.NotContains(t, string(ctx), `"tools"`)
}

func TestToolCallArgumentsReachTemplate(t *testing.T) {
	var ctx json.RawMessage
	srv := newAgentServer(t, &agentEngine{script: "ok", chunk: 1}, hermesSource, &ctx)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"b\":1,\"a\":2}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"42"}]}`
	status, _, raw := srv.do(t, "POST", "/v1/chat/completions", body)
	require.Equal(t, 200, status, string(raw))
	require.Contains(t, string(ctx), `"arguments":{"b":1,"a":2}`, "arguments become an object, key order kept")
	require.Contains(t, string(ctx), `"tool_call_id":"call_1"`)
	require.Contains(t, string(ctx), `"content":""`, "null content of a tool-call message becomes empty")
}

func TestReasoning(t *testing.T) {
	for _, tc := range []struct {
		name, src, extra, script string
		reasoning, content       string
	}{
		{"think block", hermesSource, "", "<think>\nstep one\n</think>\n\nanswer", "step one\n", "answer"},
		{"prompt opens think", hermesSource, `,"chat_template_kwargs":{"enable_thinking":true}`, "deep thought</think>42", "deep thought", "42"},
		{"no thinking template", `plain`, "", "<think>x</think>y", "", "<think>x</think>y"},
	} {
		for _, chunk := range []int{1, 2, 5, 1000} {
			t.Run(fmt.Sprintf("%s/chunk%d", tc.name, chunk), func(t *testing.T) {
				srv := newAgentServer(t, &agentEngine{script: tc.script, chunk: chunk}, tc.src, nil)
				status, _, raw := srv.do(t, "POST", "/v1/chat/completions", chatBody(tc.extra))
				require.Equal(t, 200, status, string(raw))
				var resp struct {
					Choices []struct {
						Message map[string]any `json:"message"`
					} `json:"choices"`
				}
				require.NoError(t, json.Unmarshal(raw, &resp))
				msg := resp.Choices[0].Message
				require.Equal(t, tc.content, msg["content"])
				if tc.reasoning == "" {
					require.NotContains(t, msg, "reasoning_content")
				} else {
					require.Equal(t, tc.reasoning, msg["reasoning_content"])
				}
				status, _, raw = srv.do(t, "POST", "/v1/chat/completions", chatBody(tc.extra+`,"stream":true`))
				require.Equal(t, 200, status)
				m := assemble(t, streamJSON(t, raw))
				require.Equal(t, tc.reasoning, m.reasoning)
				require.Equal(t, tc.content, m.content)
			})
		}
	}
}

func TestReasoningEffort(t *testing.T) {
	var ctx json.RawMessage
	srv := newAgentServer(t, &agentEngine{script: "ok", chunk: 1}, hermesSource, &ctx)
	for effort, want := range map[string]string{"none": "false", "minimal": "false", "low": "true", "high": "true"} {
		status, _, raw := srv.do(t, "POST", "/v1/chat/completions", chatBody(`,"reasoning_effort":"`+effort+`"`))
		require.Equal(t, 200, status, string(raw))
		require.Contains(t, string(ctx), `"enable_thinking":`+want, effort)
	}
	// chat_template_kwargs come after, so they win.
	status, _, _ := srv.do(t, "POST", "/v1/chat/completions",
		chatBody(`,"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true,"x":1}`))
	require.Equal(t, 200, status)
	require.Regexp(t, `"enable_thinking":false,"enable_thinking":true,"x":1`, string(ctx))
	// A template without the switch gets none.
	srv = newAgentServer(t, &agentEngine{script: "ok", chunk: 1}, "<think>", &ctx)
	status, _, _ = srv.do(t, "POST", "/v1/chat/completions", chatBody(`,"reasoning_effort":"none"`))
	require.Equal(t, 200, status)
	require.NotContains(t, string(ctx), "enable_thinking")
}

// compileSchema compiles a JSON schema for validation.
func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", doc))
	s, err := c.Compile("schema.json")
	require.NoError(t, err)
	return s
}

func validates(t *testing.T, s *jsonschema.Schema, text string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	require.NoError(t, err, "output is not JSON: %q", text)
	require.NoError(t, s.Validate(inst), "output %s", text)
}

const weatherParams = `{"type":"object","properties":{"city":{"type":"string","maxLength":12},` +
	`"unit":{"enum":["c","f"]},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","unit"],"additionalProperties":false}`

// TestToolChoiceConstrained samples uniformly through the mask: every call
// must parse and its arguments validate against the function's schema.
func TestToolChoiceConstrained(t *testing.T) {
	tools := `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + weatherParams + `}},` +
		`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}}}]`
	schemas := map[string]*jsonschema.Schema{"get_weather": compileSchema(t, weatherParams),
		"get_time": compileSchema(t, `{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}`)}
	for _, src := range []string{hermesSource, llamaSource} {
		srv := newAgentServer(t, &agentEngine{}, src, nil)
		for _, choice := range []string{`"required"`, `{"type":"function","function":{"name":"get_weather"}}`} {
			names := map[string]int{}
			for seed := 0; seed < 25; seed++ {
				body := chatBody(tools + `,"tool_choice":` + choice + fmt.Sprintf(`,"seed":%d,"max_tokens":2000`, seed))
				status, _, raw := srv.do(t, "POST", "/v1/chat/completions", body)
				require.Equal(t, 200, status, string(raw))
				var resp struct {
					Choices []struct {
						Message struct {
							Content   *string `json:"content"`
							ToolCalls []struct {
								Function struct{ Name, Arguments string } `json:"function"`
							} `json:"tool_calls"`
						} `json:"message"`
						FinishReason string `json:"finish_reason"`
					} `json:"choices"`
				}
				require.NoError(t, json.Unmarshal(raw, &resp))
				ch := resp.Choices[0]
				require.Equal(t, "tool_calls", ch.FinishReason, string(raw))
				require.Nil(t, ch.Message.Content)
				require.Len(t, ch.Message.ToolCalls, 1)
				fn := ch.Message.ToolCalls[0].Function
				names[fn.Name]++
				validates(t, schemas[fn.Name], fn.Arguments)
			}
			if strings.HasPrefix(choice, "{") {
				require.Equal(t, map[string]int{"get_weather": 25}, names)
			}
		}
	}
}

// TestResponseFormatEnforced: json_schema and json_object outputs always
// validate under uniform sampling through the mask.
func TestResponseFormatEnforced(t *testing.T) {
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":120},` +
		`"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},"ok":{"type":"boolean"}},"required":["name","age","ok"]}`
	val := compileSchema(t, schema)
	obj := compileSchema(t, `{"type":"object"}`)
	srv := newAgentServer(t, &agentEngine{}, "plain", nil)
	finished := 0
	for seed := 0; seed < 30; seed++ {
		for _, rf := range []string{`{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":` + schema + `}}`, `{"type":"json_object"}`} {
			body := chatBody(`,"response_format":` + rf + fmt.Sprintf(`,"seed":%d,"max_tokens":400`, seed))
			status, _, raw := srv.do(t, "POST", "/v1/chat/completions", body)
			require.Equal(t, 200, status, string(raw))
			var resp struct {
				Choices []struct {
					Message      struct{ Content string } `json:"message"`
					FinishReason string                   `json:"finish_reason"`
				} `json:"choices"`
			}
			require.NoError(t, json.Unmarshal(raw, &resp))
			ch := resp.Choices[0]
			if ch.FinishReason == "length" {
				continue
			}
			finished++
			if strings.Contains(rf, "json_object") {
				validates(t, obj, ch.Message.Content)
			} else {
				validates(t, val, ch.Message.Content)
			}
		}
	}
	require.Greater(t, finished, 30, "most outputs must finish")
}

func TestGrammarField(t *testing.T) {
	srv := newAgentServer(t, &agentEngine{}, "plain", nil)
	for _, tc := range []struct{ gbnf, re string }{
		{`root ::= expr
expr ::= term (("+" | "-") term)*
term ::= [0-9]{1,3} | "(" expr ")"`, `^[0-9+\-()]+$`},
		{`root ::= field ("," field){2} "\n"
field ::= [a-z]{1,6}`, `^[a-z]{1,6},[a-z]{1,6},[a-z]{1,6}\n$`},
		{`root ::= "names: " name (", " name)*
name ::= [A-Z] [a-z]{1,8}`, `^names: [A-Z][a-z]{1,8}(, [A-Z][a-z]{1,8})*$`},
	} {
		re := regexp.MustCompile(tc.re)
		for seed := 0; seed < 10; seed++ {
			q, _ := json.Marshal(tc.gbnf)
			body := fmt.Sprintf(`{"model":"m","prompt":"x","grammar":%s,"seed":%d,"max_tokens":300}`, q, seed)
			status, _, raw := srv.do(t, "POST", "/v1/completions", body)
			require.Equal(t, 200, status, string(raw))
			var resp struct {
				Choices []struct {
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			require.NoError(t, json.Unmarshal(raw, &resp))
			if resp.Choices[0].FinishReason == "stop" {
				require.Regexp(t, re, resp.Choices[0].Text)
			}
		}
	}
}

// TestToolSchemaErrors: a tool's unsupported parameters keyword is a 400
// naming it when the call is enforced.
func TestToolSchemaErrors(t *testing.T) {
	srv := newAgentServer(t, &agentEngine{}, hermesSource, nil)
	tools := `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}}}]`
	status, _, raw := srv.do(t, "POST", "/v1/chat/completions", chatBody(tools+`,"tool_choice":"required"`))
	require.Equal(t, 400, status)
	require.Contains(t, string(raw), "multipleOf")
	status, _, raw = srv.do(t, "POST", "/v1/chat/completions", chatBody(tools+`,"tool_choice":"required","response_format":{"type":"json_object"}`))
	require.Equal(t, 400, status)
	require.Contains(t, string(raw), "cannot be combined")
}

// TestToolSchemaInvalid: a parameters schema that is not a valid JSON
// schema is a 400 naming the tool whatever the tool_choice; one that is
// valid but beyond the enforced subset is refused only where the call is
// enforced.
func TestToolSchemaInvalid(t *testing.T) {
	srv := newAgentServer(t, &agentEngine{}, hermesSource, nil)
	tool := func(params string) string {
		return `,"tools":[{"type":"function","function":{"name":"ok","parameters":{"type":"object"}}},` +
			`{"type":"function","function":{"name":"bad","parameters":` + params + `}}]`
	}
	for _, choice := range []string{``, `,"tool_choice":"auto"`, `,"tool_choice":"none"`, `,"tool_choice":"required"`,
		`,"tool_choice":{"type":"function","function":{"name":"ok"}}`} {
		for _, params := range []string{`{"type":5}`, `{"type":"strin"}`, `{"type":"object","properties":[1]}`,
			`{"type":"object","required":"x"}`} {
			status, _, raw := srv.do(t, "POST", "/v1/chat/completions", chatBody(tool(params)+choice))
			require.Equal(t, 400, status, "%s %s: %s", params, choice, raw)
			require.Contains(t, string(raw), `"param":"tools"`)
			require.Contains(t, string(raw), `tools[1].function.parameters (function \"bad\") is not a valid JSON schema`)
		}
		status, _, raw := srv.do(t, "POST", "/v1/chat/completions",
			chatBody(tool(`{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}`)+choice))
		if strings.Contains(choice, "required") {
			require.Equal(t, 400, status, "%s: %s", choice, raw)
		} else {
			require.Equal(t, 200, status, "%s: %s", choice, raw)
		}
	}
}
