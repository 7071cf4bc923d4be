package codegen

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestLowerStages lowers both stages of a two-stage split for both step
// classes: the first ends in a hidden_out buffer live to the last launch,
// the second starts from a hidden_in buffer live from the first, and only
// the last has logits.
func TestLowerStages(t *testing.T) {
	w := synthTensors(smallQwen3, dtype.Q4_K, dtype.Q4_K)
	for _, opts := range []LowerOptions{
		{Class: Decode, MaxSeqs: 8, Context: 256, Cache: dtype.F16, Argmax: true},
		{Class: Prefill, MaxTokens: 128, MaxSeqs: 4, Context: 256, Cache: dtype.F16},
	} {
		t.Run(fmt.Sprint(opts.Class), func(t *testing.T) {
			s1, err := arch.BuildStage(smallQwen3, w, 0, 1)
			require.NoError(t, err)
			require.NoError(t, ir.RunPasses(s1, ir.Passes))
			s2, err := arch.BuildStage(smallQwen3, w, 1, 2)
			require.NoError(t, err)
			require.NoError(t, ir.RunPasses(s2, ir.Passes))
			p1, err := Lower(s1, opts)
			require.NoError(t, err)
			p2, err := Lower(s2, opts)
			require.NoError(t, err)

			require.Equal(t, -1, p1.Logits)
			require.Equal(t, -1, p1.HiddenIn)
			require.GreaterOrEqual(t, p1.HiddenOut, 0)
			out := p1.Buffers.Buffers[p1.HiddenOut]
			require.Equal(t, len(p1.Launches)-1, out.Last)
			require.Equal(t, smallQwen3.Embedding, out.Width)
			require.Contains(t, p1.String(), fmt.Sprintf("hidden_out b%d", p1.HiddenOut))

			require.GreaterOrEqual(t, p2.Logits, 0)
			require.Equal(t, -1, p2.HiddenOut)
			require.GreaterOrEqual(t, p2.HiddenIn, 0)
			in := p2.Buffers.Buffers[p2.HiddenIn]
			require.Equal(t, 0, in.First)
			require.Equal(t, smallQwen3.Embedding, in.Width)
			for _, l := range p2.Launches {
				for _, a := range l.Args {
					require.False(t, a.Kind == ArgInput && a.Index == int(InTokens), "stage 2 reads no tokens")
				}
			}
			require.NoError(t, p1.Buffers.Check())
			require.NoError(t, p2.Buffers.Check())
		})
	}
}
