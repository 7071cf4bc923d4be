package cpu

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTeam runs jobs of many sizes on a team, back to back and after pauses
// longer than the spin window (so that the workers park and are woken),
// and requires every index to be covered exactly once, worker indices to
// stay below the team's size, and stop to end the goroutines.
func TestTeam(t *testing.T) {
	for _, workers := range []int{1, 2, 5} {
		tm := newTeam(workers)
		for job := range 300 {
			n := 1 + job*7%97
			chunk := 1 + job%5
			seen := make([]atomic.Int32, n)
			var bad atomic.Bool
			tm.run(n, chunk, func(w, lo, hi int) {
				if w < 0 || w > workers || hi-lo > chunk {
					bad.Store(true)
				}
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			require.False(t, bad.Load())
			for i := range seen {
				require.Equal(t, int32(1), seen[i].Load(), "job %d index %d", job, i)
			}
			if job%50 == 49 {
				time.Sleep(2 * spinWindow)
			}
		}
		tm.stop()
		tm.stop() // idempotent
	}
}
