package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/cuda"
)

// execute runs a fresh command with args and returns its stdout and stderr.
func execute(t *testing.T, cmd interface {
	SetArgs([]string)
	ExecuteContext(context.Context) error
}, setOut func(out, errOut *bytes.Buffer), args ...string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	setOut(&out, &errOut)
	cmd.SetArgs(args)
	require.NoError(t, cmd.ExecuteContext(context.Background()), errOut.String())
	return out.String(), errOut.String()
}

// TestRunDefaultModelGreedy is the "done when" of memra run: with no model
// and no prompt, greedy decoding prints stories260K's documented story.
func TestRunDefaultModelGreedy(t *testing.T) {
	cmd := newRunCmd()
	out, errOut := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"--temperature", "0", "--print-ids", "--threads", "2")
	require.True(t, strings.HasPrefix(out, "Once upon a time, there was a little girl named Lily. "+
		"She loved to play outside in the park. One day, she saw a big, red ball."), out)
	m := regexp.MustCompile(`generated ids: ([0-9 ]+)`).FindStringSubmatch(errOut)
	require.NotNil(t, m, errOut)
	ids := strings.Fields(m[1])
	require.GreaterOrEqual(t, len(ids), 20)
	require.Equal(t, "403 407 261 378 432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337",
		strings.Join(ids[:20], " "))
	require.Regexp(t, `prompt: +1 tokens`, errOut)
	require.Regexp(t, `generation: +\d+ tokens in .* tok/s`, errOut)
}

func TestRunPromptAndLimits(t *testing.T) {
	cmd := newRunCmd()
	out, errOut := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"--prompt", "Once upon a time", "--max-tokens", "5", "--seed", "3", "--print-ids")
	require.NotEmpty(t, strings.TrimSpace(out))
	m := regexp.MustCompile(`generated ids: ([0-9 ]+)`).FindStringSubmatch(errOut)
	require.NotNil(t, m, errOut)
	require.Len(t, strings.Fields(m[1]), 5)
	require.Contains(t, errOut, "finish: length")

	// The same seed gives the same text.
	cmd2 := newRunCmd()
	out2, _ := execute(t, cmd2, func(o, e *bytes.Buffer) { cmd2.SetOut(o); cmd2.SetErr(e) },
		"--prompt", "Once upon a time", "--max-tokens", "5", "--seed", "3")
	require.Equal(t, out, out2)
}

func TestRunChat(t *testing.T) {
	cmd := newRunCmd()
	_, errOut := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"--chat", "--prompt", "Tell me a story", "--max-tokens", "4", "--temperature", "0")
	require.Regexp(t, `prompt: +\d\d+ tokens`, errOut) // the template adds tokens around the message
}

func TestBenchDefaultModel(t *testing.T) {
	cmd := newBenchCmd()
	out, _ := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"-p", "32", "-n", "8", "-r", "3", "--threads", "2")
	require.Contains(t, out, "pp32")
	require.Contains(t, out, "tg8@32")
	require.Contains(t, out, "F32")
	require.Regexp(t, `\| +cpu \|`, out)
	require.Contains(t, out, "292.80 K") // stories260K's parameters, embeddings included
	require.Regexp(t, `\| +\d+\.\d\d \| +\d+\.\d\d–\d+\.\d\d \|`, out)
}

// TestRunSpeculative: memra run with the n-gram drafter, and with the
// embedded model as its own draft model, prints the same greedy story as
// without; an unknown mode and a draft model without a vocabulary match
// are refused.
func TestRunSpeculative(t *testing.T) {
	run := func(args ...string) (string, string) {
		cmd := newRunCmd()
		return execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
			append([]string{"--temperature", "0", "--threads", "2", "-n", "80", "--ignore-eos"}, args...)...)
	}
	want, plain := run()
	require.NotContains(t, plain, "speculative:")
	accepted := regexp.MustCompile(`speculative: \d+ steps drafted \d+ tokens, ([1-9]\d*) accepted`)
	got, errOut := run("--spec", "ngram", "--spec-max-draft", "4")
	require.Equal(t, want, got)
	require.Regexp(t, accepted, errOut)
	got, errOut = run("--draft", "stories260K")
	require.Equal(t, want, got)
	require.Regexp(t, accepted, errOut)
	cmd := newRunCmd()
	cmd.SetArgs([]string{"--spec", "lookahead", "-n", "4"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	require.ErrorContains(t, err, "lookahead")
	cmd = newRunCmd()
	cmd.SetArgs([]string{"--spec", "ngram", "--spec-max-draft", "17", "-n", "4"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	require.ErrorContains(t, cmd.ExecuteContext(context.Background()), "--spec-max-draft 17")
}

// TestBenchSpec: bench --spec times plain and speculative decoding through
// the engine and reports the drafts' acceptance.
func TestBenchSpec(t *testing.T) {
	cmd := newBenchCmd()
	out, _ := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"--spec", "ngram", "-n", "60", "-r", "1", "--no-progress", "--threads", "2", "--device", "cpu")
	require.Regexp(t, `\| off \| \d+ \| 60 \| [0-9.]+ \|`, out)
	require.Regexp(t, `\| ngram \| \d+ \| 60 \| [0-9.]+ \| [0-9.–]+ \| [1-9]\d* \| [1-9]\d* \(`, out)
	require.Regexp(t, `speculative decoding: [0-9.]+× plain decode`, out)
}

// serve's --max-batch-tokens sizes the CUDA backend's launch sequence so
// an engine step runs in one pass; without it the caller's value stays.
func TestStepTokensReachTheBackend(t *testing.T) {
	o := gpuOptions{stepTokens: 2048}.cudaOptions(cuda.BackendOptions{PrefillTokens: 512})
	require.Equal(t, 2048, o.PrefillTokens)
	o = gpuOptions{}.cudaOptions(cuda.BackendOptions{PrefillTokens: 640})
	require.Equal(t, 640, o.PrefillTokens)
}

// TestBatchInvariantFlag: --batch-invariant alone is the f16 class,
// =int8 the int8 one, off none, no flag (or an empty value) the default
// class, and another value is refused by name.
func TestBatchInvariantFlag(t *testing.T) {
	for _, c := range []struct {
		v    string
		want cuda.Numerics
	}{{"", cuda.DefaultNumerics}, {"off", cuda.NumericsWidth}, {"false", cuda.NumericsWidth}, {"f16", cuda.NumericsF16}, {"true", cuda.NumericsF16},
		{"int8", cuda.NumericsInt8}, {"INT8", cuda.NumericsInt8}} {
		g := gpuOptions{batchInvariant: c.v}
		require.NoError(t, g.check(), c.v)
		o := g.cudaOptions(cuda.BackendOptions{})
		require.Equal(t, c.want, o.Numerics, c.v)
		require.Equal(t, c.want != cuda.NumericsWidth, o.Numerics.Invariant(), c.v)
	}
	err := gpuOptions{batchInvariant: "bf16"}.check()
	require.ErrorContains(t, err, `--batch-invariant "bf16"`)
	cmd := newRunCmd()
	f := cmd.Flags()
	v, err := f.GetString("batch-invariant")
	require.NoError(t, err)
	require.Equal(t, cuda.DefaultNumerics.String(), v, "no flag: the default class")
	require.NoError(t, f.Parse([]string{"--batch-invariant"}))
	v, err = f.GetString("batch-invariant")
	require.NoError(t, err)
	require.Equal(t, "f16", v, "the flag alone")
}
