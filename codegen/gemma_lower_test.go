package codegen

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

var (
	// gemma2-9b's layer at a small size: head dim 128 ≠ 256/4, the first
	// of two layers sliding over 64 positions, caps 50 and 30.
	smallGemma2 = ir.HParams{Arch: "gemma2", Name: "gemma2-small", ContextLength: 256, Embedding: 256, Layers: 2, FFN: 512,
		Heads: 4, HeadsKV: 2, HeadDim: 128, RopeBase: 10000, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 1000,
		TiedEmbedding: true, AttnScale: 0.0625, AttnSoftcap: 50, FinalSoftcap: 30, SlidingWindow: 64, SlidingPattern: 2}
	// gemma3-12b's: two sliding layers (window 64, base 10000) to one
	// global (base 1e6, linear 8), q/k norms, head dim 256 (no flash).
	smallGemma3 = ir.HParams{Arch: "gemma3", Name: "gemma3-small", ContextLength: 256, Embedding: 256, Layers: 3, FFN: 512,
		Heads: 2, HeadsKV: 1, HeadDim: 256, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 1000,
		TiedEmbedding: true, AttnScale: 0.0625, SlidingWindow: 64, SlidingPattern: 3, RopeBaseLocal: 10000, QKNorm: true,
		RopeScaling: ir.RopeScaling{Type: "linear", Factor: 8}}
)

// gemmaSynthTensors is synthTensors with Gemma's post-norms.
func gemmaSynthTensors(hp ir.HParams, mt, vt dtype.Type) tensorList {
	m := synthTensors(hp, mt, vt)
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

// gemmaLowerCases are the Gemma graphs lowered as the runtime lowers them:
// decode of one and of eight sequences, prefill (with and without the
// tensor-core attention), the 8-bit cache.
func gemmaLowerCases() []lowerCase {
	g2 := func(t *testing.T) *ir.Graph {
		return buildGraph(t, smallGemma2, gemmaSynthTensors(smallGemma2, dtype.Q4_K, dtype.Q6_K))
	}
	g3 := func(t *testing.T) *ir.Graph {
		return buildGraph(t, smallGemma3, gemmaSynthTensors(smallGemma3, dtype.Q8_0, dtype.Q8_0))
	}
	dec := LowerOptions{Class: Decode, MaxSeqs: 8, Context: 256, Cache: dtype.F16, Argmax: true, Sample: true, DecodePreload: true}
	one := dec
	one.MaxSeqs, one.RopeInProduct, one.Pick = 1, true, pickTails
	pre := LowerOptions{Class: Prefill, MaxTokens: 128, MaxSeqs: 4, Context: 256, Cache: dtype.F16, Argmax: true, FlashPrefill: true}
	q8 := dec
	q8.Cache = CacheQ8
	exact := LowerOptions{Class: Prefill, MaxTokens: 64, MaxSeqs: 2, Context: 256, Cache: dtype.F32, PrefillGEMV: true}
	var cs []lowerCase
	for _, m := range []struct {
		name string
		g    func(t *testing.T) *ir.Graph
	}{{"gemma2", g2}, {"gemma3", g3}} {
		cs = append(cs, lowerCase{m.name + "_decode", m.g, dec}, lowerCase{m.name + "_decode1", m.g, one},
			lowerCase{m.name + "_prefill", m.g, pre}, lowerCase{m.name + "_decode_q8", m.g, q8}, lowerCase{m.name + "_exact", m.g, exact})
	}
	return cs
}

// GemmaProgramsForTest lowers every Gemma case (for the compile gate).
func GemmaProgramsForTest(t *testing.T) map[string]*Program {
	out := map[string]*Program{}
	for _, c := range gemmaLowerCases() {
		p, err := Lower(c.g(t), c.opts)
		require.NoError(t, err, c.name)
		out[c.name] = p
	}
	return out
}

func TestLowerGemma(t *testing.T) {
	for _, c := range gemmaLowerCases() {
		t.Run(c.name, func(t *testing.T) {
			g := c.g(t)
			p, err := Lower(g, c.opts)
			require.NoError(t, err)
			require.NoError(t, p.Buffers.Check())
			hp := map[string]ir.HParams{"gemma2": smallGemma2, "gemma3": smallGemma3}[g.Arch]
			L := hp.Layers
			require.Equal(t, 1, launchesOf(p, "scale"), "the embeddings times √dim")
			// a one-sequence decode program's post-norms are in the output and
			// down products before them (XQEnds.PostNorm), with a ticket a block row
			postNorms, inProducts := 2*L, 0
			if c.opts.Class == Decode && c.opts.MaxSeqs == 1 {
				postNorms, inProducts = 0, 2*L
				require.Positive(t, p.Tickets)
			}
			require.Equal(t, postNorms, launchesOf(p, "postnorm_add"), "two post-norms a layer")
			// in decode programs each post-norm also quantises the new rows for
			// the XQ 2 products after the next norm, which then read them
			fused, products := 0, 0
			for i, ln := range p.Launches {
				k := p.Kernels[ln.Kernel]
				if strings.HasPrefix(k.Name, "gemv_") && strings.Contains(k.Name, "_pn256_") {
					products++
					require.Equal(t, ArgTickets, ln.Args[8].Kind)
				}
				if strings.HasPrefix(k.Name, "postnorm_add_xq_") || strings.Contains(k.Name, "_pn256_") {
					fused++
					xq := ln.Args[4]
					if strings.HasPrefix(k.Name, "gemv_") {
						xq = ln.Args[7]
					}
					read := false
					for _, next := range p.Launches[i+1:] {
						read = read || slices.Contains(next.Args, xq)
					}
					require.True(t, read, "L%d's quantised rows are read", i)
				}
			}
			require.Equal(t, inProducts, products, "post-norms in the products")
			if c.opts.Class == Decode {
				require.Equal(t, 2*L, fused, "every post-norm quantises for the next norm's products")
			} else {
				require.Zero(t, fused, "prefill products read float rows")
			}
			// a one-sequence decode program's gate/up products compute the
			// GeGLU and quantise it for the down product, which reads those
			// rows (XQEnds.GeLU); the other programs launch it
			geglus, gated := L, 0
			if c.opts.Class == Decode && c.opts.MaxSeqs == 1 {
				geglus = 0
			}
			for i, ln := range p.Launches {
				if k := p.Kernels[ln.Kernel]; strings.HasPrefix(k.Name, "gemv_") && strings.Contains(k.Name, "_go_") {
					gated++
					xo := ln.Args[2]
					next := p.Launches[i+1]
					require.Contains(t, next.Args, xo, "L%d's gated rows are the next product's input", i)
					require.True(t, strings.HasPrefix(p.Kernels[next.Kernel].Name, "gemv_"), p.Kernels[next.Kernel].Name)
				}
			}
			require.Equal(t, geglus, launchesOf(p, "geglu"))
			require.Equal(t, L-geglus, gated, "gate/up products with the GeGLU epilogue")
			// a one-sequence decode program's QKV products do RoPE's work (and
			// Gemma 3's q/k norms) in the block that finishes a head last
			// (XQEnds.HeadRope); the others, and the 8-bit cache's, launch it
			ropes, headRopes := L, 0
			if c.opts.Class == Decode && c.opts.MaxSeqs == 1 && c.opts.Cache != CacheQ8 {
				ropes = 0
			}
			tag := map[bool]string{true: "_hropenh_", false: "_hropeh_"}[hp.QKNorm]
			for _, ln := range p.Launches {
				if k := p.Kernels[ln.Kernel]; strings.HasPrefix(k.Name, "gemv_") && strings.Contains(k.Name, tag) {
					headRopes++
					require.Equal(t, ArgTickets, ln.Args[len(ln.Args)-1].Kind, k.Name)
				}
			}
			if c.opts.Class == Decode {
				require.Equal(t, ropes, launchesOf(p, "rope_kv"))
				require.GreaterOrEqual(t, headRopes, L-ropes, "QKV products with the head RoPE epilogue")
			}
			require.Zero(t, launchesOf(p, "swiglu"))
			caps := 0
			if hp.FinalSoftcap > 0 {
				caps = 1
			}
			require.Equal(t, caps, launchesOf(p, "softcap"))
			require.Equal(t, hp.VocabSize, p.Buffers.Buffers[p.Logits].Width)
			// every launch's arguments match its kernel, within the buffers' live ranges
			for i, ln := range p.Launches {
				k := p.Kernels[ln.Kernel]
				require.Len(t, ln.Args, len(k.Params), "L%d %s", i, k.Name)
				for _, a := range ln.Args {
					if a.Kind == ArgBuffer {
						b := p.Buffers.Buffers[a.Index]
						require.True(t, b.First <= i && i <= b.Last, "L%d uses b%d outside its live range", i, a.Index)
					}
				}
			}
			// attention: the sliding layers' kernels carry the window, the
			// global ones none; Gemma 2's all carry the cap
			var attn []string
			for _, ln := range p.Launches {
				k := p.Kernels[ln.Kernel]
				if strings.HasPrefix(k.Family, "attn_") && !strings.Contains(k.Name, "combine") {
					attn = append(attn, k.Name)
					if c.opts.Class == Decode {
						arm := c.opts.Arms.WithDefaults().Decode
						splits := ln.Args[len(ln.Args)-1]
						require.Equal(t, ArgConst, splits.Kind)
						want := arm.Splits(c.opts.Context)
						if strings.Contains(k.Name, "_win") {
							want = arm.Splits(min(c.opts.Context, hp.SlidingWindow))
						}
						require.Equal(t, want, splits.Value, "%s: splits over the window's keys", k.Name)
					}
				}
			}
			require.Len(t, attn, L)
			for l, name := range attn {
				require.Equal(t, hp.Sliding(l), strings.Contains(name, fmt.Sprintf("_win%d", hp.SlidingWindow)), "layer %d: %s", l, name)
				require.Equal(t, hp.AttnSoftcap > 0, strings.Contains(name, "_cap50"), "layer %d: %s", l, name)
			}
			if c.opts.FlashPrefill && g.Arch == "gemma2" {
				require.Equal(t, L, launchesOf(p, "attn_flash"), "head dim 128 on tensor cores")
			}
		})
	}
}
