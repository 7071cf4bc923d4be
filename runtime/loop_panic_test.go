package runtime

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoopPanicEndsProcess: a panic in the scheduler loop while it holds
// the engine's lock (here an embedding job without a context, which no
// caller can submit) ends the process with the panic's trace instead of
// hanging it on its own lock. The body runs in a child process, which the
// parent gives 60 seconds.
func TestLoopPanicEndsProcess(t *testing.T) {
	if os.Getenv("MEMRA_TEST_LOOP_PANIC") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLoopPanicEndsProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "MEMRA_TEST_LOOP_PANIC=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, ctx.Err(), "the child hung:\n%s", out)
		require.Error(t, err, "the child ended cleanly:\n%s", out)
		require.Contains(t, string(out), "nil pointer dereference")
		require.Contains(t, string(out), "embedStep", "the trace names where")
		return
	}
	b := newFakeBackend(16, 64, hashLogits(16))
	e := newTestEngine(b, hashVocab(16), EngineConfig{MaxRunning: 1})
	e.mu.Lock()
	e.embeds.jobs = append(e.embeds.jobs, &embedJob{})
	e.mu.Unlock()
	e.poke()
	time.Sleep(50 * time.Second) // the loop's panic ends the process first
}
