package tools

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Family
	}{
		{"qwen2.5-7b-instruct.jinja", Hermes},
		{"qwen3-0.6b.jinja", Hermes},
		{"llama-3.2-3b-instruct.jinja", Llama3},
		{"llama-3.3-70b-instruct.jinja", Llama3},
		{"gemma-2-2b-it.jinja", None},
	} {
		src, err := os.ReadFile("../../testdata/chat-templates/" + tc.file)
		require.NoError(t, err)
		require.Equal(t, tc.want, Detect(string(src)), tc.file)
	}
	require.Equal(t, Mistral, Detect(`{{ '[TOOL_CALLS]' + tool_calls|tojson }}`))
}

type parseCase struct {
	name    string
	f       Family
	text    string
	content string
	calls   []Call
}

var parseCases = []parseCase{
	{"plain", Hermes, "Hello there.", "Hello there.", nil},
	{"hermes one", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
		[]Call{{"get_weather", `{"city":"Paris"}`}}},
	{"hermes parallel", Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>", "",
		[]Call{{"a", `{}`}, {"b", `{"x":[1,2]}`}}},
	{"hermes text then call", Hermes, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": 1}}\n</tool_call>", "Let me check.",
		[]Call{{"a", `{"q":1}`}}},
	{"hermes string arguments", Hermes, "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>", "",
		[]Call{{"a", `{"q":1}`}}},
	{"hermes unclosed but whole", Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", "", []Call{{"a", `{}`}}},
	{"hermes malformed before the arguments", Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\" {}}\n</tool_call>", "<tool_call>\n{\"name\": \"a\", \"arguments\" {}}\n</tool_call>", nil},
	{"hermes malformed after the arguments began", Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": [1,\n</tool_call>tail", "tail",
		[]Call{{"a", `{"q":[1]}`}}},
	{"hermes no name", Hermes, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil},
	{"hermes partial marker at end", Hermes, "a <tool", "a <tool", nil},
	{"llama json", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", "",
		[]Call{{"get_weather", `{"city":"Oslo"}`}}},
	{"llama python tag", Llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}", "",
		[]Call{{"a", `{}`}, {"b", `{"n":2}`}}},
	{"llama text", Llama3, "The answer is {not json}", "The answer is {not json}", nil},
	{"llama malformed json", Llama3, "{\"name\": \"a\", \"parameters\": ", "{\"name\": \"a\", \"parameters\": ", nil},
	{"llama json not a call", Llama3, "{\"answer\": 42}", "{\"answer\": 42}", nil},
	{"mistral", Mistral, "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}, {\"name\": \"b\", \"arguments\": {}}]", "Sure.",
		[]Call{{"a", `{"k":"v"}`}, {"b", `{}`}}},
	{"mistral malformed", Mistral, "[TOOL_CALLS][{\"name\": 3}]", "[TOOL_CALLS][{\"name\": 3}]", nil},
	{"none family", None, "<tool_call>{\"name\": \"a\"}</tool_call>", "<tool_call>{\"name\": \"a\"}</tool_call>", nil},
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			content, calls := Parse(tc.f, tc.text)
			require.Equal(t, tc.content, content)
			require.Equal(t, tc.calls, calls)
		})
	}
}

// assemble joins deltas into content and calls as a client does, checking
// that each delta sets one field and that arguments follow a call start.
func assemble(t testing.TB, deltas []Delta) (string, []Call) {
	var content strings.Builder
	var calls []Call
	for _, d := range deltas {
		set := 0
		for _, s := range []string{d.Content, d.Name, d.Args} {
			if s != "" {
				set++
			}
		}
		require.Equal(t, 1, set, "a delta sets exactly one field: %+v", d)
		switch {
		case d.Name != "":
			calls = append(calls, Call{Name: d.Name})
		case d.Args != "":
			require.NotEmpty(t, calls, "arguments before any call")
			calls[len(calls)-1].Arguments += d.Args
		default:
			content.WriteString(d.Content)
		}
	}
	return content.String(), calls
}

// feed runs text through a new Parser in pieces of size bytes.
func feed(f Family, text string, size int) []Delta {
	p := NewParser(f)
	var out []Delta
	for i := 0; i < len(text); i += size {
		out = append(out, p.Add(text[i:min(i+size, len(text))])...)
	}
	return append(out, p.Flush()...)
}

// TestParserChunks feeds every case in pieces of every size: the result
// must not depend on where the chunks break.
func TestParserChunks(t *testing.T) {
	for _, tc := range parseCases {
		for size := 1; size <= 7; size++ {
			content, calls := assemble(t, feed(tc.f, tc.text, size))
			require.NotContains(t, content, hermesOpen+"\n{\"name\": \"a\", \"arguments\": {}}",
				"%s: a whole call leaked as content", tc.name)
			require.Equal(t, tc.content, content, "%s size %d", tc.name, size)
			require.Equal(t, tc.calls, calls, "%s size %d", tc.name, size)
		}
	}
}

// TestParserHoldsMarker: content streams at once, except a possible marker
// start; the call starts as soon as its name and arguments' '{' are read.
func TestParserHoldsMarker(t *testing.T) {
	p := NewParser(Hermes)
	require.Equal(t, []Delta{{Content: "Hi"}}, p.Add("Hi <tool"))
	require.Empty(t, p.Add("_call>{\"name\":"))
	require.Empty(t, p.Add("\"f\",\"arguments\":"))
	require.Equal(t, []Delta{{Name: "f"}, {Args: "{"}}, p.Add(" {"))
	require.Equal(t, []Delta{{Args: "}"}}, p.Add("}}</tool_call>"))
	require.Empty(t, p.Flush())
	require.Equal(t, 1, p.Calls())
}

func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(int(tc.f), tc.text, 3)
	}
	for _, tc := range streamCases {
		f.Add(int(tc.f), tc.text, 2)
	}
	f.Fuzz(func(t *testing.T, fam int, text string, size int) {
		fm := Family(((fam % 4) + 4) % 4)
		if size < 1 {
			size = 1
		}
		wantContent, wantCalls := Parse(fm, text)
		content, calls := assemble(t, feed(fm, text, size))
		require.Equal(t, wantContent, content)
		require.Equal(t, wantCalls, calls)
		for _, c := range calls {
			require.True(t, json.Valid([]byte(c.Arguments)), "arguments %q", c.Arguments)
		}
	})
}
