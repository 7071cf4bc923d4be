package ir

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// moeGraph builds a mixture-of-experts feed-forward of 8 experts of 16 rows,
// 2 chosen a token, over rows of 32: router, choice, weights, the experts'
// SwiGLU and down products and their weighted sum.
func moeGraph() (*Graph, map[string]*Node) {
	g := NewGraph("test", "moe")
	tok := g.Add(OpTokens, nil)
	x := g.Add(OpEmbed, nil, g.Weight("token_embd.weight", dtype.F32, []int{32, 10}), tok)
	logits := g.Add(OpMatmul, nil, x, g.Weight("router.weight", dtype.F32, []int{32, 8}))
	ids := g.Add(OpTopK, Attrs{"k": 2}, logits)
	w := g.Add(OpMoEWeights, Attrs{"norm": true}, logits, ids)
	gate := g.Add(OpMoEMatmul, nil, x, g.Weight("gate_exps.weight", dtype.Q8_0, []int{32, 16, 8}), ids)
	up := g.Add(OpMoEMatmul, nil, x, g.Weight("up_exps.weight", dtype.Q8_0, []int{32, 16, 8}), ids)
	act := g.Add(OpSwiGLU, nil, gate, up)
	down := g.Add(OpMoEMatmul, nil, act, g.Weight("down_exps.weight", dtype.F16, []int{16, 32, 8}), ids)
	sum := g.Add(OpMoESum, nil, down, w)
	y := g.Add(OpAdd, nil, x, sum)
	g.Add(OpOutput, nil, g.Add(OpLastTokens, nil, y))
	return g, map[string]*Node{"ids": ids, "w": w, "gate": gate, "down": down, "sum": sum}
}

func TestMoEOps(t *testing.T) {
	g, n := moeGraph()
	require.NoError(t, g.Err())
	require.NoError(t, RunPasses(g, Passes))
	require.Equal(t, dtype.I32, n["ids"].Type)
	require.Equal(t, Shape{T, 2}, n["ids"].Shape)
	require.Equal(t, Shape{T, 2}, n["w"].Shape)
	require.Equal(t, Shape{T, 2, 16}, n["gate"].Shape)
	require.Equal(t, Shape{T, 2, 32}, n["down"].Shape)
	require.Equal(t, Shape{T, 32}, n["sum"].Shape)
	s := g.String()
	require.Contains(t, s, "%5 = topk %4 k=2 : I32[T,2]")
	require.Contains(t, s, "%6 = moe_weights %4, %5 norm=true : F32[T,2]")
	for _, nd := range g.Nodes {
		if nd.Op == OpMoEMatmul {
			require.Zero(t, nd.Kernel, "moe_matmul joined a fusion group")
		}
	}
}

func TestMoERules(t *testing.T) {
	cases := []struct {
		name string
		edit func(g *Graph, n map[string]*Node)
		msg  string
	}{
		{"k past N", func(g *Graph, n map[string]*Node) { n["ids"].Attrs["k"] = 9 }, "k 9 must be in (0,8]"},
		{"k zero", func(g *Graph, n map[string]*Node) { n["ids"].Attrs["k"] = 0 }, "must be in (0,8]"},
		{"ids as floats", func(g *Graph, n map[string]*Node) { n["gate"].Args[2] = n["w"] }, "must be I32"},
		{"2-D expert weight", func(g *Graph, n map[string]*Node) {
			n["gate"].Args[1] = g.Nodes[1] // the embedding table
		}, "want [E,N,K]"},
		{"rows of another length", func(g *Graph, n map[string]*Node) { n["down"].Args[0] = n["w"] }, "has rows of 16, x has 2 columns"},
		{"weights of another k", func(g *Graph, n map[string]*Node) { n["sum"].Args[1] = n["down"] }, "want [T,k]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, n := moeGraph()
			require.NoError(t, Verify(g))
			c.edit(g, n)
			err := Verify(g)
			require.ErrorIs(t, err, ErrVerify)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}
