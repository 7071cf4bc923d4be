package tools

import "strings"

// Family is a tool-call syntax.
type Family int

// The tool-call syntaxes the parsers know.
const (
	// None: the template shows no tool-call syntax; output is plain content.
	None Family = iota
	// Hermes: Qwen 2.5/3, Hermes and others:
	// <tool_call>{"name": …, "arguments": …}</tool_call>, one block per call.
	Hermes
	// Llama3: Llama 3.1–3.3 JSON calls {"name": …, "parameters": …},
	// possibly after <|python_tag|>, several separated by ';'.
	Llama3
	// Mistral: [TOOL_CALLS] followed by a JSON array of {"name", "arguments"}.
	Mistral
)

// Markers of the syntaxes.
const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>"
	mistralTag  = "[TOOL_CALLS]"
)

// String names the family.
func (f Family) String() string {
	switch f {
	case Hermes:
		return "hermes"
	case Llama3:
		return "llama3"
	case Mistral:
		return "mistral"
	}
	return "none"
}

// Detect reads the family from a chat template's source.
func Detect(templateSource string) Family {
	switch {
	case strings.Contains(templateSource, hermesOpen):
		return Hermes
	case strings.Contains(templateSource, mistralTag):
		return Mistral
	case strings.Contains(templateSource, "<|start_header_id|>") &&
		(strings.Contains(templateSource, "parameters") || strings.Contains(templateSource, pythonTag)):
		return Llama3
	}
	return None
}

// Call is one parsed tool call.
type Call struct {
	Name      string
	Arguments string // a JSON text, compact
}
