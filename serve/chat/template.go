package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

var (
	// ErrCompile means a template source could not be parsed.
	ErrCompile = errors.New("chat: template does not compile")
	// ErrContext means the render context is not a JSON object.
	ErrContext = errors.New("chat: bad render context")
	// ErrRender means rendering failed (an undefined operation, a bad filter call, …).
	ErrRender = errors.New("chat: template render failed")
	// ErrRaised means the template called raise_exception; the error text carries its message.
	ErrRaised = errors.New("chat: template raised an exception")
	// ErrType is a Python TypeError inside a template (str + list, "x" in None, …); it is
	// reported wrapped in ErrRender.
	ErrType = errors.New("TypeError")
	// ErrPanic means the template engine panicked on this input; the panic is turned into
	// this error so one bad template or request cannot take the server down.
	ErrPanic = errors.New("chat: template engine panicked")
)

// Features are the capabilities a template's source shows.
type Features struct {
	// Tools: the template renders tool definitions (it reads "tools").
	Tools bool
	// Thinking: the template knows reasoning blocks (it reads "enable_thinking" or
	// "reasoning_content", or writes "<think>").
	Thinking bool
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	source   string
	tmpl     *exec.Template
	features Features
	// now is the clock of strftime_now; tests fix it.
	now func() time.Time
}

var (
	environment = newEnvironment()
	toolsRe     = regexp.MustCompile(`\btools\b`)
	thinkingRe  = regexp.MustCompile(`\benable_thinking\b|\breasoning_content\b|<think>`)
)

// Compile parses a chat template source (Jinja, as in tokenizer_config.json's chat_template).
// Compile once per model and render many times.
func Compile(source string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("%w: while compiling: %v", ErrPanic, r)
		}
	}()
	loader := sourceLoader{source: rewriteSource(source)}
	tmpl, err := exec.NewTemplate(rootName, newConfig(), loader, environment)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCompile, trimSource(err))
	}
	rewriteTree(tmpl.Root())
	return &Template{
		source: source,
		tmpl:   tmpl,
		features: Features{
			Tools:    toolsRe.MatchString(source),
			Thinking: thinkingRe.MatchString(source),
		},
		now: time.Now,
	}, nil
}

// Source returns the template source as given to Compile.
func (t *Template) Source() string { return t.source }

// Features reports what the template supports, detected from its source.
func (t *Template) Features() Features { return t.features }

// Render renders the template. ctx is the JSON object the template sees: messages, tools
// (null when there are none), add_generation_prompt, bos_token, eos_token and any extra
// keyword (enable_thinking, …), objects keeping their key order. Names ctx does not give are
// undefined.
func (t *Template) Render(ctx json.RawMessage) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: while rendering: %v", ErrPanic, r)
		}
	}()
	pairs, err := decodeContext(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrContext, err)
	}
	var raised *string
	data := exec.NewContext(map[string]any{
		"raise_exception": func(msg *exec.Value) (any, error) {
			m := msg.String()
			if raised == nil {
				raised = &m
			}
			return nil, fmt.Errorf("%w: %s", ErrRaised, m)
		},
		"strftime_now": func(format string) string {
			return strftime(format, t.now())
		},
	})
	for _, p := range pairs {
		data.Set(p.Key.String(), p.Value.Interface())
	}
	out, err = t.tmpl.ExecuteToString(data)
	if raised != nil {
		return "", fmt.Errorf("%w: %s", ErrRaised, *raised)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrRender, err)
	}
	return out, nil
}

// trimSource drops the template source gonja copies into its parse errors.
func trimSource(err error) string {
	msg := err.Error()
	const cut = 400
	if len(msg) > cut {
		msg = msg[:cut] + "…"
	}
	return msg
}

// fallbackSource is the ChatML template of Fallback.
const fallbackSource = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' -}}
{%- if message['content'] is string -%}
{{- message['content'] -}}
{%- elif message['content'] is iterable -%}
{%- set ns = namespace(first=true) -%}
{%- for part in message['content'] -%}
{%- if part is mapping and part['type'] == 'text' -%}
{{- ('' if ns.first else '\n') + part['text'] -}}
{%- set ns.first = false -%}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}
`

var fallback = mustCompile(fallbackSource)

func mustCompile(src string) *Template {
	t, err := Compile(src)
	if err != nil {
		panic("BUG: built-in template does not compile: " + err.Error())
	}
	return t
}

// Fallback returns the template used for a model that ships none: ChatML
// (<|im_start|>role\ncontent<|im_end|>\n per message, <|im_start|>assistant\n as the
// generation prompt); multi-part content renders as its text parts joined with "\n".
func Fallback() *Template { return fallback }

// rootName names the template source for gonja's loader.
const rootName = "chat_template"

// sourceLoader serves the one template source and refuses every other name, so that
// {% include %}, {% import %} and {% extends %} in a model's template cannot read files.
type sourceLoader struct{ source string }

var _ loaders.Loader = sourceLoader{}

// Read returns the source for the root name and an error for any other.
func (l sourceLoader) Read(name string) (io.Reader, error) {
	if name != rootName {
		return nil, fmt.Errorf("%w: templates cannot load %q", ErrRender, name)
	}
	return strings.NewReader(l.source), nil
}

// Resolve accepts only the root name.
func (l sourceLoader) Resolve(name string) (string, error) {
	if name != rootName {
		return "", fmt.Errorf("%w: templates cannot load %q", ErrRender, name)
	}
	return name, nil
}

// Inherit returns the same loader.
func (l sourceLoader) Inherit(string) (loaders.Loader, error) { return l, nil }
