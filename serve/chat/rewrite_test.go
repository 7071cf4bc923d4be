package chat

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRewriteSource(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"gemma 3 prefix",
			`{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}`,
			`{{ '<start_of_turn>' + role + '\n' + (((loop.first) and [first_user_prefix] or [""])[0]) }}`},
		{"no else", `{{ (a if b) }}`, `{{ (((b) and [a] or [none])[0]) }}`},
		{"call arguments", `{{ f(x, y if c else z) }}`, `{{ f(x, ((c) and [y] or [z])[0]) }}`},
		{"keyword argument", `{{ x|tojson(indent=2 if c else none) }}`, `{{ x|tojson(indent=((c) and [2] or [none])[0]) }}`},
		{"nested", `{{ (a if c else b if d else e) }}`, `{{ (((c) and [a] or [((d) and [b] or [e])[0]])[0]) }}`},
		{"top level untouched", `{{ a if c else b }}{% set x = a if c else b %}`, `{{ a if c else b }}{% set x = a if c else b %}`},
		{"if statement untouched", `{% if (a) %}x{% else %}y{% endif %}`, `{% if (a) %}x{% else %}y{% endif %}`},
		{"strings untouched", `{{ ("a if b else c") }}`, `{{ ("a if b else c") }}`},
		{"text and comments untouched", `(a if b else c){# (a if b else c) #}`, `(a if b else c){# (a if b else c) #}`},
		{"raw untouched", `{% raw %}{{ (a if b else c) }}{% endraw %}`, `{% raw %}{{ (a if b else c) }}{% endraw %}`},
		{"attribute named if", `{{ (x.if) }}`, `{{ (x.if) }}`},
		{"whitespace control", `{{- (a if c else b) -}}`, `{{- (((c) and [a] or [b])[0]) -}}`},
		{"unterminated", `{{ (a if c else b`, `{{ (a if c else b`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rewriteSource(tc.src))
		})
	}
}

// TestGemma3Prefix renders Gemma 3's turn header, which gonja alone cannot parse.
func TestGemma3Prefix(t *testing.T) {
	src := `{%- set first_user_prefix = "SYS\n\n" -%}
{%- for message in messages -%}
{{ '<start_of_turn>' + message['role'] + '\n' + (first_user_prefix if loop.first else "") }}
{{- message['content'] | trim + '<end_of_turn>\n' }}
{%- endfor -%}`
	tmpl, err := Compile(src)
	require.NoError(t, err)
	got, err := tmpl.Render([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"model","content":"b"}]}`))
	require.NoError(t, err)
	// What Python's jinja2 renders for the same template and context.
	require.Equal(t, "<start_of_turn>user\nSYS\n\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n", got)
}
