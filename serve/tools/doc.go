// Package tools turns a chat model's raw output into OpenAI's message parts:
// tool calls, in the syntax of the model's family (detected from its chat
// template), and reasoning text between <think> and </think>. Parsers come
// in a blocking form (Parse, SplitReasoning) and an incremental one for
// streaming (Parser, Reasoner) that holds back text that may still turn out
// to be a call marker or a think tag, and streams a call's arguments
// fragment by fragment once the call is certain. CallGrammar builds the constraint
// that makes a model emit a well-formed call for tool_choice "required" or
// a named function.
package tools

import "errors"

// Errors of the package.
var (
	// ErrBadTools: the tools or tool_choice of a request are malformed.
	ErrBadTools = errors.New("tools: invalid tools")
	// ErrNoSyntax: the model's family has no known tool-call syntax.
	ErrNoSyntax = errors.New("tools: the model's chat template has no known tool-call syntax")
)
