package check

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// The live-length tuning case builds a Live 3 point's kernels with the
// default card's multiprocessors (the point carries none), and the
// space it is tuned over has Live 3 points.
func TestDecodeLiveTunesLive3(t *testing.T) {
	s, err := codegen.ShapeByName("tiny")
	require.NoError(t, err)
	c := DecodeLive(s.Name, s.Attn(dtype.F16), []int32{600, 33}, 4096, 1)
	ks, err := c.Kernels(codegen.DecodeArm{Threads: 128, Chunk: 128, Live: 3}.Point())
	require.NoError(t, err)
	require.Len(t, ks, 2)
	for _, k := range ks {
		require.Contains(t, k.Name, "_l3_m132")
	}
	n := 0
	for _, p := range c.Space().Arms() {
		if p["live"] == 3 {
			n++
		}
	}
	require.Positive(t, n)
}
