package gguf

import (
	"os"
	"testing"
)

func BenchmarkParse(b *testing.B) {
	raw, _ := os.ReadFile(gpt2Path)
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}
