package codegen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/load"
)

// tensorList is an arch.Weights of named (type, ne) entries.
type tensorList map[string]struct {
	t  dtype.Type
	ne []int
}

func (m tensorList) Lookup(name string) (dtype.Type, []int, bool) {
	e, ok := m[name]
	return e.t, e.ne, ok
}

// synthTensors lists the tensors a model of hp has: matrices of type mt
// (the value projection of type vt), vectors F32.
func synthTensors(hp ir.HParams, mt, vt dtype.Type) tensorList {
	m := tensorList{}
	add := func(name string, t dtype.Type, ne ...int) {
		m[name] = struct {
			t  dtype.Type
			ne []int
		}{t, ne}
	}
	E, F, D := hp.Embedding, hp.FFN, hp.HeadDim
	add("token_embd.weight", mt, E, hp.VocabSize)
	add("output_norm.weight", dtype.F32, E)
	if !hp.TiedEmbedding {
		add("output.weight", mt, E, hp.VocabSize)
	}
	for l := 0; l < hp.Layers; l++ {
		b := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		add(b("attn_norm.weight"), dtype.F32, E)
		add(b("attn_q.weight"), mt, E, hp.Heads*D)
		add(b("attn_k.weight"), mt, E, hp.HeadsKV*D)
		add(b("attn_v.weight"), vt, E, hp.HeadsKV*D)
		add(b("attn_output.weight"), mt, hp.Heads*D, E)
		add(b("ffn_norm.weight"), dtype.F32, E)
		add(b("ffn_gate.weight"), mt, E, F)
		add(b("ffn_up.weight"), mt, E, F)
		add(b("ffn_down.weight"), vt, F, E)
		if hp.QKVBias {
			add(b("attn_q.bias"), dtype.F32, hp.Heads*D)
			add(b("attn_k.bias"), dtype.F32, hp.HeadsKV*D)
			add(b("attn_v.bias"), dtype.F32, hp.HeadsKV*D)
		}
		if hp.QKNorm {
			add(b("attn_q_norm.weight"), dtype.F32, D)
			add(b("attn_k_norm.weight"), dtype.F32, D)
		}
	}
	return m
}

var (
	smallQwen3 = ir.HParams{Arch: "qwen3", Name: "qwen3-small", ContextLength: 256, Embedding: 256, Layers: 2, FFN: 512,
		Heads: 4, HeadsKV: 2, HeadDim: 64, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 1000, TiedEmbedding: true, QKNorm: true}
	smallQwen2 = ir.HParams{Arch: "qwen2", Name: "qwen2-small", ContextLength: 256, Embedding: 256, Layers: 2, FFN: 512,
		Heads: 4, HeadsKV: 2, HeadDim: 64, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 1000, QKVBias: true}
)

func buildGraph(t *testing.T, hp ir.HParams, w arch.Weights) *ir.Graph {
	t.Helper()
	g, err := arch.Build(hp, w)
	require.NoError(t, err)
	require.NoError(t, ir.RunPasses(g, ir.Passes))
	return g
}

func storiesGraph(t *testing.T) *ir.Graph {
	t.Helper()
	m, err := load.Open("../testdata/models/tinyllamas-stories-260k-f32.gguf")
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return buildGraph(t, m.HParams, m)
}

// lowerCase is one graph lowered one way.
type lowerCase struct {
	name string
	g    func(t *testing.T) *ir.Graph
	opts LowerOptions
}

func lowerCases() []lowerCase {
	qwen3 := func(t *testing.T) *ir.Graph {
		return buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q4_K))
	}
	qwen2Mixed := func(t *testing.T) *ir.Graph {
		return buildGraph(t, smallQwen2, synthTensors(smallQwen2, dtype.Q4_K, dtype.Q6_K))
	}
	dec := LowerOptions{Class: Decode, MaxSeqs: 8, Context: 256, Cache: dtype.F16, Argmax: true}
	pre := LowerOptions{Class: Prefill, MaxTokens: 128, MaxSeqs: 4, Context: 256, Cache: dtype.F16}
	// the runtime's programs also sample on the device
	decSample, preSample := dec, pre
	decSample.Sample, preSample.Argmax, preSample.Sample = true, true, true
	return []lowerCase{
		{"stories260K_decode", storiesGraph, dec},
		{"stories260K_prefill", storiesGraph, pre},
		{"qwen3_decode", qwen3, dec},
		{"qwen3_prefill", qwen3, pre},
		{"qwen2_mixed_decode", qwen2Mixed, decSample},
		{"qwen2_mixed_prefill", qwen2Mixed, preSample},
	}
}

// TestLowerGolden pins the program dumps (run with -update to rewrite).
func TestLowerGolden(t *testing.T) {
	for _, c := range lowerCases() {
		if c.name != "stories260K_decode" && c.name != "stories260K_prefill" && c.name != "qwen3_decode" && c.name != "qwen3_prefill" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			p, err := Lower(c.g(t), c.opts)
			require.NoError(t, err)
			path := filepath.Join("testdata", "program_"+c.name+".txt")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(p.String()), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./codegen -run TestLowerGolden -update")
			require.Equal(t, string(want), p.String())
		})
	}
}

// TestLowerPlan checks every program's buffer plan: reuse happens, no two
// live buffers share bytes, every launch binds every parameter, weights
// are consistent.
func TestLowerPlan(t *testing.T) {
	for _, c := range lowerCases() {
		t.Run(c.name, func(t *testing.T) {
			p, err := Lower(c.g(t), c.opts)
			require.NoError(t, err)
			require.NoError(t, p.Buffers.Check())
			require.Less(t, p.Buffers.ArenaBytes, p.Buffers.TotalBytes(), "no reuse")
			for i := range p.Buffers.Buffers {
				for j := range p.Buffers.Buffers {
					if i != j {
						require.False(t, p.Buffers.Overlaps(i, j), "b%d b%d", i, j)
					}
				}
			}
			seen := map[string]bool{}
			for _, k := range p.Kernels {
				require.False(t, seen[k.Name], "duplicate kernel %s", k.Name)
				seen[k.Name] = true
			}
			for i, l := range p.Launches {
				k := p.Kernels[l.Kernel]
				require.Len(t, l.Args, len(k.Params), "L%d %s", i, k.Name)
				for _, a := range l.Args {
					switch a.Kind {
					case ArgBuffer:
						b := p.Buffers.Buffers[a.Index]
						require.True(t, b.First <= i && i <= b.Last, "L%d uses b%d outside its live range", i, a.Index)
						require.Less(t, int64(a.Offset), b.Size)
					case ArgWeight:
						require.Less(t, a.Index, len(p.Weights))
					case ArgKCache, ArgVCache:
						require.Less(t, a.Index, p.Layers)
					case ArgSample:
						require.Less(t, a.Index, int(NumSampleInputs))
					}
				}
				g := k.Launch(p.Dims(&p.Launches[i], p.MaxTokens, p.MaxSeqs))
				require.Positive(t, g.Grid[0]*g.Grid[1]*g.Grid[2])
			}
			for i := range p.Weights {
				require.Positive(t, p.Weights[i].Bytes(), p.Weights[i].Name)
			}
			require.Equal(t, p.Vocab, p.Buffers.Buffers[p.Logits].Width)
			names := map[string]bool{} // a weight's name and layout: a repacked twin is another upload
			for _, w := range p.Weights {
				key := fmt.Sprintf("%s@%d", w.Name, w.Layout)
				require.False(t, names[key], "weight %s uploaded twice", key)
				names[key] = true
			}
		})
	}
}

// launchesOf counts p's launches of kernels of family.
func launchesOf(p *Program, family string) int {
	n := 0
	for _, l := range p.Launches {
		if p.Kernels[l.Kernel].Family == family {
			n++
		}
	}
	return n
}

// launchesNamed counts p's launches whose kernel's name match accepts.
func launchesNamed(p *Program, match func(name string) bool) int {
	n := 0
	for _, l := range p.Launches {
		if match(p.Kernels[l.Kernel].Name) {
			n++
		}
	}
	return n
}

func TestLowerStructure(t *testing.T) {
	g := storiesGraph(t)
	dec, err := Lower(g, LowerOptions{Class: Decode, MaxSeqs: 4, Context: 512, Cache: dtype.F16})
	require.NoError(t, err)
	count := launchesOf
	// per layer: norm, qkv gemv, rope_kv, attention, o gemv, norm, gate/up gemv, swiglu, down gemv
	require.Equal(t, 5*2+1, count(dec, "rmsnorm"))
	require.Equal(t, 5*4+1, count(dec, "gemv"))
	require.Equal(t, 5, count(dec, "rope_kv"))
	require.Equal(t, 5, count(dec, "attn_warp"), "head dim 8 takes the warp attention")
	require.Equal(t, 0, count(dec, "gather_rows"))
	// stories' FFN of 172 is padded to 192 for the down product's rows.
	var padded bool
	for _, w := range dec.Weights {
		if w.Cols == 172 {
			require.Equal(t, 192, w.PadCols)
			padded = true
		}
	}
	require.True(t, padded)

	pre, err := Lower(g, LowerOptions{Class: Prefill, MaxTokens: 64, MaxSeqs: 2, Context: 512, Cache: dtype.F16})
	require.NoError(t, err)
	require.Equal(t, 5*4, count(pre, "mma"))
	require.Equal(t, 1, count(pre, "gemv"), "logits over S rows stay GEMV")
	require.Equal(t, 1, count(pre, "gather_rows"))

	q2g := buildGraph(t, smallQwen2, synthTensors(smallQwen2, dtype.Q4_K, dtype.Q6_K))
	q2, err := Lower(q2g, LowerOptions{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16, NoFusePrologue: true})
	require.NoError(t, err)
	require.Equal(t, 2, count(q2, "concat"), "Q4_K q/k with Q6_K v need a concat")
	require.Equal(t, 2, count(q2, "bias_add"))
	require.Equal(t, 2, count(q2, "attn_decode")/2)
	q2, err = Lower(q2g, LowerOptions{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16})
	require.NoError(t, err)
	require.Equal(t, 0, count(q2, "concat"), "with the norm fused, each product writes its columns of the fused row")
	require.Equal(t, 2, count(q2, "bias_add"))

	q3g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q8_0, dtype.Q8_0))
	q3, err := Lower(q3g, LowerOptions{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16, NoFusePrologue: true})
	require.NoError(t, err)
	require.Equal(t, 2, count(q3, "head_rmsnorm"), "a layer's q and k norms share one launch")
	for _, k := range q3.Kernels {
		if k.Family == "head_rmsnorm" {
			require.Len(t, k.Params, 4, "%s normalises the k heads with their own weight", k.Name)
		}
	}
	require.Equal(t, 0, count(q3, "concat"))
	// a fusing decode program normalises q and k in the RoPE launch (RopeKVNorm):
	// the norms' weights after the caches, the norms' nodes in the launch
	for _, o := range []LowerOptions{{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16}, {Class: Decode, MaxSeqs: 1, Context: 256, Cache: CacheQ8}} {
		q3, err = Lower(q3g, o)
		require.NoError(t, err)
		require.Zero(t, count(q3, "head_rmsnorm"))
		ropes := 0
		for _, ln := range q3.Launches {
			k := q3.Kernels[ln.Kernel]
			if k.Family != "rope_kv" {
				continue
			}
			ropes++
			require.True(t, strings.HasPrefix(k.Name, "rope_kv_norm_"), k.Name)
			require.Equal(t, "wq", k.Params[6].Name)
			require.Equal(t, ArgWeight, ln.Args[6].Kind)
			norms := 0
			for _, id := range ln.Nodes {
				if q3g.Nodes[id].Op == ir.OpRMSNorm {
					norms++
				}
			}
			require.Equal(t, 2, norms, "the q and k norms are the launch's")
		}
		require.Equal(t, smallQwen3.Layers, ropes)
	}
	// prefill keeps the norms' own launch
	pre3, err := Lower(q3g, LowerOptions{Class: Prefill, MaxTokens: 64, MaxSeqs: 2, Context: 256, Cache: dtype.F16})
	require.NoError(t, err)
	require.Equal(t, smallQwen3.Layers, count(pre3, "head_rmsnorm"))
}

func TestLowerErrors(t *testing.T) {
	g := storiesGraph(t)
	for _, o := range []LowerOptions{
		{Class: Decode, MaxSeqs: 0, Context: 16},
		{Class: Decode, MaxSeqs: 2, Context: 0},
		{Class: Prefill, MaxTokens: 1, MaxSeqs: 2, Context: 16},
		{Class: Decode, MaxSeqs: 2, Context: 16, Cache: dtype.Q4_K},
	} {
		_, err := Lower(g, o)
		require.Error(t, err, "%+v", o)
	}
}

// ProgramsForTest lowers every test case (exported for the external
// NVRTC compile test).
func ProgramsForTest(t *testing.T) map[string]*Program {
	out := map[string]*Program{}
	for _, c := range lowerCases() {
		p, err := Lower(c.g(t), c.opts)
		require.NoError(t, err, c.name)
		out[c.name] = p
	}
	return out
}

// TestLowerKernelNameClash: kernel names do not carry a norm's eps (a model
// has one), so two norms of one width with different eps would share a
// name; lowering reports it instead of running one with the other's eps.
func TestLowerKernelNameClash(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q4_K))
	_, err := Lower(g, LowerOptions{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16})
	require.NoError(t, err)
	norms := 0
	for _, n := range g.Nodes {
		if n.Op == ir.OpRMSNorm && n.Role == "prologue" {
			if norms++; norms == 2 {
				n.Attrs["eps"] = n.Float("eps") * 10
			}
		}
	}
	_, err = Lower(g, LowerOptions{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16})
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorContains(t, err, "two different kernels named")
}
