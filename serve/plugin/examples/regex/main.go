// Command regex is an example grammar plugin: the grammar source is a Go
// (RE2) regular expression that the whole output must match, compiled in
// the guest to a byte-level DFA whose token masks the SDK caches per DFA
// state. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o regex.wasm ./serve/plugin/examples/regex
//
// Requests then use "grammar": {"plugin": "regex", "source": "[a-z]+@[a-z]+\\.com"}.
package main

import "github.com/memra-ai/memra/serve/plugin/sdk"

func init() {
	sdk.RegisterGrammar(func(source string) (sdk.Grammar, error) { return compile(source) })
}

// main is never run in a reactor module; registration happens in init.
func main() {}
