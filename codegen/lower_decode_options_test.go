package codegen

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// The decode program's options beyond the products' arms: RoPE in the
// product, the one-row products split over blocks, decode attention's
// preload and live-length arms.
// TestLowerRopeInProduct: with LowerOptions.RopeInProduct, a llama-style
// decode program (adjacent RoPE pairs, no bias, no q/k norm) launches no
// RopeKV: the QKV products (Q and K over Q4_K, V over Q6_K) carry the RoPE
// epilogue in every kernel but the tensor-core one, which they drop, take
// the positions, cache rows, inverse frequencies and the layer's caches,
// and write their columns of the fused row; the kernels they had before
// are gone from the program. NeoX RoPE (qwen3), prefill and the 8-bit
// cache (quantised by a block of 32 per warp) keep RopeKV, and so does the
// option's absence.
func TestLowerRopeInProduct(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	count := launchesOf
	o := LowerOptions{Class: Decode, MaxSeqs: GEMVLargeRows, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch}
	o.Arms.GEMVLarge = DefaultXQMMAPipeArm // the int8 arm, which takes the RoPE epilogue (XQ 4 does not)
	p, err := Lower(g, o)
	require.NoError(t, err)
	require.Equal(t, llama.Layers, count(p, "rope_kv"))
	products := count(p, "gemv")

	o.RopeInProduct = true
	p, err = Lower(g, o)
	require.NoError(t, err)
	require.Zero(t, count(p, "rope_kv"))
	require.Equal(t, products, count(p, "gemv"))
	hd := llama.HeadDim
	qkv := (llama.Heads + 2*llama.HeadsKV) * hd
	used := map[int]bool{}
	ropes := 0
	for _, ln := range p.Launches {
		used[ln.Kernel] = true
		if ln.One > 0 {
			used[ln.One-1] = true
		}
		if ln.Large > 0 {
			used[ln.Large-1] = true
		}
		name := p.Kernels[ln.Kernel].Name
		if !strings.Contains(name, "_rope_") {
			continue
		}
		ropes++
		require.Zero(t, ln.Large, "the XQ 3 kernel has no RoPE epilogue")
		require.Contains(t, p.Kernels[ln.One-1].Name, "_rope_")
		require.Equal(t, p.Kernels[ln.Kernel].Params, p.Kernels[ln.One-1].Params)
		require.Len(t, ln.Args, 9)
		require.Equal(t, []ArgKind{ArgWeight, ArgBuffer, ArgBuffer, ArgRows, ArgInput, ArgInput, ArgWeight, ArgKCache, ArgVCache},
			[]ArgKind{ln.Args[0].Kind, ln.Args[1].Kind, ln.Args[2].Kind, ln.Args[3].Kind, ln.Args[4].Kind, ln.Args[5].Kind, ln.Args[6].Kind, ln.Args[7].Kind, ln.Args[8].Kind})
		require.Equal(t, []int{int(InPositions), int(InSlots)}, []int{ln.Args[4].Index, ln.Args[5].Index})
		require.Equal(t, ln.Args[7].Index, ln.Args[8].Index, "one layer's caches")
		// Q and K (Q4_K) from column 0, V (Q6_K) from column q + k
		switch {
		case strings.Contains(name, "q4_k"):
			require.Contains(t, name, fmt.Sprintf("_n%d_", (llama.Heads+llama.HeadsKV)*hd))
			require.Contains(t, name, "_c0_")
			require.Equal(t, 0, ln.Args[2].Offset)
		default:
			require.Contains(t, name, fmt.Sprintf("_n%d_", llama.HeadsKV*hd))
			require.Contains(t, name, fmt.Sprintf("_c%d_", (llama.Heads+llama.HeadsKV)*hd))
			require.Equal(t, 4*(llama.Heads+llama.HeadsKV)*hd, ln.Args[2].Offset)
		}
		require.Contains(t, name, fmt.Sprintf("_ys%d", qkv))
	}
	require.Equal(t, 2*llama.Layers, ropes)
	used[p.StepInputs] = true // launched by the runtime before the launches
	require.Len(t, used, len(p.Kernels), "every kernel of the program is launched")

	for _, c := range []struct {
		name string
		hp   ir.HParams
		o    LowerOptions
	}{{"neox", smallQwen3, o}, {"prefill", llama, LowerOptions{Class: Prefill, MaxSeqs: 2, MaxTokens: 64, Context: 256, Cache: dtype.F16, RopeInProduct: true}},
		{"8-bit cache", llama, func() LowerOptions { o := o; o.Cache = CacheQ8; return o }()}} {
		p, err := Lower(buildGraph(t, c.hp, synthTensors(c.hp, dtype.Q4_K, dtype.Q6_K)), c.o)
		require.NoError(t, err, c.name)
		require.Equal(t, c.hp.Layers, count(p, "rope_kv"), c.name)
	}
}

// TestLowerGEMVSplit: with LowerOptions.GEMVSplitBlocks, the one-row
// products whose unsplit arm has fewer blocks than that (attention output,
// down, V: 8, 8 and 4 blocks of 32 rows against 9) run their XQ 2 arm with
// twice the threads, two warps a row set splitting K, their epilogues
// (quantised output, RoPE) kept; the larger ones (Q and K: 12 blocks; gate
// and up) and the option's absence keep the unsplit arm. GEMVSplitRows
// replaces the rule by a row count, and a tunedb pick runs as picked.
func TestLowerGEMVSplit(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 1, Context: 256, Cache: dtype.F16, RopeInProduct: true}
	arms := func(o LowerOptions) map[int][]string { // the products' arms by row count
		p, err := Lower(g, o)
		require.NoError(t, err)
		by := map[int][]string{}
		re := regexp.MustCompile(`^gemv_\w+?_n(\d+)_k\d+.*_(t\d+_r\d+_u\d+_s\d+_l1_g1_w\d)$`)
		for _, ln := range p.Launches {
			k := p.Kernels[ln.Kernel]
			if k.Family != "gemv" {
				continue
			}
			m := re.FindStringSubmatch(k.Name)
			require.NotNil(t, m, k.Name)
			n, _ := strconv.Atoi(m[1])
			by[n] = append(by[n], m[2])
		}
		return by
	}
	plain := arms(o)
	qk := (llama.Heads + llama.HeadsKV) * llama.HeadDim
	for _, c := range []struct {
		name   string
		blocks int
		rows   int
	}{{"fewer blocks than 9", 9, 0}, {"at most 256 rows", 0, llama.Embedding}} {
		o := o
		o.GEMVSplitBlocks, o.GEMVSplitRows = c.blocks, c.rows
		split := arms(o)
		require.Equal(t, len(plain), len(split), c.name)
		for n, as := range split {
			for i, a := range as {
				want := plain[n][i]
				if n <= llama.Embedding {
					want = strings.Replace(want, "t256_", "t512_", 1)
				}
				require.Equal(t, want, a, "%s: %d rows", c.name, n)
			}
		}
		for _, n := range []int{llama.HeadsKV * llama.HeadDim, llama.Embedding} {
			require.NotEmpty(t, split[n], c.name)
			require.True(t, strings.HasPrefix(split[n][0], "t512_r8_"), "%s: %s", c.name, split[n][0])
		}
		require.True(t, strings.HasPrefix(split[qk][0], "t256_r8_"), c.name)
	}
	o.GEMVSplitBlocks = qk/32 + 1 // 13: Q and K split too
	require.True(t, strings.HasPrefix(arms(o)[qk][0], "t512_r8_"))
	o.GEMVSplitBlocks = 9

	// a tunedb pick runs as picked: the attention output product's unsplit arm stays unsplit
	outClass := ProductClass(dtype.Q4_K, llama.Embedding, llama.Heads*llama.HeadDim, true)
	o.Pick = func(family, class string) (Point, bool) {
		return DefaultXQGlobalOneArm.Point(), family == "gemv" && class == outClass
	}
	picked := arms(o)
	require.Contains(t, picked[llama.Embedding], "t256_r8_u1_s1_l1_g1_w4", "the picked output product")
	require.Contains(t, picked[llama.Embedding], "t512_r8_u1_s1_l1_g1_w4", "the down product, not picked, still split")
}

// TestLowerDecodePreload: with DecodePreload every decode attention reads
// its first keys before its wait, and the launch before it (the QKV
// product with RoPE in one-sequence programs, RopeKV in batch ones) runs
// the early-trigger variant of its kernel, which reads the same repacked
// matrix: the program's weights and layouts are those of the program
// without preload.
func TestLowerDecodePreload(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	for _, seqs := range []int{1, 2, 5, 64} {
		o := LowerOptions{Class: Decode, MaxSeqs: seqs, Context: 256, Cache: dtype.F16, RopeInProduct: seqs == 1}
		plain, err := Lower(g, o)
		require.NoError(t, err)
		o.DecodePreload = true
		p, err := Lower(g, o)
		require.NoError(t, err)
		require.Equal(t, plain.Weights, p.Weights, "the same weights in the same layouts")
		require.Equal(t, len(plain.Launches), len(p.Launches))
		parts, early := 0, 0
		for i, ln := range p.Launches {
			k := p.Kernels[ln.KernelFor(seqs)]
			if strings.HasSuffix(k.Name, "_et") {
				early++
			}
			if !strings.HasPrefix(k.Name, "attn_part_") {
				continue
			}
			parts++
			// a verify step's entries share their sequence's pages and each
			// write one of its newest rows, which the kernel reads again
			// after its wait: the program's sequences, at most MaxSharedRows
			newest := min(seqs, MaxSharedRows)
			if newest == 1 {
				require.True(t, strings.HasSuffix(k.Name, "_p"), k.Name)
			} else {
				require.True(t, strings.HasSuffix(k.Name, fmt.Sprintf("_p%d", newest)), k.Name)
			}
			require.Contains(t, k.Source, fmt.Sprintf("#define NEWEST %d ", newest))
			require.Contains(t, k.Source, "if (j0 + j >= len - NEWEST) {")
			prev := p.Launches[i-1]
			for _, kp := range []int{prev.Kernel, prev.One - 1} {
				if kp < 0 {
					continue
				}
				pk := p.Kernels[kp]
				require.True(t, strings.HasSuffix(pk.Name, "_et"), pk.Name)
				require.True(t, strings.HasPrefix(pk.Source, "#ifndef MEMRA_PDL_EARLY\n#define MEMRA_PDL_EARLY"), pk.Name)
				require.Contains(t, pk.Source, " "+pk.Name+"(")
				if seqs == 1 {
					require.Contains(t, pk.Name, "_rope_")
				} else {
					require.True(t, strings.HasPrefix(pk.Name, "rope_kv_"), pk.Name)
				}
			}
			require.Equal(t, plain.Launches[i-1].Args, prev.Args)
		}
		require.Equal(t, llama.Layers, parts)
		require.Equal(t, parts, early, "only the launches before attention trigger early")
	}
	// a kernel with no launch trigger stays as it is
	k := &Kernel{Name: "plain", Source: "extern \"C\" __global__ void plain(int m) {}"}
	require.Same(t, k, k.EarlyTrigger())
	// qwen3 (q/k norms, NeoX RoPE): RopeKV before attention in the batch
	// program, the QKV products with the head norms and RoPE in the
	// one-sequence program (XQEnds.HeadRope)
	gq := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	for _, seqs := range []int{1, 2} {
		p, err := Lower(gq, LowerOptions{Class: Decode, MaxSeqs: seqs, Context: 256, Cache: dtype.F16, RopeInProduct: seqs == 1, DecodePreload: true, Pick: pickTails})
		require.NoError(t, err)
		for i, ln := range p.Launches {
			if strings.HasPrefix(p.Kernels[ln.Kernel].Name, "attn_part_") {
				prev := p.Kernels[p.Launches[i-1].Kernel].Name
				if seqs == 1 {
					require.True(t, strings.HasPrefix(prev, "gemv_") && strings.Contains(prev, "_hropenh_"), prev)
				} else {
					require.True(t, strings.HasPrefix(prev, "rope_kv_"), prev)
				}
				require.True(t, strings.HasSuffix(prev, "_et"), prev)
			}
		}
	}
}

// TestLowerDecodeLive3: a Live 3 decode arm takes the card's
// multiprocessors from LowerOptions (DefaultMultiprocessors without).
func TestLowerDecodeLive3(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	for sms, want := range map[int]string{0: "_l3_m132", 100: "_l3_m100"} {
		o := LowerOptions{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16, Multiprocessors: sms,
			Arms: Arms{Decode: DecodeArm{Threads: 256, Chunk: 128, Live: 3}}}
		p, err := Lower(g, o)
		require.NoError(t, err)
		n := 0
		for _, k := range p.Kernels {
			if k.Family == "attn_decode" {
				require.Contains(t, k.Name, want)
				n++
			}
		}
		require.Equal(t, 2, n, "the partial and the combine")
	}
}

// TestLowerDecodeLive3Pick: a tunedb entry of the live-length space can
// name Live 3 (the point has no SMs); lowering gives it the card's.
func TestLowerDecodeLive3Pick(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16, Multiprocessors: 114,
		Arms: Arms{Decode: DefaultDecodeLiveArm}}
	asked := false
	o.Pick = func(family, class string) (Point, bool) {
		if family != "attn_decode_live" {
			return nil, false
		}
		asked = true
		return DecodeArm{Threads: 128, Chunk: 128, Live: 3}.Point(), true
	}
	// attn lowers g under o and returns its decode attention kernels' names
	attn := func() []string {
		p, err := Lower(g, o)
		require.NoError(t, err)
		var names []string
		for _, k := range p.Kernels {
			if k.Family == "attn_decode" {
				names = append(names, k.Name)
			}
		}
		return names
	}
	names := attn()
	require.True(t, asked)
	require.Len(t, names, 2, "the partial and the combine")
	for _, n := range names {
		require.Contains(t, n, "t128_c128_l3_m114")
	}
	o.Pick = nil
	for _, n := range attn() {
		require.Contains(t, n, "t256_c128_l3_m114", "untuned: the default Live 3 arm at the card's multiprocessors")
	}
	o.BatchInvariant = true
	for _, n := range attn() {
		require.Contains(t, n, "t256_c128_l4_m114", "batch-invariant: Live 4, whose splits follow the length alone")
	}
}

// TestLowerDecodeFused: a tunedb pick with fuse runs decode attention as
// one launch a layer, the fused kernel bound to the program's tickets (a
// (sequence, kv head) each) and writing what the combine wrote: the int8
// rows the output projection reads, recorded so that no XQuant runs.
func TestLowerDecodeFused(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 3, Context: 256, Cache: dtype.F16, BatchInvariant: true, Arms: Arms{Decode: DefaultDecodeLiveArm}}
	lower := func(fuse bool) *Program {
		o.Pick = func(family, class string) (Point, bool) {
			if family != "attn_decode_live" {
				return nil, false
			}
			return DecodeArm{Threads: 256, Chunk: 32, Live: 3, Fuse: fuse}.Point(), true
		}
		p, err := Lower(g, o)
		require.NoError(t, err)
		return p
	}
	plain, fused := lower(false), lower(true)
	count := func(p *Program, prefix string) int {
		return launchesNamed(p, func(name string) bool { return strings.HasPrefix(name, prefix) })
	}
	layers := count(plain, "attn_part_")
	require.Positive(t, layers)
	require.Equal(t, layers, count(plain, "attn_combine_"))
	require.Zero(t, plain.Tickets)
	require.Equal(t, layers, count(fused, "attn_part_"))
	require.Zero(t, count(fused, "attn_combine_"))
	require.Len(t, fused.Launches, len(plain.Launches)-layers, "one launch a layer fewer, nothing else changed")
	require.Equal(t, count(plain, "xquant_"), count(fused, "xquant_"), "the fused kernel's int8 rows stand in for the combine's")
	require.Equal(t, layers*o.MaxSeqs*smallQwen3.HeadsKV, fused.Tickets, "counters of their own for each layer's launch")
	for i, ln := range fused.Launches {
		k := fused.Kernels[ln.Kernel]
		if !strings.HasPrefix(k.Name, "attn_part_") {
			continue
		}
		require.Contains(t, k.Name, "_t256_c32_l4_m132_", "Live 4 in the invariant class")
		require.True(t, strings.HasSuffix(k.Name, "_f_xq"), "fused, writing int8 rows: %s", k.Name)
		require.Len(t, ln.Args, len(k.Params))
		require.Equal(t, ArgTickets, ln.Args[9].Kind)
		next := fused.Kernels[fused.Launches[i+1].Kernel]
		require.Equal(t, "gemv", next.Family, "the output projection reads the fused kernel's rows")
		require.Equal(t, ln.Args[10], fused.Launches[i+1].Args[1], "its activations are the fused kernel's output")
	}
}

// TestTicketRegions: no two launches of a program count on the same
// launch counters (codegen.ArgTickets): kernels overlap under
// programmatic dependent launch, and a fused attention whose blocks took
// tickets the QKV product before it was still counting gave NaN logits.
// Every lowered test program: each ticket argument's region starts where
// no other launch's does, inside Program.Tickets, and the kernel after a
// launch with tickets waits for it (the tails trigger before their work).
func TestTicketRegions(t *testing.T) {
	progs := ProgramsForTest(t)
	for name, p := range GemmaProgramsForTest(t) {
		progs[name] = p
	}
	for name, p := range MoEProgramsForTest(t) {
		progs[name] = p
	}
	fused := 0
	for name, p := range progs {
		seen := map[int]int{}
		for i, ln := range p.Launches {
			for _, a := range ln.Args {
				if a.Kind != ArgTickets {
					continue
				}
				j, dup := seen[a.Offset]
				require.False(t, dup, "%s: L%d and L%d share counters at %d", name, j, i, a.Offset/4)
				seen[a.Offset] = i
				require.Less(t, a.Offset/4, p.Tickets, "%s: L%d", name, i)
				// a tail triggers the next launch before its work, so the
				// next kernel must wait for this grid before it ends
				if i+1 < len(p.Launches) {
					next := p.Kernels[p.Launches[i+1].Kernel]
					require.Contains(t, next.Source, "pdl_wait();", "%s: L%d's %s waits for L%d", name, i+1, next.Name, i)
				}
			}
		}
		if len(seen) > 1 {
			fused++
		}
	}
	require.Positive(t, fused, "programs with two or more ticket launches")
}

// pickTails is an ArmPicker that turns every last-block tail on (family
// "tail"), as a card's tunedb entries would, and picks nothing else.
func pickTails(family, class string) (Point, bool) {
	return TailArm{On: true}.Point(), family == "tail"
}

// TestTailArms: the one-sequence program's last-block tails are tunedb
// arms, off without an entry: gemma3's post-norms and head RoPE and the
// MoE model's quantising down product each run where an entry of family
// "tail" turns its class on, and only its class.
func TestTailArms(t *testing.T) {
	graphs := map[string]*ir.Graph{
		"gemma3": buildGraph(t, smallGemma3, gemmaSynthTensors(smallGemma3, dtype.Q4_K, dtype.Q6_K)),
		"moe":    buildGraph(t, smallQwen3MoE, synthMoETensors(smallQwen3MoE, dtype.Q4_K, dtype.Q6_K)),
	}
	tags := map[string]string{TailPostNorm: "_pn256_", TailHeadRope: "_hrope", TailQuantNext: "_qn"}
	count := func(p *Program, tag string) int {
		return launchesNamed(p, func(name string) bool { return strings.Contains(name, tag) })
	}
	for name, g := range graphs {
		o := LowerOptions{Class: Decode, MaxSeqs: 1, Context: 256, Cache: dtype.F16, RopeInProduct: true}
		off, err := Lower(g, o)
		require.NoError(t, err)
		require.Zero(t, off.Tickets, name)
		for class, tag := range tags {
			require.Zero(t, count(off, tag), "%s %s", name, class)
			o.Pick = func(family, c string) (Point, bool) { return TailArm{On: true}.Point(), family == "tail" && c == class }
			on, err := Lower(g, o)
			require.NoError(t, err)
			for other, otag := range tags {
				require.Equal(t, other == class && (name == "gemma3" || class != TailPostNorm) && (name == "moe" || class != TailQuantNext),
					count(on, otag) > 0, "%s with %s on: %s", name, class, other)
			}
		}
	}
}

// TestRopeAfterOwnHeadNorm: where the q/k norms run as a launch of their
// own (RopeKVNorm does not fit a head of 96: 48 pairs), RoPE stays a
// launch after them in a one-sequence program, not in the products before
// them (which would rotate before the norms), the tails on or off.
func TestRopeAfterOwnHeadNorm(t *testing.T) {
	hp := smallQwen3
	hp.Heads, hp.HeadDim, hp.RopeStyle = 8, 96, ir.RopeInterleaved
	g := buildGraph(t, hp, synthTensors(hp, dtype.Q4_K, dtype.Q6_K))
	for _, pick := range []ArmPicker{nil, pickTails} {
		p, err := Lower(g, LowerOptions{Class: Decode, MaxSeqs: 1, Context: 256, Cache: dtype.F16, RopeInProduct: true, Pick: pick})
		require.NoError(t, err)
		require.Equal(t, hp.Layers, launchesOf(p, "head_rmsnorm"))
		require.Equal(t, hp.Layers, launchesOf(p, "rope_kv"), "RoPE after the norms")
		require.Zero(t, launchesNamed(p, func(name string) bool { return strings.Contains(name, "_rope") }), "no product rotates")
	}
}

// TestNarrowTails: in a decode program of 2 to NarrowSeqs sequences, with
// the runtime's QuantOutBatch and int8 class, an entry of class narrow_quant_out turns the
// residual products' and the attention combine's quantising epilogues on
// (their XQuant launches gone, the SwiGLU's kept) and one of class
// narrow_rope RoPE in the QKV products (no RopeKV); wider programs and
// programs without the entries keep the launches.
func TestNarrowTails(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	pick := func(classes ...string) ArmPicker {
		return func(family, class string) (Point, bool) {
			return TailArm{On: true}.Point(), family == "tail" && slices.Contains(classes, class)
		}
	}
	lower := func(seqs int, p ArmPicker) (xquants, quantOuts, ropes, ropeKVs int) {
		// the runtime's default: the int8 class, no quantising epilogues in batch programs
		prog, err := Lower(g, LowerOptions{Class: Decode, MaxSeqs: seqs, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch, Pick: p,
			BatchInvariant: true, InvariantInt8: true})
		require.NoError(t, err)
		return launchesOf(prog, "xquant"), launchesNamed(prog, func(n string) bool { return strings.Contains(n, "_qo_") }),
			launchesNamed(prog, func(n string) bool { return strings.Contains(n, "_rope_") }), launchesOf(prog, "rope_kv")
	}
	L := llama.Layers
	for _, seqs := range []int{2, 5, NarrowSeqs} {
		xq, qo, ro, rk := lower(seqs, nil)
		require.Equal(t, []int{4*L + 1, 0, 0, L}, []int{xq, qo, ro, rk}, "%d sequences, no entries", seqs) // and the output head's
		xq, qo, ro, rk = lower(seqs, pick(TailNarrowQuantOut))
		// the first layer's QKV input and each SwiGLU's rows stay XQuant launches
		require.Equal(t, []int{L + 1, 2 * L, 0, L}, []int{xq, qo, ro, rk}, "%d sequences, quantising epilogues", seqs)
		xq, qo, ro, rk = lower(seqs, pick(TailNarrowRope))
		require.Equal(t, []int{4*L + 1, 0, 2 * L, 0}, []int{xq, qo, ro, rk}, "%d sequences, RoPE in the products", seqs) // Q and K over Q4_K, V over Q6_K
		xq, qo, ro, rk = lower(seqs, pick(TailNarrowQuantOut, TailNarrowRope))
		require.Equal(t, []int{L + 1, 2 * L, 2 * L, 0}, []int{xq, qo, ro, rk}, "%d sequences, both", seqs)
	}
	xq, qo, ro, rk := lower(NarrowSeqs+1, pick(TailNarrowQuantOut, TailNarrowRope))
	require.Equal(t, []int{4*L + 1, 0, 0, L}, []int{xq, qo, ro, rk}, "wider programs keep the launches")
}
