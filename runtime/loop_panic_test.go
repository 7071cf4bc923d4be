package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/internal/childtest"
)

// TestLoopPanicEndsProcess: a panic in the scheduler loop while it holds
// the engine's lock (here an embedding job without a context, which no
// caller can submit) ends the process with the panic's trace instead of
// hanging it on its own lock. The body runs in a child process, which the
// parent gives 60 seconds.
func TestLoopPanicEndsProcess(t *testing.T) {
	if !childtest.InChild("MEMRA_TEST_LOOP_PANIC") {
		out, hung, err := childtest.Run(t, "MEMRA_TEST_LOOP_PANIC", 60*time.Second)
		require.False(t, hung, "the child hung:\n%s", out)
		require.Error(t, err, "the child ended cleanly:\n%s", out)
		require.Contains(t, out, "nil pointer dereference")
		require.Contains(t, out, "embedStep", "the trace names where")
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
