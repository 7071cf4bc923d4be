package arch

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// tensors is a Weights of named (type, ne) entries.
type tensors map[string]struct {
	t  dtype.Type
	ne []int
}

func (m tensors) Lookup(name string) (dtype.Type, []int, bool) {
	e, ok := m[name]
	return e.t, e.ne, ok
}

// synth lists the tensors a model of hp has, matrices of type mt.
func synth(hp ir.HParams, mt dtype.Type) tensors {
	hd := hp.HeadDim
	if hd == 0 {
		hd = hp.Embedding / hp.Heads
	}
	kv := hp.HeadsKV
	if kv == 0 {
		kv = hp.Heads
	}
	m := tensors{}
	add := func(name string, t dtype.Type, ne ...int) {
		m[name] = struct {
			t  dtype.Type
			ne []int
		}{t, ne}
	}
	E, F := hp.Embedding, hp.FFN
	add("token_embd.weight", mt, E, hp.VocabSize)
	add("output_norm.weight", dtype.F32, E)
	if !hp.TiedEmbedding {
		add("output.weight", mt, E, hp.VocabSize)
	}
	for l := 0; l < hp.Layers; l++ {
		b := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		add(b("attn_norm.weight"), dtype.F32, E)
		add(b("attn_q.weight"), mt, E, hp.Heads*hd)
		add(b("attn_k.weight"), mt, E, kv*hd)
		add(b("attn_v.weight"), mt, E, kv*hd)
		add(b("attn_output.weight"), mt, hp.Heads*hd, E)
		add(b("ffn_norm.weight"), dtype.F32, E)
		add(b("ffn_gate.weight"), mt, E, F)
		add(b("ffn_up.weight"), mt, E, F)
		add(b("ffn_down.weight"), mt, F, E)
		if hp.QKVBias {
			add(b("attn_q.bias"), dtype.F32, hp.Heads*hd)
			add(b("attn_k.bias"), dtype.F32, kv*hd)
			add(b("attn_v.bias"), dtype.F32, kv*hd)
		}
		if hp.QKNorm {
			add(b("attn_q_norm.weight"), dtype.F32, hd)
			add(b("attn_k_norm.weight"), dtype.F32, hd)
		}
	}
	return m
}

var (
	stories = ir.HParams{Arch: "llama", Name: "stories260K", ContextLength: 512, Embedding: 64, Layers: 5, FFN: 172,
		Heads: 8, HeadsKV: 4, HeadDim: 8, RopeDim: 8, RopeBase: 10000, RMSEps: 1e-5, VocabSize: 512}
	qwen2 = ir.HParams{Arch: "qwen2", Name: "qwen2-small", Embedding: 64, Layers: 2, FFN: 128, Heads: 4, HeadsKV: 2,
		RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 96, TiedEmbedding: true, QKVBias: true}
	qwen3 = ir.HParams{Arch: "qwen3", Name: "qwen3-small", Embedding: 64, Layers: 2, FFN: 96, Heads: 4, HeadsKV: 2,
		HeadDim: 32, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 96, TiedEmbedding: true, QKNorm: true}
)

func TestGolden(t *testing.T) {
	cases := []struct {
		file string
		hp   ir.HParams
		mt   dtype.Type
	}{
		{"stories260K.golden", stories, dtype.F32},
		{"qwen2.golden", qwen2, dtype.Q8_0},
		{"qwen3.golden", qwen3, dtype.BF16},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			g, err := Build(c.hp, synth(c.hp, c.mt))
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

func TestBuildErrors(t *testing.T) {
	drop := func(name string) func(tensors) {
		return func(m tensors) { delete(m, name) }
	}
	reshape := func(name string, ne ...int) func(tensors) {
		return func(m tensors) { e := m[name]; e.ne = ne; m[name] = e }
	}
	cases := []struct {
		name string
		hp   ir.HParams
		edit func(tensors)
		err  error
		msg  string
	}{
		{"missing q", stories, drop("blk.3.attn_q.weight"), ErrMissingTensor, "blk.3.attn_q.weight"},
		{"missing bias", qwen2, drop("blk.1.attn_v.bias"), ErrMissingTensor, "blk.1.attn_v.bias"},
		{"missing q norm", qwen3, drop("blk.0.attn_k_norm.weight"), ErrMissingTensor, "blk.0.attn_k_norm.weight"},
		{"missing embd", stories, drop("token_embd.weight"), ErrMissingTensor, "token_embd.weight"},
		{"wrong ffn", stories, reshape("blk.0.ffn_up.weight", 64, 171), ErrTensorShape, "blk.0.ffn_up.weight"},
		{"wrong norm", qwen3, reshape("blk.1.attn_q_norm.weight", 16), ErrTensorShape, "attn_q_norm"},
		{"unknown arch", ir.HParams{Arch: "gpt9", Embedding: 1}, func(tensors) {}, ErrUnknownArch, "gpt9"},
		{"bad gqa", func() ir.HParams { h := stories; h.HeadsKV = 3; return h }(), func(tensors) {}, ErrHParams, "KV heads"},
		{"unknown rope scaling", func() ir.HParams { h := stories; h.RopeScaling = ir.RopeScaling{Type: "dynamic", Factor: 2}; return h }(), func(tensors) {}, ErrHParams, `rope scaling "dynamic" is not supported`},
		{"yarn without factor", func() ir.HParams { h := stories; h.RopeScaling.Type = "yarn"; return h }(), func(tensors) {}, ErrHParams, "yarn rope scaling factor 0"},
		{"yarn betas", func() ir.HParams {
			h := stories
			h.RopeScaling = ir.RopeScaling{Type: "yarn", Factor: 4, BetaFast: 1, BetaSlow: 2}
			return h
		}(), func(tensors) {}, ErrHParams, "beta_fast 1, beta_slow 2"},
		{"yarn partial rotation", func() ir.HParams {
			h := stories
			h.RopeDim, h.RopeScaling = 4, ir.RopeScaling{Type: "yarn", Factor: 4}
			return h
		}(), func(tensors) {}, ErrHParams, "RoPE on 4 of 8 head elements"},
		{"yarn with rope_freqs", func() ir.HParams { h := stories; h.RopeScaling = ir.RopeScaling{Type: "yarn", Factor: 4}; return h }(), func(m tensors) {
			m["rope_freqs.weight"] = struct {
				t  dtype.Type
				ne []int
			}{dtype.F32, []int{4}}
		}, ErrHParams, "rope_freqs.weight"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := synth(stories, dtype.F32)
			if c.hp.Arch != "gpt9" {
				w = synth(c.hp, dtype.F32)
			}
			c.edit(w)
			_, err := Build(c.hp, w)
			require.ErrorIs(t, err, c.err)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestRopeVariants(t *testing.T) {
	hp := stories
	hp.RopeScaling = ir.RopeScaling{Type: "llama3", Factor: 8, OriginalContext: 8192, LowFreqFactor: 1, HighFreqFactor: 4}
	g, err := Build(hp, synth(hp, dtype.F32))
	require.NoError(t, err)
	require.Contains(t, g.String(), `scaling="llama3" factor=8 orig_ctx=8192 low_freq=1 high_freq=4`)

	w := synth(hp, dtype.F32)
	w["rope_freqs.weight"] = struct {
		t  dtype.Type
		ne []int
	}{dtype.F32, []int{4}}
	g, err = Build(hp, w)
	require.NoError(t, err)
	s := g.String()
	require.Contains(t, s, `weight name="rope_freqs.weight"`)
	require.Contains(t, s, `scaling="none"`)
	require.NotContains(t, s, `"llama3"`)

	hp.RopeScaling = ir.RopeScaling{Type: "linear", Factor: 2}
	g, err = Build(hp, synth(hp, dtype.F32))
	require.NoError(t, err)
	require.Contains(t, g.String(), `scaling="linear" factor=2`)
}

// YaRN scales the rope frequencies and folds its attention factor m into
// the attention scale as m²: 1/sqrt(head size) otherwise.
func TestRopeYarn(t *testing.T) {
	plain := 1 / math.Sqrt(8)
	for _, c := range []struct {
		name  string
		rs    ir.RopeScaling
		attrs string
		m     float64
	}{
		{"defaults", ir.RopeScaling{Type: "yarn", Factor: 4},
			`scaling="yarn" factor=4 orig_ctx=512 low_freq=1 high_freq=32`, 1 + 0.1*math.Log(4)},
		{"qwen2.5", ir.RopeScaling{Type: "yarn", Factor: 4, OriginalContext: 128},
			`scaling="yarn" factor=4 orig_ctx=128 low_freq=1 high_freq=32`, 1 + 0.1*math.Log(4)},
		{"betas", ir.RopeScaling{Type: "YaRN", Factor: 16, OriginalContext: 64, BetaFast: 16, BetaSlow: 2},
			`scaling="yarn" factor=16 orig_ctx=64 low_freq=2 high_freq=16`, 1 + 0.1*math.Log(16)},
		{"attention factor", ir.RopeScaling{Type: "yarn", Factor: 4, AttnFactor: 1.5}, `scaling="yarn"`, 1.5},
		{"mscale", ir.RopeScaling{Type: "yarn", Factor: 40, Mscale: 1, MscaleAllDim: 0.5},
			`scaling="yarn" factor=40`, (1 + 0.1*math.Log(40)) / (1 + 0.05*math.Log(40))},
		{"equal mscales", ir.RopeScaling{Type: "yarn", Factor: 40, Mscale: 0.707, MscaleAllDim: 0.707}, `scaling="yarn" factor=40`, 1},
		{"one mscale is ignored", ir.RopeScaling{Type: "yarn", Factor: 4, Mscale: 0.5}, `scaling="yarn"`, 1 + 0.1*math.Log(4)},
		{"gguf attn_factor", ir.RopeScaling{Type: "yarn", Factor: 4, AttnFactorMul: 0.5}, `scaling="yarn"`, 0.5 * (1 + 0.1*math.Log(4))},
		{"factor 1", ir.RopeScaling{Type: "yarn", Factor: 1}, `scaling="yarn" factor=1`, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			hp := stories
			hp.RopeScaling = c.rs
			g, err := Build(hp, synth(hp, dtype.F32))
			require.NoError(t, err)
			require.Contains(t, g.String(), c.attrs)
			n := 0
			for _, nd := range g.Nodes {
				switch nd.Op {
				case ir.OpAttention:
					require.InEpsilon(t, plain*c.m*c.m, nd.Float("scale"), 1e-7)
					n++
				case ir.OpRope:
					require.Equal(t, "yarn", ir.RopeOf(nd).Scaling)
				}
			}
			require.Equal(t, stories.Layers, n)
		})
	}
	// the unscaled model keeps 1/sqrt(head size) exactly
	g, err := Build(stories, synth(stories, dtype.F32))
	require.NoError(t, err)
	for _, nd := range g.Nodes {
		if nd.Op == ir.OpAttention {
			require.Equal(t, plain, nd.Float("scale"))
		}
	}
}

func TestTiedEmbedding(t *testing.T) {
	g, err := Build(qwen2, synth(qwen2, dtype.F32))
	require.NoError(t, err)
	out := g.Output().Args[0]
	require.Equal(t, ir.OpMatmul, out.Op)
	require.Equal(t, "token_embd.weight", out.Args[1].Str("name"))
	require.NotContains(t, g.Weights(), "output.weight")
}
