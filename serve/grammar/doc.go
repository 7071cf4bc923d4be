// Package grammar enforces structured output while decoding: it compiles
// response_format json_object, JSON schemas and GBNF grammars to one
// byte-level pushdown automaton (Grammar), and turns automaton states into
// token masks over a tokenizer's vocabulary (Matcher), found by one walk
// over a token trie and cached per state.
//
// The supported JSON-schema subset, the GBNF syntax and the whitespace
// policy are described in docs/GRAMMAR.md.
package grammar

import "errors"

// Errors returned by the compilers and the matcher. A server answers
// ErrSyntax, ErrUnsupported, ErrInvalidSchema, ErrLeftRecursion, ErrEmpty
// and ErrTooLarge with 400.
var (
	// ErrSyntax: grammar text or a schema's JSON does not parse.
	ErrSyntax = errors.New("grammar: syntax error")
	// ErrUnsupported: a schema keyword or value outside the supported
	// subset; the message names the keyword and its JSON pointer.
	ErrUnsupported = errors.New("grammar: unsupported")
	// ErrInvalidSchema: a schema that is malformed or cannot be satisfied.
	ErrInvalidSchema = errors.New("grammar: invalid schema")
	// ErrLeftRecursion: a rule calls itself before consuming input.
	ErrLeftRecursion = errors.New("grammar: left recursion")
	// ErrEmpty: the grammar accepts no output at all.
	ErrEmpty = errors.New("grammar: the grammar accepts no output")
	// ErrTooLarge: the compiled automaton would exceed its size limits.
	ErrTooLarge = errors.New("grammar: grammar too large")
	// ErrRejected: a token the grammar does not allow was accepted.
	ErrRejected = errors.New("grammar: token not allowed")
)
