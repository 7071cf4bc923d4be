package codegen

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// TestMMAPipeArm: the pipelined arm's name, parse, K fallback, shared
// memory and place in the search space.
func TestMMAPipeArm(t *testing.T) {
	a := MMAArm{BM: 128, BN: 128, WarpsM: 2, WarpsN: 4, Pipe: 1}
	require.Equal(t, "m128_n128_w2x4_p1", a.String())
	for _, s := range []string{"m128_n128_w2x4_p1", "m64_n64_w2x2"} {
		b, err := ParseMMAArm(s)
		require.NoError(t, err, s)
		require.Equal(t, s, b.String())
	}
	for _, s := range []string{"m128_n128_w2x4_p2", "m64_n64_w2x2_p0", "m64_n64", "m64_n64_w3x2", "t256_r8"} {
		_, err := ParseMMAArm(s)
		require.ErrorIs(t, err, ErrUnsupported, s)
	}
	require.Equal(t, 1, a.ForK(4096).Pipe)
	require.Equal(t, 1, a.ForK(11008).Pipe)
	require.Equal(t, 0, a.ForK(2080).Pipe, "K of 65 units of 32")
	_, err := MatMulMMA(dtype.Q8_0, 256, 2080, false, a)
	require.ErrorIs(t, err, ErrUnsupported)

	k, err := MatMulMMA(dtype.Q4_K, 1000, 4096, true, a)
	require.NoError(t, err)
	g := k.Launch(Dims{Tokens: 300})
	require.Equal(t, [3]uint32{8, 3, 1}, g.Grid)
	require.Equal(t, [3]uint32{256, 1, 1}, g.Block)
	require.Equal(t, uint32(2*(128+128)*72*2), g.Shared)
	require.True(t, g.SharedOverDefault())
	require.Contains(t, k.Source, "extern __shared__")
	require.Contains(t, k.Source, "col < N", "ragged N guards the stores")

	// the space holds both pipes; a tunedb point without "pipe" is Pipe 0
	sp, err := SpaceByName("mma")
	require.NoError(t, err)
	require.NoError(t, sp.Valid(Point{"bm": 64, "bn": 64, "warps_m": 2, "warps_n": 2}))
	require.NoError(t, sp.Valid(a.Point()))
	require.Equal(t, a, MMAArmOf(a.Point()))
	pipes := map[int]int{}
	for _, b := range MMAArms() {
		pipes[b.Pipe]++
		b.Pipe = 1 - b.Pipe
		require.NoError(t, sp.Valid(b.Point()), "every tiling is valid with either pipe")
	}
	require.Equal(t, pipes[0], pipes[1])
	require.Len(t, sp.Arms(), len(MMAArms()), "both pipes are searched")
	require.Equal(t, 1, DefaultMMAArm.Pipe)
	require.Zero(t, DefaultMMAArm.ForK(2080).Pipe)
}
