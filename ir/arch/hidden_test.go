package arch

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestBuildHiddenDropsTheHead checks the headless graph of each family: the
// whole model's nodes up to its head, then hidden_out of the residual
// stream of every token; every weight but the final norm and the output
// projection; the final norm reported for the host to apply.
func TestBuildHiddenDropsTheHead(t *testing.T) {
	for _, hp := range []ir.HParams{stories, qwen2, qwen3} {
		w := synth(hp, dtype.F32)
		whole, err := Build(hp, w)
		require.NoError(t, err)
		g, fn, err := BuildHidden(hp, w)
		require.NoError(t, err, hp.Name)
		require.Equal(t, "output_norm.weight", fn.Weight)
		require.InDelta(t, float64(hp.RMSEps), fn.Eps, 1e-12)

		res := g.Result()
		require.Equal(t, ir.OpHiddenOut, res.Op)
		require.Equal(t, ir.Shape{ir.T, ir.Dim(hp.Embedding)}, res.Shape)
		require.Equal(t, ir.OpAdd, res.Args[0].Op, "the residual stream after the last layer")
		require.Nil(t, g.Output())
		require.Nil(t, g.Node(ir.OpLastTokens))
		require.Equal(t, whole.CacheLayers(), g.CacheLayers())

		want := slices.DeleteFunc(whole.Weights(), func(n string) bool {
			return n == "output_norm.weight" || n == "output.weight"
		})
		require.Equal(t, want, g.Weights(), hp.Name)
		// the nodes before the head are the whole model's, unchanged
		lt := whole.Node(ir.OpLastTokens)
		for i := range lt.ID {
			require.Equal(t, whole.Nodes[i].Op, g.Nodes[i].Op)
		}
		require.NoError(t, ir.RunPasses(g, ir.Passes))
	}
}
