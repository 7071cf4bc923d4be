package ir

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// gemmaOps builds a graph with the ops Gemma brought: scale, geglu, an
// attention node with the optional softcap and window, softcap.
func gemmaOps(att Attrs) *Graph {
	g := NewGraph("test", "gemma-ops")
	tok := g.Add(OpTokens, nil)
	pos := g.Add(OpPositions, nil)
	emb := g.Weight("token_embd.weight", dtype.F32, []int{32, 10})
	x := g.Add(OpScale, Attrs{"factor": float64(float32(math.Sqrt(32)))}, g.Add(OpEmbed, nil, emb, tok))
	q3 := g.Add(OpReshape, Attrs{"dims": []int{4, 8}}, x)
	ra := Attrs{"style": "half", "dims": 8, "base": 1e4, "scaling": "none", "factor": 1.0, "orig_ctx": 0, "low_freq": 0.0, "high_freq": 0.0}
	q3 = g.Add(OpRope, ra, q3, pos)
	c := g.Add(OpKVWrite, Attrs{"layer": 0}, q3, q3)
	a := g.Add(OpAttention, att, q3, c)
	x = g.Add(OpGeGLU, nil, x, g.Add(OpReshape, Attrs{"dims": []int{32}}, a))
	l := g.Add(OpLastTokens, nil, x)
	g.Add(OpOutput, nil, g.Add(OpSoftcap, Attrs{"cap": 30.0}, g.Add(OpMatmul, nil, l, emb)))
	return g
}

func TestOptionalAttrs(t *testing.T) {
	plain := gemmaOps(Attrs{"scale": 0.5, "causal": true})
	require.NoError(t, Verify(plain))
	line := func(g *Graph) string {
		for _, l := range strings.Split(g.String(), "\n") {
			if strings.Contains(l, "= attention") {
				return l
			}
		}
		return ""
	}
	require.Contains(t, line(plain), "scale=0.5 causal=true : ", "absent optional attributes print nothing")
	require.Zero(t, AttnSoftcap(plain.Node(OpAttention)))
	require.Zero(t, AttnWindow(plain.Node(OpAttention)))

	g := gemmaOps(Attrs{"scale": 0.5, "causal": true, "window": 4096, "softcap": 50.0})
	require.NoError(t, Verify(g))
	require.Contains(t, line(g), "scale=0.5 causal=true softcap=50 window=4096 : ", "in table order, after the required ones")
	require.Equal(t, 50.0, AttnSoftcap(g.Node(OpAttention)))
	require.Equal(t, 4096, AttnWindow(g.Node(OpAttention)))
	require.Contains(t, g.String(), "= scale %")
	require.Contains(t, g.String(), "factor=5.656854152679443")
	require.Contains(t, g.String(), "= softcap %")

	for _, c := range []struct {
		name string
		att  Attrs
		msg  string
	}{
		{"negative window", Attrs{"scale": 0.5, "causal": true, "window": -1}, "window -1"},
		{"window without causal", Attrs{"scale": 0.5, "causal": false, "window": 8}, "only causal attention"},
		{"negative softcap", Attrs{"scale": 0.5, "causal": true, "softcap": -2.0}, "softcap -2"},
		{"NaN softcap", Attrs{"scale": 0.5, "causal": true, "softcap": math.NaN()}, "softcap NaN"},
		{"window kind", Attrs{"scale": 0.5, "causal": true, "window": 8.0}, "attribute window has kind float64"},
		{"unknown", Attrs{"scale": 0.5, "causal": true, "windows": 8}, "unknown attribute windows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Verify(gemmaOps(c.att))
			require.ErrorIs(t, err, ErrVerify)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestScaleSoftcapRules(t *testing.T) {
	for _, c := range []struct {
		op    Op
		attrs Attrs
		msg   string
	}{
		{OpScale, Attrs{"factor": math.Inf(1)}, "factor +Inf must be finite"},
		{OpSoftcap, Attrs{"cap": 0.0}, "cap 0 must be"},
		{OpSoftcap, Attrs{"cap": math.Inf(1)}, "cap +Inf must be"},
		{OpSoftcap, Attrs{}, "missing attribute cap"},
	} {
		g := NewGraph("test", "bad")
		x := g.Add(OpEmbed, nil, g.Weight("e", dtype.F32, []int{16, 4}), g.Add(OpTokens, nil))
		g.Add(c.op, c.attrs, x)
		require.ErrorIs(t, g.Err(), ErrShape, c.msg)
		require.Contains(t, g.Err().Error(), c.msg)
	}
}
