package cpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/internal/childtest"
	"github.com/memra-ai/memra/runtime"
)

// TestWeightFault: a model file that shrinks under a running backend makes
// its steps fail with ErrWeightFault (and runtime.ErrModelFile) instead of
// killing the process with SIGBUS, whether the fault comes on the stepping
// goroutine (one thread, one token) or in parallel's workers (two threads,
// a prompt). The body runs in a child process, so that a regression kills
// the child rather than this test binary.
func TestWeightFault(t *testing.T) {
	if !childtest.InChild("MEMRA_TEST_WEIGHT_FAULT") {
		out, _, err := childtest.Run(t, "MEMRA_TEST_WEIGHT_FAULT", 10*time.Minute)
		require.NoError(t, err, "child:\n%s", out)
		require.Contains(t, out, "--- PASS: TestWeightFault")
		return
	}
	raw, err := os.ReadFile("../../testdata/models/tinyllamas-stories-260k-f32.gguf")
	require.NoError(t, err)
	prompt := make([]int32, 48)
	for i := range prompt {
		prompt[i] = int32(260 + i)
	}
	for _, c := range []struct {
		name    string
		threads int
		prompt  []int32
	}{{"one thread", 1, []int32{1}}, {"workers", 2, prompt}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			require.NoError(t, os.WriteFile(path, raw, 0o644))
			hp, src := openGGUF(t, path)
			b, err := NewFromSource(hp, src, Options{Threads: c.threads})
			require.NoError(t, err)
			step := func(seq runtime.SeqID) error {
				_, err := b.Step(context.Background(), []runtime.SeqStep{{Seq: seq, Tokens: c.prompt, Logits: true}})
				return err
			}
			require.NoError(t, step(1))
			require.NoError(t, os.Truncate(path, int64(len(raw)/2)))
			err = step(2)
			require.ErrorIs(t, err, ErrWeightFault)
			require.ErrorIs(t, err, runtime.ErrModelFile)
			require.Contains(t, err.Error(), "tensor ")
			// The backend stays out of service without touching the file again.
			require.ErrorIs(t, step(3), ErrWeightFault)
		})
	}
}
