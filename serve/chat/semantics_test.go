package chat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPythonSemantics checks the places where gonja alone differs from jinja2; every want
// below is what Python's jinja2 3.1 renders (or raises) for the same template and context.
func TestPythonSemantics(t *testing.T) {
	tests := []struct {
		name, src, ctx, want string
		wantErr              error
	}{
		{"negative index = -len", `{{ xs[-2] }}`, `{"xs":["a","b"]}`, "a", nil},
		{"negative index of split", `{{ "a</think>b".split("</think>")[-1] }}|{{ "ab".split("</think>")[-1] }}`, `{}`, "b|ab", nil},
		{"negative index out of range", `[{{ xs[-3] }}]`, `{"xs":["a","b"]}`, "[]", nil},
		{"variable negative index", `{% set i = 0 %}{{ xs[i - 1] }}`, `{"xs":["a","b"]}`, "b", nil},
		{"string index by character", `{{ s[1] }}{{ s[-1] }}`, `{"s":"héllo"}`, "éo", nil},
		{"chained negative index", `{{ xs[-1][-1] }}`, `{"xs":[["a","b"],["c","d"]]}`, "d", nil},
		{"negative index then method", `{{ xs[-1].upper() }}`, `{"xs":["a","b"]}`, "B", nil},
		{"dict key subscript", `{{ m["k"] }}{{ m.k }}`, `{"m":{"k":"v"}}`, "vv", nil},
		{"conditional in parens", `{{ "x" + (p if f else "") + "y" }}`, `{"p":"P","f":true}`, "xPy", nil},
		{"conditional in parens false", `{{ "x" + (p if f else "") + "y" }}`, `{"p":"P","f":false}`, "xy", nil},
		{"falsy branch value", `{{ (0 if f else 1) }}`, `{"f":true}`, "0", nil},
		{"nested conditional", `{{ ("a" if x == 1 else "b" if x == 2 else "c") }}`, `{"x":2}`, "b", nil},
		{"conditional call argument", `{{ "-".join(["a", ("b" if f else "c")]) }}`, `{"f":false}`, "a-c", nil},
		{"conditional keyword argument", `{{ xs|join(d=1) if false else xs|tojson(indent=(2 if f else none)) }}`, `{"xs":[1],"f":true}`, "[\n  1\n]", nil},
		{"str + list raises", `{{ "a" + xs }}`, `{"xs":[]}`, "", ErrRender},
		{"str + None raises", `{{ "a" + x }}`, `{"x":null}`, "", ErrRender},
		{"str + int raises", `{{ "a" + 1 }}`, `{}`, "", ErrRender},
		{"numbers add", `{{ 1 + 2 }} {{ 1 + 0.5 }} {{ xs + [3] }}`, `{"xs":[1,2]}`, "3 1.5 [1, 2, 3]", nil},
		{"in None raises", `{{ "a" in x }}`, `{"x":null}`, "", ErrRender},
		{"in undefined is false", `{{ "a" in nothing }}`, `{}`, "False", nil},
		{"not in", `{{ "a" not in "bab" }}{{ "z" not in ["a"] }}{{ "k" in m }}`, `{"m":{"k":1}}`, "FalseTrueTrue", nil},
		{"in set condition", `{% if "</think>" in c %}y{% endif %}`, `{"c":null}`, "", ErrRender},
		{"null prints None", `{{ x }}|{{ nothing }}`, `{"x":null}`, "None|", nil},
		{"null is defined", `{{ x is defined }}{{ nothing is defined }}{{ x is none }}`, `{"x":null}`, "TrueFalseTrue", nil},
		{"is false", `{{ 0 is false }}{{ false is false }}{{ nothing is false }}`, `{}`, "FalseTrueFalse", nil},
		{"list and dict repr", `{{ xs }}{{ m }}`, `{"xs":["it's",1.0,true,null],"m":{"a":"b"}}`, `["it's", 1.0, True, None]{'a': 'b'}`, nil},
		{"trim non-string", `{{ xs|trim }}`, `{"xs":[1]}`, "[1]", nil},
		{"items keep order", `{% for k, v in m|items %}{{ k }}={{ v }};{% endfor %}{% for k, v in m.items() %}{{ k }};{% endfor %}`, `{"m":{"z":1,"a":2,"m":3}}`, "z=1;a=2;m=3;z;a;m;", nil},
		{"keys and values keep order", `{{ m.keys()|list }}{{ m.values()|list }}`, `{"m":{"z":1,"a":2}}`, "['z', 'a'][1, 2]", nil},
		{"dict get default", `{{ m.get("a") }}{{ m.get("x", "d") }}{{ m.get("x") }}`, `{"m":{"a":"A"}}`, "AdNone", nil},
		{"tojson", `{{ m|tojson }}`, `{"m":{"b":[1,2.5,"é<>&'"],"a":null,"c":{}}}`, `{"b": [1, 2.5, "é<>&'"], "a": null, "c": {}}`, nil},
		{"tojson indent", `{{ m|tojson(indent=2) }}`, `{"m":{"b":[1],"a":{}}}`, "{\n  \"b\": [\n    1\n  ],\n  \"a\": {}\n}", nil},
		{"tojson sort and ascii", `{{ m|tojson(sort_keys=true, ensure_ascii=true) }}`, `{"m":{"b":"é😀","a":1}}`, `{"a": 1, "b": "\u00e9\ud83d\ude00"}`, nil},
		{"raise_exception", `{{ raise_exception("no " + "way") }}`, `{}`, "", ErrRaised},
		{"strftime_now", `{{ strftime_now("%d %b %Y %A %H:%M") }}`, `{}`, "26 Sep 2024 Thursday 12:00", nil},
		{"range", `{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}{% for i in range(5) %}{% if i == 1 %}{% break %}{% endif %}{{ i }}{% endfor %}`, `{}`, "[0, 1, 2][1, 3, 5][3, 2, 1]0", nil},
		{"huge range refused", `{% for i in range(1000000000) %}{% endfor %}`, `{}`, "", ErrRender},
		{"include refused", `{% include "/etc/passwd" %}`, `{}`, "", ErrRender},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := Compile(tc.src)
			require.NoError(t, err)
			tmpl.now = func() time.Time { return fixtureClock }
			got, err := tmpl.Render([]byte(tc.ctx))
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
