package ir

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// stageGraph builds a small pipeline stage: hidden_in → norm → hidden_out.
func stageGraph(dim int) (*Graph, *Node) {
	g := NewGraph("test", "stage")
	x := g.Add(OpHiddenIn, Attrs{"dim": dim})
	h := g.Add(OpRMSNorm, Attrs{"eps": 1e-5}, x, g.Weight("n.weight", dtype.F32, []int{dim}))
	return g, g.Add(OpAdd, nil, x, h)
}

func TestStageOps(t *testing.T) {
	g, y := stageGraph(16)
	out := g.Add(OpHiddenOut, nil, y)
	require.NoError(t, RunPasses(g, Passes))
	require.Equal(t, Shape{T, 16}, g.Node(OpHiddenIn).Shape)
	require.Equal(t, out, g.Result())
	require.Nil(t, g.Output())
	require.Contains(t, g.String(), "hidden_in dim=16 : F32[T,16]")
	require.Contains(t, g.String(), "%4 = hidden_out %3 : F32[T,16]")

	cases := []struct {
		name  string
		build func() *Graph
		msg   string
	}{
		{"hidden_out not last", func() *Graph {
			g, y := stageGraph(8)
			g.Add(OpHiddenOut, nil, y)
			g.Add(OpSiLU, nil, y)
			return g
		}, "hidden_out must be the last node"},
		{"two results", func() *Graph {
			g, y := stageGraph(8)
			g.Add(OpHiddenOut, nil, y)
			g.Add(OpHiddenOut, nil, y)
			return g
		}, "must be the last node"},
		{"no result", func() *Graph { g, _ := stageGraph(8); return g }, "not output or hidden_out"},
		{"zero dim", func() *Graph {
			g := NewGraph("test", "bad")
			g.Add(OpHiddenOut, nil, g.Add(OpHiddenIn, Attrs{"dim": 0}))
			return g
		}, "dim 0 must be positive"},
		{"3-D hidden_out", func() *Graph {
			g := NewGraph("test", "bad")
			x := g.Add(OpReshape, Attrs{"dims": []int{2, 4}}, g.Add(OpHiddenIn, Attrs{"dim": 8}))
			g.Add(OpHiddenOut, nil, x)
			return g
		}, "want [T,E]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Verify(c.build())
			require.ErrorIs(t, err, ErrVerify)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}
