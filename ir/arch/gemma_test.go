package arch

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

var (
	// gemma2-9b's block at a small size: head dim 32 ≠ 64/4, every other
	// layer sliding (window 8), soft caps 50 and 30, query scale 1/√24.
	gemma2 = ir.HParams{Arch: "gemma2", Name: "gemma2-small", ContextLength: 64, Embedding: 64, Layers: 3, FFN: 96,
		Heads: 4, HeadsKV: 2, HeadDim: 32, RopeBase: 10000, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 96,
		TiedEmbedding: true, AttnScale: 0.20412415, AttnSoftcap: 50, FinalSoftcap: 30, SlidingWindow: 8, SlidingPattern: 2}
	// gemma3-12b's block at a small size: five sliding layers (window 8,
	// base 10000) to one global (base 1e6, linear scaling 8), q/k norms.
	gemma3 = ir.HParams{Arch: "gemma3", Name: "gemma3-small", ContextLength: 64, Embedding: 64, Layers: 7, FFN: 96,
		Heads: 4, HeadsKV: 2, HeadDim: 32, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 96,
		TiedEmbedding: true, AttnScale: 0.17677669, SlidingWindow: 8, SlidingPattern: 6, RopeBaseLocal: 10000, QKNorm: true,
		RopeScaling: ir.RopeScaling{Type: "linear", Factor: 8}}
)

// gemmaTensors lists the tensors of a Gemma model of hp: synth's, with the
// post-norms.
func gemmaTensors(hp ir.HParams, mt dtype.Type) tensors {
	m := synth(hp, mt)
	for l := 0; l < hp.Layers; l++ {
		for _, n := range []string{"post_attention_norm", "post_ffw_norm"} {
			m[fmt.Sprintf("blk.%d.%s.weight", l, n)] = struct {
				t  dtype.Type
				ne []int
			}{dtype.F32, []int{hp.Embedding}}
		}
	}
	return m
}

func TestGemmaGolden(t *testing.T) {
	for _, c := range []struct {
		file string
		hp   ir.HParams
		mt   dtype.Type
	}{
		{"gemma2.golden", gemma2, dtype.Q8_0},
		{"gemma3.golden", gemma3, dtype.BF16},
	} {
		t.Run(c.file, func(t *testing.T) {
			g, err := Build(c.hp, gemmaTensors(c.hp, c.mt))
			require.NoError(t, err)
			require.NoError(t, ir.RunPasses(g, ir.Passes))
			got := g.String()
			path := filepath.Join("testdata", c.file)
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(want), got)
		})
	}
}

// nodesOf returns the graph's nodes of op, in order.
func nodesOf(g *ir.Graph, op ir.Op) []*ir.Node {
	var ns []*ir.Node
	for _, n := range g.Nodes {
		if n.Op == op {
			ns = append(ns, n)
		}
	}
	return ns
}

func TestGemmaStructure(t *testing.T) {
	g, err := Build(gemma2, gemmaTensors(gemma2, dtype.F16))
	require.NoError(t, err)
	att := nodesOf(g, ir.OpAttention)
	require.Len(t, att, 3)
	for l, a := range att {
		require.Equal(t, 50.0, ir.AttnSoftcap(a))
		require.InDelta(t, 0.20412415, a.Float("scale"), 1e-7)
		want := 8
		if l%2 == 1 {
			want = 0 // layers 1, 3, … are global
		}
		require.Equal(t, want, ir.AttnWindow(a), "layer %d", l)
	}
	sc := nodesOf(g, ir.OpScale)
	require.Len(t, sc, 1)
	require.Equal(t, 8.0, sc[0].Float("factor"), "√64")
	require.Equal(t, ir.OpEmbed, sc[0].Args[0].Op)
	cap := nodesOf(g, ir.OpSoftcap)
	require.Len(t, cap, 1)
	require.Equal(t, 30.0, cap[0].Float("cap"))
	require.Equal(t, cap[0], g.Output().Args[0])
	require.Len(t, nodesOf(g, ir.OpGeGLU), 3)
	require.Empty(t, nodesOf(g, ir.OpSwiGLU))
	// 4 norms a layer (pre and post, attention and feed-forward) and the final one
	require.Len(t, nodesOf(g, ir.OpRMSNorm), 4*3+1)
	for _, add := range nodesOf(g, ir.OpAdd) {
		require.Equal(t, ir.OpRMSNorm, add.Args[1].Op, "a post-norm before every residual add")
	}

	g, err = Build(gemma3, gemmaTensors(gemma3, dtype.F16))
	require.NoError(t, err)
	att = nodesOf(g, ir.OpAttention)
	ropes := nodesOf(g, ir.OpRope)
	require.Len(t, att, 7)
	for l, a := range att {
		require.Zero(t, ir.AttnSoftcap(a), "gemma3 has no soft cap")
		p := ir.RopeOf(ropes[2*l])
		if l == 5 {
			require.Zero(t, ir.AttnWindow(a), "layer 5 is global")
			require.Equal(t, ir.RopeParams{Style: ir.RopeHalf, Dims: 32, Base: 1e6, Scaling: "linear", Factor: 8}, p)
		} else {
			require.Equal(t, 8, ir.AttnWindow(a), "layer %d slides", l)
			require.Equal(t, ir.RopeParams{Style: ir.RopeHalf, Dims: 32, Base: 10000, Scaling: "none", Factor: 1}, p)
		}
		require.Equal(t, p, ir.RopeOf(ropes[2*l+1]), "q and k rotate alike")
	}
	require.Len(t, nodesOf(g, ir.OpRMSNorm), 6*7+1, "with the q and k norms")
	require.Empty(t, nodesOf(g, ir.OpSoftcap))
}

func TestGemmaErrors(t *testing.T) {
	w := gemmaTensors(gemma2, dtype.F16)
	delete(w, "blk.1.post_ffw_norm.weight")
	_, err := Build(gemma2, w)
	require.ErrorIs(t, err, ErrMissingTensor)
	require.Contains(t, err.Error(), "blk.1.post_ffw_norm.weight")

	w = gemmaTensors(gemma3, dtype.F16)
	delete(w, "blk.0.attn_k_norm.weight")
	_, err = Build(gemma3, w)
	require.ErrorIs(t, err, ErrMissingTensor)

	for _, edit := range []func(*ir.HParams){
		func(hp *ir.HParams) { hp.AttnSoftcap = -1 },
		func(hp *ir.HParams) { hp.SlidingWindow = -4 },
		func(hp *ir.HParams) { hp.AttnScale = float32(math.Inf(1)) },
	} {
		hp := gemma2
		edit(&hp)
		_, err := Build(hp, gemmaTensors(gemma2, dtype.F16))
		require.ErrorIs(t, err, ErrHParams)
	}
}

// Stages of a Gemma model: the first scales the embeddings, the last caps
// the logits, and their layers are those of the whole graph.
func TestGemmaStages(t *testing.T) {
	w := gemmaTensors(gemma2, dtype.F16)
	whole, err := Build(gemma2, w)
	require.NoError(t, err)
	a, err := BuildStage(gemma2, w, 0, 2)
	require.NoError(t, err)
	b, err := BuildStage(gemma2, w, 2, 3)
	require.NoError(t, err)
	require.Len(t, nodesOf(a, ir.OpScale), 1)
	require.Empty(t, nodesOf(b, ir.OpScale))
	require.Empty(t, nodesOf(a, ir.OpSoftcap))
	require.Len(t, nodesOf(b, ir.OpSoftcap), 1)
	require.Equal(t, ir.AttnWindow(nodesOf(whole, ir.OpAttention)[2]), ir.AttnWindow(nodesOf(b, ir.OpAttention)[0]))
	require.True(t, strings.HasPrefix(b.String(), "graph gemma2"))
}

func TestSlidingPattern(t *testing.T) {
	var got []bool
	hp := ir.HParams{SlidingWindow: 1024, SlidingPattern: 6}
	for l := range 12 {
		got = append(got, hp.Sliding(l))
	}
	require.Equal(t, []bool{true, true, true, true, true, false, true, true, true, true, true, false}, got)
	require.True(t, ir.HParams{SlidingWindow: 4096, SlidingPattern: 2}.Sliding(0))
	require.False(t, ir.HParams{SlidingWindow: 4096, SlidingPattern: 2}.Sliding(1))
	require.True(t, ir.HParams{SlidingWindow: 4096}.Sliding(7), "no pattern: every layer")
	require.False(t, ir.HParams{SlidingPattern: 2}.Sliding(0), "no window: none")
}
