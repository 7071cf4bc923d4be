// Package builtin embeds memra's default model, so that `memra run` and
// `memra serve` work with no model file: stories260K, karpathy's 260K-parameter
// llama trained on TinyStories (GGUF, f32, 1.2 MB; provenance in
// testdata/PROVENANCE.md).
package builtin

import (
	_ "embed"

	"github.com/memra-ai/memra/runtime/load"
)

// Name is the name the embedded model answers to on the command line.
const Name = "stories260K"

//go:embed stories260K.gguf
var gguf []byte

// Open returns the embedded model. Its tensors are slices of the binary's
// read-only data; Close is a no-op for it.
func Open() (*load.Model, error) {
	return load.OpenGGUFBytes(Name, gguf)
}

// Bytes returns the embedded GGUF file (read-only: do not modify it).
func Bytes() []byte { return gguf }
