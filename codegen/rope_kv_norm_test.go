package codegen

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// TestRopeKVNormLanes mirrors RopeKVNorm's reduction over a head: where the
// kernel fits, the warps a thread reads its head's sums from (lane·WPL …
// lane·WPL+WPL−1) are exactly the warps of that head's lane, whose threads
// cover the head's pairs once; where it does not, RopeKVNorm refuses.
func TestRopeKVNormLanes(t *testing.T) {
	fits := 0
	for _, hd := range []int{32, 64, 96, 128, 256} {
		for _, threads := range []int{32, 64, 96, 128, 256, 512, 1024} {
			s := RopeShape{Heads: 8, HeadsKV: 2, HeadDim: hd, RopeDim: hd, Half: true, Cache: dtype.F16}
			arm := BlockArm{Threads: threads}
			pl := newRopePlan(s, threads)
			_, err := RopeKVNorm(s, 1e-6, arm)
			if !RopeKVNormFits(s, arm) {
				require.ErrorIs(t, err, ErrUnsupported, "hd %d, %d threads", hd, threads)
				continue
			}
			require.NoError(t, err)
			fits++
			wpl := min(pl.Pairs, threads) / 32
			covered := make([][]int, pl.Lanes)
			for l := range covered {
				covered[l] = make([]int, pl.Pairs)
			}
			for tid := range threads {
				lane, i0 := tid/pl.Pairs, tid%pl.Pairs
				require.Less(t, lane, pl.Lanes)
				require.Equal(t, lane, (tid/32)/wpl, "hd %d, %d threads: thread %d's warp is its lane's", hd, threads, tid)
				for j := range pl.PPT {
					if i := i0 + j*threads; i < pl.Pairs {
						covered[lane][i]++
					}
				}
			}
			for l := range covered {
				for i, c := range covered[l] {
					require.Equal(t, 1, c, "hd %d, %d threads: lane %d pair %d", hd, threads, l, i)
				}
			}
		}
	}
	require.Positive(t, fits)
}
