package tools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type streamCase struct {
	name    string
	f       Family
	text    string
	content string
	calls   []Call
}

// streamCases are outputs whose calls stream: each call's arguments must
// arrive in several fragments when the output comes byte by byte.
var streamCases = []streamCase{
	{"hermes", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2.5e3, -0.5], \"ok\": true}}\n</tool_call>", "",
		[]Call{{"get_weather", `{"city":"Paris","days":[1,2.5e3,-0.5],"ok":true}`}}},
	{"hermes escapes and unicode", Hermes, "<tool_call>{\"name\": \"say\", \"arguments\": {\"text\": \"a \\\"q\\\" \\\\ \\u00e9t\\u00E9 \\n, é中😀 } ]\", \"k\": null}}</tool_call>", "",
		[]Call{{"say", `{"text":"a \"q\" \\ \u00e9t\u00E9 \n, é中😀 } ]","k":null}`}}},
	{"hermes parallel", Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"y\": {\"z\": []}}}\n</tool_call>", "",
		[]Call{{"a", `{"x":1}`}, {"b", `{"y":{"z":[]}}`}}},
	{"hermes text before", Hermes, "Let me check <tool> tags.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"x y\"}}\n</tool_call>\nDone.", "Let me check <tool> tags.Done.",
		[]Call{{"a", `{"q":"x y"}`}}},
	{"hermes extra brace", Hermes, "<tool_call>{\"name\": \"a\", \"arguments\": {\"q\": 12}}}</tool_call> after", "after",
		[]Call{{"a", `{"q":12}`}}},
	{"hermes cut by the end", Hermes, "<tool_call>{\"name\": \"a\", \"arguments\": {\"q\": \"abc\\u00", "",
		[]Call{{"a", `{"q":"abc\u0000"}`}}},
	{"llama3", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"c\"}}", "",
		[]Call{{"get_weather", `{"city":"Oslo","unit":"c"}`}}},
	{"llama3 python tag parallel", Llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"p\": \"q\"}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}", "",
		[]Call{{"a", `{"p":"q"}`}, {"b", `{"n":2}`}}},
	{"llama3 text after", Llama3, "{\"name\": \"a\", \"parameters\": {\"p\": 1}} Then I wait.", "Then I wait.",
		[]Call{{"a", `{"p":1}`}}},
	{"mistral", Mistral, "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}, {\"name\": \"b\", \"arguments\": {\"l\": [true, false]}}]", "Sure.",
		[]Call{{"a", `{"k":"v"}`}, {"b", `{"l":[true,false]}`}}},
}

// fragments counts the argument fragments of each call.
func fragments(deltas []Delta) []int {
	var n []int
	for _, d := range deltas {
		switch {
		case d.Name != "":
			n = append(n, 0)
		case d.Args != "":
			n[len(n)-1]++
		}
	}
	return n
}

// TestStreamedArguments: whatever the chunking, the fragments of each call
// join to what the blocking Parse gives; fed byte by byte, every call's
// arguments come in several fragments, and no fragment splits a rune.
func TestStreamedArguments(t *testing.T) {
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			content, calls := Parse(tc.f, tc.text)
			require.Equal(t, tc.content, content)
			require.Equal(t, tc.calls, calls)
			for _, c := range calls {
				require.True(t, json.Valid([]byte(c.Arguments)))
			}
			for size := 1; size <= 9; size++ {
				deltas := feed(tc.f, tc.text, size)
				c, cs := assemble(t, deltas)
				require.Equal(t, tc.content, c, "size %d", size)
				require.Equal(t, tc.calls, cs, "size %d", size)
				for _, d := range deltas {
					require.True(t, strings.ToValidUTF8(d.Args, "") == d.Args, "fragment %q splits a rune", d.Args)
				}
			}
			for i, n := range fragments(feed(tc.f, tc.text, 1)) {
				require.Greater(t, n, 2, "call %d streams in %d fragments", i, n)
			}
		})
	}
}

// TestCallStartsWhenCertain: nothing is reported while the text may still
// not be a call; the call starts at the '{' of its arguments, and each
// later byte of them is reported with it.
func TestCallStartsWhenCertain(t *testing.T) {
	for _, tc := range []struct {
		f      Family
		before string // nothing reported after any prefix of it
		open   string
	}{
		{Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", "{"},
		{Llama3, "  <|python_tag|>{\"name\": \"get_weather\", \"parameters\":", " {"},
		{Mistral, "[TOOL_CALLS] [ {\"name\": \"get_weather\", \"arguments\":", "{"},
	} {
		p := NewParser(tc.f)
		for i := range len(tc.before) {
			require.Empty(t, p.Add(tc.before[i:i+1]), "%s: %q", tc.f, tc.before[:i+1])
		}
		require.Equal(t, []Delta{{Name: "get_weather"}, {Args: "{"}}, p.Add(tc.open), tc.f.String())
		require.Equal(t, []Delta{{Args: `"city"`}}, p.Add(` "city"`))
		require.Equal(t, []Delta{{Args: `:`}}, p.Add(` : `))
		require.Equal(t, []Delta{{Args: `"`}}, p.Add(`"`))
		require.Equal(t, []Delta{{Args: `P a`}}, p.Add(`P a`))
		require.Equal(t, []Delta{{Args: `"`}}, p.Add(`" ,`), "the comma waits for what follows it")
		require.Equal(t, []Delta{{Args: `}`}}, p.Add(`}`), "a comma before '}' is never reported")
	}
}

// TestBestEffortClose: a streamed call cut by the end of the output, or by
// text that breaks its JSON, gets arguments closed into valid JSON. Inside
// a string, </tool_call> is string text, so those cases end the output.
func TestBestEffortClose(t *testing.T) {
	const head = `<tool_call>{"name": "f", "arguments": `
	for _, tc := range []struct{ tail, want string }{
		{`{`, `{}`},
		{`{"ke`, `{"ke":null}`},
		{`{"key"`, `{"key":null}`},
		{`{"key" :`, `{"key":null}`},
		{`{"key": "va\`, `{"key":"va\\"}`},
		{`{"key": "\u12`, `{"key":"\u1200"}`},
		{`{"key": -`, `{"key":-0}`},
		{`{"key": 1.`, `{"key":1.0}`},
		{`{"key": 1e+`, `{"key":1e+0}`},
		{`{"key": 12`, `{"key":12}`},
		{`{"key": tr`, `{"key":true}`},
		{`{"key": [1, {"a": nu`, `{"key":[1,{"a":null}]}`},
		{`{"key": [1, `, `{"key":[1]}`},
		{`{"key": 1, `, `{"key":1}`},
		{`{"key": 1, }`, `{"key":1}`},
		{`{"key": 1 2}`, `{"key":1}`},
		{`{"key": "é` + "\xe4\xb8", `{"key":"é` + "\xe4\xb8" + `"}`},
	} {
		inString := strings.Count(tc.tail, `"`)%2 == 1
		for _, f := range []bool{false, true} {
			if f && inString {
				continue
			}
			text := head + tc.tail
			if f {
				text += "</tool_call>after"
			}
			content, calls := Parse(Hermes, text)
			require.Len(t, calls, 1, text)
			require.Equal(t, tc.want, calls[0].Arguments, text)
			require.Equal(t, map[bool]string{false: "", true: "after"}[f], content, text)
			if tc.tail != `{"key": "é`+"\xe4\xb8" {
				require.True(t, json.Valid([]byte(calls[0].Arguments)), calls[0].Arguments)
			}
		}
	}
}

// TestNotStreamed: calls whose arguments are not an object, or whose name
// follows them, are reported whole once complete.
func TestNotStreamed(t *testing.T) {
	for _, tc := range []struct {
		f    Family
		text string
		want Call
	}{
		{Hermes, `<tool_call>{"name": "a", "arguments": "{\"q\": 1}"}</tool_call>`, Call{"a", `{"q":1}`}},
		{Hermes, `<tool_call>{"arguments": {"q": 1}, "name": "a"}</tool_call>`, Call{"a", `{"q":1}`}},
		{Llama3, `{"parameters": {"q": 1}, "name": "a"}`, Call{"a", `{"q":1}`}},
	} {
		deltas := feed(tc.f, tc.text, 1)
		require.Equal(t, []Delta{{Name: tc.want.Name}, {Args: tc.want.Arguments}}, deltas, tc.text)
	}
}
