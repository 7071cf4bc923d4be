package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/format/gguf"
)

const storiesGGUF = "../../testdata/models/tinyllamas-stories-260k-f32.gguf"

// rewriteStories writes the stories fixture with key set to v (when key is
// not empty; added when absent) and without the tensor drop (when not empty).
func rewriteStories(t *testing.T, key string, v any, drop string) []byte {
	t.Helper()
	raw, err := os.ReadFile(storiesGGUF)
	require.NoError(t, err)
	f, err := gguf.Parse(raw)
	require.NoError(t, err)
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	if key != "" {
		w.AddKV(key, v)
	}
	for _, kv := range f.KVs {
		if kv.Key != key && kv.Key != gguf.KeyAlignment {
			w.AddKV(kv.Key, kv.Value)
		}
	}
	tensors := slices.DeleteFunc(slices.Clone(f.Tensors), func(ti gguf.TensorInfo) bool { return ti.Name == drop })
	for _, ti := range tensors {
		w.AddTensor(ti.Name, ti.Type, ti.Dims, int64(ti.Bytes()))
	}
	require.NoError(t, w.WriteHeader())
	for i := range tensors {
		data, err := f.TensorData(&tensors[i])
		require.NoError(t, err)
		require.NoError(t, w.WriteTensorData(tensors[i].Name, data))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// execNoPanic runs cmd with args and returns its error; a panic fails the
// test with its stack, a run past the deadline fails it as a hang.
func execNoPanic(t *testing.T, cmd *cobra.Command, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("PANIC: %v\n%s", r, debug.Stack())
			}
		}()
		done <- cmd.ExecuteContext(ctx)
	}()
	select {
	case err := <-done:
		require.NotContains(t, fmt.Sprint(err), "PANIC:")
		return err
	case <-time.After(25 * time.Second):
		t.Fatalf("memra %v hung", args)
		return nil
	}
}

// TestCommandsRejectBadModels runs run, inspect, tokenize, bench and serve
// over broken models: each must fail with an error naming the file and
// the problem, without panicking or hanging.
func TestCommandsRejectBadModels(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(storiesGGUF)
	require.NoError(t, err)
	files := map[string]struct {
		data []byte
		msg  string
	}{
		"cut-header.gguf":   {raw[:10], "truncated"},
		"cut-meta.gguf":     {raw[:7000], "truncated"},
		"cut-data.gguf":     {raw[:len(raw)/2], "past end of file"},
		"cut-one.gguf":      {raw[:len(raw)-1], "past end of file"},
		"empty.gguf":        {nil, "neither a GGUF file"},
		"text.txt":          {[]byte("not a model\n"), "neither a GGUF file"},
		"hidden.gguf":       {rewriteStories(t, "llama.embedding_length", uint32(96), ""), "llama.embedding_length = 96"},
		"heads.gguf":        {rewriteStories(t, "llama.attention.head_count", uint32(7), ""), "llama.attention.head_count"},
		"layers0.gguf":      {rewriteStories(t, "llama.block_count", uint32(0), ""), "llama.block_count"},
		"layers-huge.gguf":  {rewriteStories(t, "llama.block_count", uint32(1<<30), ""), "llama.block_count"},
		"context-huge.gguf": {rewriteStories(t, "llama.context_length", uint64(1)<<40, ""), "llama.context_length"},
		"vocab.gguf":        {rewriteStories(t, "llama.vocab_size", uint32(1000), ""), "llama.vocab_size"},
		"arch.gguf":         {rewriteStories(t, "general.architecture", "mamba", ""), "mamba"},
		"bos.gguf":          {rewriteStories(t, "tokenizer.ggml.bos_token_id", uint32(99999), ""), "bos_token_id"},
		"eos.gguf":          {rewriteStories(t, "tokenizer.ggml.eos_token_id", uint32(99999), ""), "eos_token_id"},
	}
	for name, f := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), f.data, 0o644))
	}
	// A missing tensor loads (a model may omit what it does not use) but
	// must not build: only the commands that build a backend, and inspect,
	// report it.
	missing := filepath.Join(dir, "missing.gguf")
	require.NoError(t, os.WriteFile(missing, rewriteStories(t, "", nil, "blk.3.ffn_up.weight"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "emptydir"), 0o755))

	type input struct{ path, msg string }
	inputs := []input{
		{filepath.Join(dir, "emptydir"), "no config.json"},
		{filepath.Join(dir, "nope.gguf"), "no such file"},
	}
	for name, f := range files {
		inputs = append(inputs, input{filepath.Join(dir, name), f.msg})
	}
	commands := []struct {
		name  string
		new   func() *cobra.Command
		args  []string
		build bool // builds a backend, so a missing tensor is an error
	}{
		{"run", newRunCmd, []string{"-n", "2", "--device", "cpu", "-t", "1"}, true},
		{"inspect", newInspectCmd, nil, true},
		{"tokenize", newTokenizeCmd, []string{"hello"}, false},
		{"bench", newBenchCmd, []string{"-p", "4", "-n", "2", "-r", "1", "--no-progress", "--device", "cpu", "-t", "1"}, true},
		{"serve", newServeCmd, []string{"--device", "cpu", "--port", "0", "-t", "1"}, true},
	}
	for _, c := range commands {
		for _, in := range inputs {
			t.Run(c.name+"/"+filepath.Base(in.path), func(t *testing.T) {
				err := execNoPanic(t, c.new(), append([]string{in.path}, c.args...)...)
				require.Error(t, err)
				require.ErrorContains(t, err, filepath.Base(in.path))
				require.ErrorContains(t, err, in.msg)
			})
		}
		if c.build {
			t.Run(c.name+"/missing-tensor", func(t *testing.T) {
				err := execNoPanic(t, c.new(), append([]string{missing}, c.args...)...)
				require.Error(t, err)
				require.ErrorContains(t, err, "missing.gguf")
				require.ErrorContains(t, err, "blk.3.ffn_up.weight")
			})
		}
	}
}
