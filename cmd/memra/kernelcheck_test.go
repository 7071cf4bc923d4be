package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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
		family := strings.Fields(r)[0] // rmsnorm, head_rmsnorm
		require.Contains(t, family, "rmsnorm", "a kernel --only rmsnorm does not select: %q", r)
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

// parallelEach runs every index once over its workers, at most workers at
// a time, and starts none once its context is done.
func TestParallelEach(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	running, most := 0, 0
	parallelEach(context.Background(), 50, 4, func(i int) {
		mu.Lock()
		seen[i]++
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
	})
	require.Len(t, seen, 50)
	for i, n := range seen {
		require.Equal(t, 1, n, "index %d", i)
	}
	require.LessOrEqual(t, most, 4)
	require.Greater(t, most, 1, "the calls ran together")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	parallelEach(ctx, 10, 2, func(int) { calls++ })
	require.Zero(t, calls)
	parallelEach(context.Background(), 0, 8, func(int) { t.Fatal("no index") })
}
