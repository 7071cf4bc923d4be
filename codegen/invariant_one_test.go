package codegen

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestLowerInvariantInt8One: in the int8 class of the batch-invariant
// configuration, the one-sequence decode program keeps its fused
// epilogues (the quantising ones and RoPE in the QKV products) and runs
// every XQ 2 product in the split and unroll of the decode program beside
// it (tunedb picks split over two warps with unroll 2: their one-row,
// quantising and batch kernels all keep that order, the ordered kernel
// from 16 rows too); and the kernels whose work the epilogues take over
// compute it through the same pinned functions: a group's float sum and
// sum of squares by XQuant's tree (warp_sum_up), a pair's rotation by
// rope_rot.
func TestLowerInvariantInt8One(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	split := GEMVArm{Threads: 512, RowsPerBlock: 8, Unroll: 2, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 1, RowsPerWarp: 4}
	require.Equal(t, 2, split.kSplit())
	pick := func(family, class string) (Point, bool) {
		if family != "gemv" || strings.Contains(class, "_batch") || strings.Contains(class, "_large") ||
			strings.Contains(class, "_small") || strings.Contains(class, "_wide") {
			return nil, false
		}
		return split.Point(), true
	}
	base := LowerOptions{Class: Decode, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch, BatchInvariant: true, InvariantInt8: true, Pick: pick}
	one := base
	one.MaxSeqs, one.RopeInProduct = 1, true
	dec := base
	dec.MaxSeqs = 64
	fused := map[string]int{}
	for _, o := range []LowerOptions{one, dec} {
		p, err := Lower(g, o)
		require.NoError(t, err)
		for _, ln := range p.Launches {
			if o.MaxSeqs > 1 && p.Kernels[ln.Kernel].Family == "gemv" && strings.Contains(p.Kernels[ln.Kernel].Name, "_l1_") {
				require.Equal(t, 22, kernelArm(t, p, ln.KernelFor(16)).Ordered, "%s: from 16 rows the ordered kernel of the split, unroll 2 order", p.Kernels[ln.KernelFor(16)].Name)
			}
			for _, k := range []int{ln.KernelFor(1), ln.KernelFor(2)} {
				kern := p.Kernels[k]
				name := kern.Name
				for _, e := range []string{"_qo_", "_so_", "_rope_", "attn_combine"} {
					if strings.Contains(name, e) && o.MaxSeqs == 1 {
						fused[e]++
					}
				}
				switch {
				case strings.Contains(name, "_qo_") || strings.Contains(name, "_so_") || (strings.HasPrefix(name, "attn_combine") && strings.HasSuffix(name, "_xq")):
					require.Contains(t, kern.Source, "warp_sum_up(", "%s quantises a group by XQuant's tree", name)
				case strings.HasPrefix(name, "xquant") && strings.Contains(name, "_norm"):
					require.Contains(t, kern.Source, "__fmul_rn(a.x, a.x)", "%s: pinned squares", name)
				}
				if strings.Contains(name, "_rope_") || strings.HasPrefix(name, "rope_kv") {
					require.Contains(t, kern.Source, "rope_rot(va, vb", "%s rotates by rope_rot", name)
					require.NotContains(t, kern.Source, "va * cs", name)
				}
				if kern.Family != "gemv" || !strings.Contains(name, "_l1_") {
					continue
				}
				if a := kernelArm(t, p, k); a.XQ == 2 {
					require.Equal(t, 2, a.kSplit(), "%s (%d sequences): split as the pick, in both programs", name, o.MaxSeqs)
					require.Equal(t, 2, a.Unroll, "%s (%d sequences): the pick's unroll", name, o.MaxSeqs)
				}
			}
		}
	}
	require.Positive(t, fused["_qo_"], "the one-sequence program quantises in its residual products")
	require.Positive(t, fused["_so_"], "… and in its gate/up products")
	require.Positive(t, fused["_rope_"], "… and rotates in its QKV products")
}

// kernelArm is the GEMV arm of p's kernel k, read back from its name.
func kernelArm(t *testing.T, p *Program, k int) GEMVArm {
	t.Helper()
	name := p.Kernels[k].Name
	a, err := ParseGEMVArm(name[strings.LastIndex(name, "_t")+1:])
	require.NoError(t, err, name)
	return a
}
