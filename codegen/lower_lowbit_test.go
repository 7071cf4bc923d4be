package codegen

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// smallLlama is a llama layer at a small size (adjacent RoPE pairs, an
// output head of its own, embeddings in the main type).
var smallLlama = ir.HParams{Arch: "llama", Name: "llama-small", ContextLength: 256, Embedding: 256, Layers: 2, FFN: 512,
	Heads: 4, HeadsKV: 2, HeadDim: 64, RopeBase: 500000, RopeStyle: ir.RopeInterleaved, RMSEps: 1e-5, VocabSize: 1000}

// lowBitLowerCases lower models of the low-bit types as the runtime does:
// Q3_K with Q4_K attn_v/ffn_down (a Q3_K_M file), IQ4_XS with Q2_K, and
// Q2_K with IQ4_NL, each in decode (one sequence and eight), prefill and
// the exact configuration.
func lowBitLowerCases() []lowerCase {
	dec := LowerOptions{Class: Decode, MaxSeqs: 8, Context: 256, Cache: dtype.F16, Argmax: true, Sample: true, DecodePreload: true}
	one := dec
	one.MaxSeqs, one.RopeInProduct = 1, true
	small := dec
	small.SmallBatch = true
	pre := LowerOptions{Class: Prefill, MaxTokens: 128, MaxSeqs: 4, Context: 256, Cache: dtype.F16, Argmax: true, FlashPrefill: true}
	exact := LowerOptions{Class: Prefill, MaxTokens: 64, MaxSeqs: 2, Context: 256, Cache: dtype.F32, PrefillGEMV: true}
	var cs []lowerCase
	for _, m := range []struct {
		name   string
		mt, vt dtype.Type
	}{{"q3_k_m", dtype.Q3_K, dtype.Q4_K}, {"iq4_xs+q2_k", dtype.IQ4_XS, dtype.Q2_K}, {"q2_k+iq4_nl", dtype.Q2_K, dtype.IQ4_NL}} {
		g := func(t *testing.T) *ir.Graph { return buildGraph(t, smallLlama, synthTensors(smallLlama, m.mt, m.vt)) }
		cs = append(cs, lowerCase{m.name + "_decode", g, dec}, lowerCase{m.name + "_decode1", g, one}, lowerCase{m.name + "_small", g, small},
			lowerCase{m.name + "_prefill", g, pre}, lowerCase{m.name + "_exact", g, exact})
	}
	return cs
}

// LowBitProgramsForTest lowers every low-bit case (for the compile gate).
func LowBitProgramsForTest(t *testing.T) map[string]*Program {
	out := map[string]*Program{}
	for _, c := range lowBitLowerCases() {
		p, err := Lower(c.g(t), c.opts)
		require.NoError(t, err, c.name)
		out[c.name] = p
	}
	return out
}

// Models of the low-bit types lower: their embedding lookups, decode
// products (the output head's too) and prefill products are kernels of
// their own type on the file's layout (no repacked arm, no int8 or f16
// activations: those exist for the repacked types only), and the plans
// are sound.
func TestLowerLowBit(t *testing.T) {
	for _, c := range lowBitLowerCases() {
		t.Run(c.name, func(t *testing.T) {
			p, err := Lower(c.g(t), c.opts)
			require.NoError(t, err)
			require.NoError(t, p.Buffers.Check())
			families := map[string]bool{}
			for _, k := range p.Kernels {
				for _, ty := range []dtype.Type{dtype.Q2_K, dtype.Q3_K, dtype.IQ4_NL, dtype.IQ4_XS} {
					if !strings.Contains(k.Name, "_"+typeTag(ty)+"_") {
						continue
					}
					require.Contains(t, k.Source, dqFunc(ty)+"(", k.Name)
					require.NotContains(t, k.Name, "_l1", "a repacked arm for %v: %s", ty, k.Name)
					families[k.Family] = true
				}
			}
			for _, l := range p.Launches {
				k := p.Kernels[l.Kernel]
				for _, alt := range []int{l.One, l.Large} {
					if alt > 0 && strings.Contains(p.Kernels[alt-1].Name, "_l1") {
						require.NotRegexp(t, `_(q2_k|q3_k|iq4_nl|iq4_xs)_`, k.Name, "a launch of a low-bit product with a repacked alternative")
					}
				}
			}
			want := []string{"embedding"}
			switch {
			case c.opts.Class == Prefill && !c.opts.PrefillGEMV:
				want = append(want, "mma", "gemv") // the output head of the last tokens is a GEMV
			case c.opts.SmallBatch:
				want = append(want, "gemm_small")
			default:
				want = append(want, "gemv")
			}
			for _, f := range want {
				require.True(t, families[f], "no %s kernel of a low-bit type in %v", f, families)
			}
		})
	}
}
