package codegen

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FlashTiles cuts each run of a step's tokens (a sequence, or the padding)
// every rows tokens, and FlashGrid launches at least that many blocks.
func TestFlashTiles(t *testing.T) {
	tiles := make([]int32, 8)
	// a 5-token prompt chunk, a decode, two padding rows; tiles of 2
	n := FlashTiles(tiles, []int32{1, 1, 1, 1, 1, 3, 0, 0}, 2)
	require.Equal(t, 5, n)
	require.Equal(t, []int32{0, 2, 4, 5, 6, -1, -1, -1}, tiles)

	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		rows := 16 * (1 + r.IntN(8))
		seqs := 1 + r.IntN(64)
		var base []int32
		for s := range seqs {
			n := 1
			if r.IntN(3) == 0 {
				n = 1 + r.IntN(300)
			}
			for range n {
				base = append(base, int32(s+1))
			}
		}
		for range r.IntN(20) {
			base = append(base, 0) // padding
		}
		tiles := make([]int32, len(base))
		n := FlashTiles(tiles, base, rows)
		require.LessOrEqual(t, n, FlashGrid(len(base), seqs, rows))
		// every token lies in exactly one tile: the first of its run's tiles at or before it, at most rows back
		for i := range n {
			start := int(tiles[i])
			end := len(base)
			if i+1 < n {
				end = int(tiles[i+1])
			}
			require.LessOrEqual(t, end-start, rows)
			for j := start; j < end; j++ {
				require.Equal(t, base[start], base[j], "tile %d holds one run", i)
			}
			if start > 0 && base[start-1] == base[start] {
				require.Equal(t, int32(start-rows), tiles[i-1], "a run's tiles are whole but its last")
			}
		}
		for i := n; i < len(tiles); i++ {
			require.Equal(t, int32(-1), tiles[i])
		}
	}
}
