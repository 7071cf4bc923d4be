package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSchemaMatch(t *testing.T) {
	cases := []struct {
		name, schema string
		accept       []string
		reject       []string
	}{
		{"string", `{"type":"string"}`, []string{`""`, `"a\"b"`, `"é"`}, []string{`1`, `"a`, `a`}},
		{"integer", `{"type":"integer"}`, []string{`0`, `-12`, `123`}, []string{`1.5`, `01`, `-`, `"1"`}},
		{"number", `{"type":"number"}`, []string{`0`, `-1.25`, `3e-7`, `1E+2`}, []string{`.5`, `1.`, `+1`}},
		{"boolean and null", `{"type":["boolean","null"]}`, []string{`true`, `false`, `null`}, []string{`0`, `"true"`}},
		{"any", `{}`, []string{`1`, `"x"`, `[1,{"a":null}]`}, []string{``, `x`}},
		{"false", `{"type":"object","properties":{"a":false}}`, []string{`{}`}, []string{`{"a":1}`}},
		{"object order and required", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]}`,
			[]string{`{"b":"x"}`, `{"a":1,"b":"x"}`, `{"a":1, "b":"x", "c":true}`, `{"b":"x","c":false}`},
			[]string{`{}`, `{"a":1}`, `{"b":"x","a":1}`, `{"b":"x","d":1}`, `{,"b":"x"}`}},
		{"all optional", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}`,
			[]string{`{}`, `{"a":1}`, `{"b":2}`, `{"a":1,"b":2}`}, []string{`{"a":1,}`, `{,"b":2}`, `{"a":1"b":2}`}},
		{"additional true", `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true}`,
			[]string{`{"a":1,"x":[]}`, `{"zz":"q"}`, `{"ab":1}`, `{"":1}`}, []string{`{"a":"s"}`, `{"x":1,"a":1}`}},
		{"additional schema", `{"type":"object","additionalProperties":{"type":"integer"}}`,
			[]string{`{}`, `{"x":1,"y":2}`}, []string{`{"x":"1"}`}},
		{"required unknown", `{"type":"object","required":["k"]}`, []string{`{"k":[1]}`}, []string{`{}`}},
		{"nested", `{"type":"object","properties":{"p":{"type":"object","properties":{"q":{"type":"null"}},"required":["q"]}},"required":["p"]}`,
			[]string{`{"p":{"q":null}}`}, []string{`{"p":{}}`}},
		{"array items", `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`,
			[]string{`[1]`, `[1,2,3]`, `[1, 2]`}, []string{`[]`, `[1,2,3,4]`, `["a"]`, `[1,]`}},
		{"array unbounded", `{"type":"array","items":{"type":"boolean"}}`, []string{`[]`, `[true,false,true]`}, []string{`[1]`}},
		{"prefixItems", `{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false}`,
			[]string{`[]`, `[1]`, `[1,"a"]`}, []string{`["a"]`, `[1,"a",2]`}},
		{"prefixItems then items", `{"type":"array","prefixItems":[{"type":"integer"}],"items":{"type":"string"},"minItems":2}`,
			[]string{`[1,"a"]`, `[1,"a","b"]`}, []string{`[1]`, `[1,2]`}},
		{"enum", `{"enum":["red","green",1,null,{"a":[true]}]}`, []string{`"red"`, `1`, `null`, `{"a":[true]}`}, []string{`"blue"`, `2`}},
		{"enum typed", `{"type":"string","enum":["a",1]}`, []string{`"a"`}, []string{`1`}},
		{"const", `{"const":"x\"y"}`, []string{`"x\"y"`}, []string{`"xy"`}},
		{"anyOf", `{"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]}`, []string{`5`, `"a"`}, []string{`"ab"`, `true`}},
		{"oneOf", `{"oneOf":[{"type":"null"},{"type":"boolean"}]}`, []string{`null`, `true`}, []string{`0`}},
		{"allOf", `{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}}}]}`,
			[]string{`{"a":1}`, `{"a":1,"b":"x"}`}, []string{`{"b":"x"}`}},
		{"ref", `{"$defs":{"p":{"type":"integer","minimum":0}},"type":"array","items":{"$ref":"#/$defs/p"}}`,
			[]string{`[0,5]`}, []string{`[-1]`}},
		{"recursive ref", `{"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v"]}},"$ref":"#/$defs/t"}`,
			[]string{`{"v":1}`, `{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}`}, []string{`{"v":1,"kids":[{}]}`}},
		{"string lengths", `{"type":"string","minLength":2,"maxLength":3}`, []string{`"ab"`, `"a\nc"`, `"éé"`}, []string{`"a"`, `"abcd"`}},
		{"pattern anchored", `{"type":"string","pattern":"^[a-z]+-[0-9]{2}$"}`, []string{`"ab-12"`}, []string{`"ab-1"`, `"Ab-12"`, `"xab-123"`}},
		{"pattern unanchored", `{"type":"string","pattern":"ab"}`, []string{`"ab"`, `"xxabyy"`}, []string{`"a b"`}},
		{"pattern escapes", `{"type":"string","pattern":"^a\"\\\\b\\n$"}`, []string{`"a\"\\b\n"`}, []string{`"a\"\\bn"`}},
		{"pattern alternation", `{"type":"string","pattern":"^(?:cat|dog)s?$"}`, []string{`"cat"`, `"dogs"`}, []string{`"cow"`}},
		{"date", `{"type":"string","format":"date"}`, []string{`"2024-02-29"`, `"2023-12-31"`, `"2000-02-29"`}, []string{`"2023-02-29"`, `"1900-02-29"`, `"2023-04-31"`, `"2023-13-01"`}},
		{"time", `{"type":"string","format":"time"}`, []string{`"23:59:59Z"`, `"01:02:03.5+05:30"`}, []string{`"24:00:00Z"`, `"12:00:00"`}},
		{"date-time", `{"type":"string","format":"date-time"}`, []string{`"2024-01-02T03:04:05Z"`}, []string{`"2024-01-02 03:04:05Z"`}},
		{"uuid", `{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567e89b12d3a456426614174000"`}},
		{"email", `{"type":"string","format":"email"}`, []string{`"a.b@example.com"`}, []string{`"ab@example"`, `"@x.com"`}},
		{"integer range", `{"type":"integer","minimum":-15,"maximum":123}`, []string{`-15`, `-1`, `0`, `9`, `99`, `123`}, []string{`-16`, `124`, `200`, `1000`}},
		{"integer exclusive", `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10}`, []string{`1`, `9`}, []string{`0`, `10`, `-1`}},
		{"integer non-negative", `{"type":"integer","minimum":0}`, []string{`0`, `123456789`}, []string{`-1`}},
		{"number range", `{"type":"number","minimum":0,"maximum":1}`, []string{`0`, `1`, `0.5`, `0.25`}, []string{`-0.5`, `1.5`, `2`, `1e0`}},
		{"number negative", `{"type":"number","maximum":-1}`, []string{`-1`, `-2.5`, `-100`}, []string{`0`, `-0.5`}},
		{"annotations", `{"title":"t","description":"d","type":"boolean","default":true,"$schema":"x"}`, []string{`true`}, []string{`1`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FromJSONSchema([]byte(tc.schema))
			require.NoError(t, err)
			for _, s := range tc.accept {
				require.True(t, g.Match([]byte(s)), "should accept %s", s)
			}
			for _, s := range tc.reject {
				require.False(t, g.Match([]byte(s)), "should reject %s", s)
			}
		})
	}
}

func TestSchemaErrors(t *testing.T) {
	cases := []struct {
		name, schema string
		want         error
		contains     string
	}{
		{"unknown keyword", `{"type":"object","properties":{"a":{"type":"string","contentEncoding":"base64"}}}`, ErrUnsupported, `"/properties/a/contentEncoding"`},
		{"multipleOf", `{"type":"integer","multipleOf":3}`, ErrUnsupported, `multipleOf`},
		{"remote ref", `{"$ref":"http://x/y.json"}`, ErrUnsupported, `$ref`},
		{"bad pattern", `{"type":"string","pattern":"(?=a)"}`, ErrUnsupported, `pattern`},
		{"pattern inner anchor", `{"type":"string","pattern":"a^b"}`, ErrUnsupported, `pattern`},
		{"unknown format", `{"type":"string","format":"hostname"}`, ErrUnsupported, `format`},
		{"uniqueItems", `{"type":"array","uniqueItems":true}`, ErrUnsupported, `uniqueItems`},
		{"anyOf sibling", `{"type":"object","anyOf":[{"required":["a"]}]}`, ErrUnsupported, `type`},
		{"dangling ref", `{"$ref":"#/$defs/nope"}`, ErrInvalidSchema, `nope`},
		{"not a schema", `[1]`, ErrInvalidSchema, ``},
		{"bad json", `{"type":`, ErrSyntax, ``},
		{"self ref", `{"$ref":"#"}`, ErrEmpty, ``},
		{"self ref in object", `{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`, ErrEmpty, ``},
		{"min above max", `{"type":"string","minLength":3,"maxLength":1}`, ErrInvalidSchema, ``},
		{"impossible integer", `{"type":"integer","minimum":5,"maximum":4}`, ErrInvalidSchema, ``},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromJSONSchema([]byte(tc.schema))
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.contains)
		})
	}
}

func TestResponseFormat(t *testing.T) {
	g, err := FromResponseFormat([]byte(`{"type":"text"}`))
	require.NoError(t, err)
	require.Nil(t, g)
	g, err = FromResponseFormat([]byte(`{"type":"json_object"}`))
	require.NoError(t, err)
	require.True(t, g.Match([]byte(`{"a":1}`)))
	g, err = FromResponseFormat([]byte(`{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}}}`))
	require.NoError(t, err)
	require.True(t, g.Match([]byte(`{"n":3}`)))
	require.False(t, g.Match([]byte(`{}`)))
	_, err = FromResponseFormat([]byte(`{"type":"xml"}`))
	require.ErrorIs(t, err, ErrUnsupported)
}

func FuzzSchema(f *testing.F) {
	for _, s := range []string{
		`{}`, `true`, `{"type":"object","properties":{"a":{"type":"string","maxLength":3}},"required":["a"]}`,
		`{"$defs":{"n":{"anyOf":[{"type":"null"},{"type":"array","items":{"$ref":"#/$defs/n"}}]}},"$ref":"#/$defs/n"}`,
		`{"type":"integer","minimum":-7,"maximum":70}`, `{"type":"string","pattern":"^x+(y|z){2}$"}`,
		`{"allOf":[{"properties":{"a":{}}},{"required":["a"]}]}`, `{"enum":[1,"a",null]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		g, err := FromJSONSchema(schema)
		if err != nil {
			return
		}
		_ = g.Match(schema)
	})
}
