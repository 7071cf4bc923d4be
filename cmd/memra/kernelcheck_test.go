package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/cuda"
)

// kernel-check --compile-only honours --only: it compiles (and lists) only
// the kernels whose family or name contains it, and refuses a filter that
// matches none.
func TestKernelCheckCompileOnlyFilter(t *testing.T) {
	if _, err := cuda.LoadNVRTC(); err != nil {
		t.Skipf("NVRTC library not found (Debian: apt-get install libnvrtc11.2 from non-free): %v", err)
	}
	run := func(only string) (string, error) {
		cmd := newKernelCheckCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs([]string{"--compile-only", "--shapes", "tiny", "--types", "q8_0", "--only", only})
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("rmsnorm")
	require.NoError(t, err, out)
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "NVRTC ") || strings.HasPrefix(line, "family") {
			continue
		}
		rows = append(rows, line)
	}
	require.NotEmpty(t, rows, out)
	for _, r := range rows {
		require.True(t, strings.HasPrefix(r, "rmsnorm "), "a kernel --only rmsnorm does not select: %q", r)
	}
	_, err = run("no-such-kernel")
	require.ErrorContains(t, err, `no kernel of shape tiny matches --only "no-such-kernel"`)
}

// A kernel-check that a signal stops prints the rows it has and says how
// far it got (a run cut by a time limit keeps what it measured); without
// --no-progress its progress bar goes to stderr, never to the table.
func TestKernelCheckInterrupted(t *testing.T) {
	if _, err := cuda.LoadNVRTC(); err != nil {
		t.Skipf("NVRTC library not found (Debian: apt-get install libnvrtc11.2 from non-free): %v", err)
	}
	run := func(ctx context.Context) (string, string, error) {
		cmd := newKernelCheckCmd()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs([]string{"--compile-only", "--shapes", "tiny", "--types", "q8_0", "--only", "rmsnorm"})
		err := cmd.ExecuteContext(ctx)
		return out.String(), errOut.String(), err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, _, err := run(ctx)
	require.ErrorContains(t, err, "kernel-check: interrupted after 0 of ")
	require.Contains(t, out, "family", "the table's head is printed")
	require.NotContains(t, out, "rmsnorm ")
	out, errOut, err := run(context.Background())
	require.NoError(t, err)
	require.Contains(t, out, "rmsnorm ")
	require.NotContains(t, out, "█")
	require.Contains(t, errOut, "rmsnorm", "the progress bar names the kernel")
}
