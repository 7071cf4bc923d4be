package codegen

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// scatterPages lays out the caches of sequences of capacity positions
// each in pages of size rows scattered over a pool (pages of one
// sequence neither consecutive nor in order, spare pages between them):
// the page tables one after another in pages, sequence s's at base[s],
// and the pool's rows.
func scatterPages(r *rand.Rand, seqs, capacity, size int) (pages, base []int32, rows int) {
	per := ceilDiv(max(capacity, 1), size)
	pool := seqs*per + 3
	perm := r.Perm(pool)
	for s := range seqs {
		base = append(base, int32(len(pages)))
		for i := range per {
			pages = append(pages, int32(perm[s*per+i]))
		}
	}
	return pages, base, pool * size
}

// TestScatterPages: every sequence's positions land on distinct rows.
func TestScatterPages(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pages, base, rows := scatterPages(r, 3, 100, 16)
	seen := map[int]bool{}
	for s := range 3 {
		for j := range 100 {
			row := PageRow(pages, int(base[s]), j, 16)
			require.Less(t, row, rows)
			require.False(t, seen[row], "row %d twice", row)
			seen[row] = true
		}
	}
	require.Error(t, CheckPageSize(0))
	require.Error(t, CheckPageSize(24))
	require.Error(t, CheckPageSize(2*MaxPageSize))
	require.NoError(t, CheckPageSize(1))
	require.NoError(t, CheckPageSize(MaxPageSize))
}
