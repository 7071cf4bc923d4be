// Command testplugin is the npm suite's test-only plugin (run.sh builds it
// as a wasip1 reactor). Its template renders a prompt no built-in template
// would: "PLUGIN[" + each message as ROLE=CONTENT, upper-cased and joined
// by "|", + "]" — so a test can tell from the prompt tokens and the greedy
// output that the plugin rendered the chat. Its grammars are digit strings
// of at least 5 digits; "trap" panics, and "loop" spins past its deadline,
// once 3 digits have been written, so a request fails mid-generation.
package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/memra-ai/memra/serve/plugin/sdk"
)

func init() {
	sdk.RegisterTemplate(render)
	sdk.RegisterGrammar(compile)
}

func main() {}

func render(raw []byte) (string, error) {
	var c struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("testplugin: %v", err)
	}
	parts := make([]string, len(c.Messages))
	for i, m := range c.Messages {
		parts[i] = strings.ToUpper(m.Role + "=" + m.Content)
	}
	return "PLUGIN[" + strings.Join(parts, "|") + "]", nil
}

// digits is the automaton: the state counts digits written (capped at 5).
type digits struct{ mode string }

func compile(src string) (sdk.Grammar, error) {
	switch src {
	case "digits", "trap", "loop":
		return digits{src}, nil
	}
	return nil, fmt.Errorf("testplugin: unknown grammar %q (want digits, trap or loop)", src)
}

func (d digits) Start() int32 { return 0 }

func (d digits) Next(s int32, b byte) int32 {
	if s >= 3 {
		switch d.mode {
		case "trap":
			panic("testplugin: trap after 3 digits")
		case "loop":
			for {
			}
		}
	}
	if b < '0' || b > '9' {
		return -1
	}
	return min(s+1, 5)
}

func (d digits) CanEnd(s int32) bool { return s >= 5 }
