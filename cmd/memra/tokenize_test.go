package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// TestWriteTokenized runs the command's core on the llama-spm fixture and
// compares with the expected .out file line by line.
func TestWriteTokenized(t *testing.T) {
	f, err := gguf.Open("../../testdata/vocab/ggml-vocab-llama-spm.gguf")
	require.NoError(t, err)
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	require.NoError(t, err)
	inp, err := os.ReadFile("../../testdata/vocab/ggml-vocab-llama-spm.gguf.inp")
	require.NoError(t, err)
	want, err := os.ReadFile("../../testdata/vocab/ggml-vocab-llama-spm.gguf.out")
	require.NoError(t, err)
	inputs := splitVocabInputs(string(inp))
	var buf bytes.Buffer
	require.NoError(t, writeTokenized(&buf, tok, inputs, false, false))
	wantLines := strings.Split(string(want), "\n")
	gotLines := strings.Split(buf.String(), "\n")
	require.Len(t, gotLines, len(wantLines))
	for i := range wantLines {
		require.Equal(t, strings.TrimSpace(wantLines[i]), gotLines[i], "input %d", i)
	}
	buf.Reset()
	require.NoError(t, writeTokenized(&buf, tok, []string{"Hello"}, true, false))
	require.Equal(t, "1 15043\n", buf.String())
}
