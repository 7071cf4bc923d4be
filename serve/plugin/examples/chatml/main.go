// Command chatml is an example template plugin: ChatML, rendered exactly as
// memra's built-in fallback template (<|im_start|>role\ncontent<|im_end|>\n
// per message, <|im_start|>assistant\n as the generation prompt; list
// content renders its text parts joined by "\n"). Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o chatml.wasm ./serve/plugin/examples/chatml
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/memra-ai/memra/serve/plugin/sdk"
)

func init() { sdk.RegisterTemplate(render) }

// main is never run in a reactor module; registration happens in init.
func main() {}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type context struct {
	Messages            []message       `json:"messages"`
	AddGenerationPrompt json.RawMessage `json:"add_generation_prompt"`
}

type part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

var errContext = errors.New("chatml: bad template context")

func render(raw []byte) (string, error) {
	var c context
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("%w: %v", errContext, err)
	}
	var b strings.Builder
	for i, m := range c.Messages {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteString("\n")
		if err := writeContent(&b, m.Content); err != nil {
			return "", fmt.Errorf("%w: message %d: %v", errContext, i, err)
		}
		b.WriteString("<|im_end|>\n")
	}
	if truthy(c.AddGenerationPrompt) {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}

// writeContent writes a string content as is and the text parts of a list
// joined by "\n"; anything else (null, objects, numbers) writes nothing.
func writeContent(b *strings.Builder, raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		b.WriteString(s)
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return err
		}
		first := true
		for _, pr := range parts {
			if t := bytes.TrimSpace(pr); len(t) == 0 || t[0] != '{' {
				continue
			}
			var p part
			if err := json.Unmarshal(pr, &p); err != nil {
				return err
			}
			if p.Type != "text" {
				continue
			}
			if !first {
				b.WriteString("\n")
			}
			b.WriteString(p.Text)
			first = false
		}
	}
	return nil
}

// truthy is Jinja truthiness of a JSON value.
func truthy(raw json.RawMessage) bool {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch x := v.(type) {
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return false
}
