package grammar

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONObject(t *testing.T) {
	g := JSONObject()
	cases := []struct {
		in     string
		accept bool
	}{
		{`{}`, true},
		{`{"a":1}`, true},
		{`{"a": [1, 2.5, -3e10, true, false, null, "x"], "b": {"c": {}}}`, true},
		{"{\n  \"a\": \"\\u00e9\\n\",\n  \"b\": []\n}", true},
		{`{"é😀":"ok"}`, true},
		{`[]`, false},
		{` {}`, false},
		{`{} `, false},
		{`{"a":01}`, false},
		{`{"a":1,}`, false},
		{`{"a" 1}`, false},
		{`{'a':1}`, false},
		{"{\"a\":\"\x01\"}", false},
		{`{"a":"\x"}`, false},
		{"{  \"a\":1}", false}, // two spaces
		{"{\n" + strings.Repeat(" ", maxIndent) + "\"a\":1}", true}, // deepest indent
		{"{\n" + strings.Repeat(" ", maxIndent+1) + "\"a\":1}", false},
		{`{"a":1.}`, false},
		{`{"a":-}`, false},
		{`{"a":1e5}`, true},
	}
	for _, tc := range cases {
		require.Equal(t, tc.accept, g.Match([]byte(tc.in)), "%q", tc.in)
	}
}
