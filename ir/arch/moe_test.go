package arch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

var (
	qwen3moe = ir.HParams{Arch: "qwen3moe", Name: "qwen3moe-small", Embedding: 64, Layers: 2, FFN: 192, Heads: 4, HeadsKV: 2,
		HeadDim: 32, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 96, QKNorm: true,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 32, ExpertNorm: true}
	mixtral = ir.HParams{Arch: "mixtral", Name: "mixtral-small", Embedding: 64, Layers: 2, FFN: 96, Heads: 8, HeadsKV: 2,
		RopeBase: 1e6, RMSEps: 1e-5, VocabSize: 96, Experts: 4, ExpertsUsed: 2, ExpertFFN: 96, ExpertNorm: true}
)

// synthMoE lists the tensors of a mixture-of-experts model of hp: synth's,
// with the router and the 3-D expert tensors in place of the dense
// feed-forward.
func synthMoE(hp ir.HParams, mt dtype.Type) tensors {
	m := synth(hp, mt)
	for l := 0; l < hp.Layers; l++ {
		b := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		for _, s := range []string{"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"} {
			delete(m, b(s))
		}
		set := func(name string, t dtype.Type, ne ...int) {
			m[name] = struct {
				t  dtype.Type
				ne []int
			}{t, ne}
		}
		E, F, N := hp.Embedding, hp.ExpertFFN, hp.Experts
		set(b("ffn_gate_inp.weight"), dtype.F32, E, N)
		set(b("ffn_gate_exps.weight"), mt, E, F, N)
		set(b("ffn_up_exps.weight"), mt, E, F, N)
		set(b("ffn_down_exps.weight"), mt, F, E, N)
	}
	return m
}

func TestGoldenMoE(t *testing.T) {
	for _, c := range []struct {
		file string
		hp   ir.HParams
		mt   dtype.Type
	}{
		{"qwen3moe.golden", qwen3moe, dtype.Q8_0},
		{"mixtral.golden", mixtral, dtype.F16},
	} {
		t.Run(c.file, func(t *testing.T) {
			g, err := Build(c.hp, synthMoE(c.hp, c.mt))
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
			require.Equal(t, c.hp.Experts, g.Consts["experts"])
			require.NotContains(t, g.Weights(), "blk.0.ffn_up.weight")
			moe := 0
			for _, n := range g.Nodes {
				if n.Op == ir.OpMoEMatmul {
					moe++
				}
			}
			require.Equal(t, 3*c.hp.Layers, moe)
		})
	}
	// a stage of the layers after the first builds too
	g, err := BuildStage(qwen3moe, synthMoE(qwen3moe, dtype.F32), 1, 2)
	require.NoError(t, err)
	require.NotNil(t, g.Node(ir.OpHiddenIn))
	require.NotNil(t, g.Node(ir.OpTopK))
}

func TestMoEBuildErrors(t *testing.T) {
	withHP := func(f func(*ir.HParams)) ir.HParams { h := mixtral; f(&h); return h }
	for _, c := range []struct {
		name string
		hp   ir.HParams
		edit func(tensors)
		err  error
		msg  string
	}{
		{"no experts", withHP(func(h *ir.HParams) { h.Experts = 0 }), func(tensors) {}, ErrHParams, "0 experts"},
		{"more used than experts", withHP(func(h *ir.HParams) { h.ExpertsUsed = 5 }), func(tensors) {}, ErrHParams, "5 used"},
		{"no expert ffn", withHP(func(h *ir.HParams) { h.ExpertFFN = 0 }), func(tensors) {}, ErrHParams, "expert feed-forward 0"},
		{"missing router", mixtral, func(m tensors) { delete(m, "blk.1.ffn_gate_inp.weight") }, ErrMissingTensor, "blk.1.ffn_gate_inp.weight"},
		{"missing experts", mixtral, func(m tensors) { delete(m, "blk.0.ffn_down_exps.weight") }, ErrMissingTensor, "ffn_down_exps"},
		{"experts of another count", mixtral, func(m tensors) {
			e := m["blk.0.ffn_up_exps.weight"]
			e.ne = []int{64, 96, 8}
			m["blk.0.ffn_up_exps.weight"] = e
		}, ErrTensorShape, "blk.0.ffn_up_exps.weight has ne [64 96 8], want [64 96 4]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := synthMoE(c.hp, dtype.F32)
			c.edit(w)
			_, err := Build(c.hp, w)
			require.ErrorIs(t, err, c.err)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}
