package codegen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// repackGolden is the layout-1 arm pinned by its golden file.
var repackGolden = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 4, SharedX: 1, Layout: 1}

func TestGEMVRepackedGolden(t *testing.T) {
	k, err := GEMV(dtype.Q4_K, 512, 256, false, repackGolden)
	require.NoError(t, err)
	require.Equal(t, "gemv_q4_k_n512_k256_t256_r8_u4_s1_l1", k.Name)
	path := filepath.Join("testdata", k.Name+".cu")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./codegen -run TestGEMVRepackedGolden -update")
	require.Equal(t, string(want), k.Source)
}

func TestGEMVRepackedKernels(t *testing.T) {
	for _, ty := range RepackTypes {
		for _, res := range []bool{false, true} {
			k, err := GEMV(ty, 1000, 512, res, GEMVArm{Threads: 128, RowsPerBlock: 2, Unroll: 8, SharedX: 1, Layout: 1})
			require.NoError(t, err, ty)
			require.NotContains(t, k.Source, "#include")
			require.Contains(t, k.Source, "rp_"+typeTag(ty)+"(")
			require.True(t, strings.HasSuffix(k.Name, "_l1"), k.Name)
			require.Equal(t, res, strings.Contains(k.Source, "] += acc;"))
			// the first weight loads come before the PDL wait, the activations after
			wait := strings.Index(k.Source, "    pdl_wait();")
			require.Positive(t, wait)
			require.Less(t, strings.Index(k.Source, "q[i] = "), wait)
			require.Greater(t, strings.Index(k.Source, "= xg[i];"), wait)
			g := k.Launch(Dims{Tokens: 3})
			require.Equal(t, [3]uint32{500, 3, 1}, g.Grid)
			require.Equal(t, uint32(4*512), g.Shared)
		}
	}
	for _, tc := range []struct {
		name string
		t    dtype.Type
		arm  GEMVArm
	}{
		{"type without layout", dtype.Q5_K, repackGolden},
		{"float type", dtype.F16, repackGolden},
		{"global activations", dtype.Q4_K, GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 4, SharedX: 0, Layout: 1}},
		{"layout 2", dtype.Q4_K, GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 4, SharedX: 1, Layout: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := GEMV(tc.t, 512, 256, false, tc.arm)
			require.ErrorIs(t, err, ErrUnsupported)
		})
	}
}

func TestGEMVSpaceLayout(t *testing.T) {
	sp, err := SpaceByName("gemv")
	require.NoError(t, err)
	names := map[string]bool{}
	for _, p := range sp.Arms() {
		names[sp.ArmName(p)] = true
		if p["layout"] == 1 {
			require.Equal(t, 1, p["shared_x"], p)
		} else {
			require.NotContains(t, p, "layout", "layout 0 is left out, as in old points")
		}
	}
	require.True(t, names["t256_r8_u4_s1_l1"])
	require.True(t, names["t256_r8_u4_s1"])
	require.False(t, names["t256_r8_u4_s0_l1"])
	require.Equal(t, "t256_r8_u4_s1", sp.ArmName(sp.Default))
	tests := []struct {
		name string
		p    Point
		ok   bool
	}{
		{"old point without layout", Point{"threads": 256, "rows_per_block": 8, "unroll": 4, "shared_x": 1}, true},
		{"explicit layout 0", Point{"threads": 256, "rows_per_block": 8, "unroll": 4, "shared_x": 1, "layout": 0}, true},
		{"layout 1", repackGolden.Point(), true},
		{"layout 1 global x", Point{"threads": 256, "rows_per_block": 8, "unroll": 4, "shared_x": 0, "layout": 1}, false},
		{"layout 3", Point{"threads": 256, "rows_per_block": 8, "unroll": 4, "shared_x": 1, "layout": 3}, false},
		{"unknown knob", Point{"threads": 256, "rows_per_block": 8, "unroll": 4, "shared_x": 1, "lay": 1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ok {
				require.NoError(t, sp.Valid(tc.p))
			} else {
				require.ErrorIs(t, sp.Valid(tc.p), ErrUnsupported)
			}
		})
	}
	require.Equal(t, repackGolden, GEMVArmOf(repackGolden.Point()))

	q4 := GEMVSpaceFor(dtype.Q4_K)
	f16 := GEMVSpaceFor(dtype.F16)
	require.NoError(t, q4.Valid(repackGolden.Point()))
	require.ErrorIs(t, f16.Valid(repackGolden.Point()), ErrUnsupported)
	require.NoError(t, f16.Valid(DefaultGEMVArm.Point()))
	require.Equal(t, sp.Size(), q4.Size())
	require.Less(t, f16.Size(), q4.Size())
	for _, p := range f16.Arms() {
		require.NotContains(t, p, "layout")
	}
}

// TestLowerRepacked lowers a tied-embedding model with a picker choosing
// layout 1 for every GEMV: products read repacked weights, and the tied
// table gets a repacked twin for the output GEMV while the embedding keeps
// the file's layout.
func TestLowerRepacked(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	// the base reads every weight in the file's layout
	opts := LowerOptions{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16, Arms: Arms{GEMVQuant: DefaultGEMVArm}}
	base, err := Lower(g, opts)
	require.NoError(t, err)
	opts.Pick = func(family, class string) (Point, bool) {
		if family == "gemv" && !strings.HasSuffix(class, "_batch") {
			return repackGolden.Point(), true
		}
		return nil, false
	}
	p, err := Lower(g, opts)
	require.NoError(t, err)
	require.Len(t, p.Weights, len(base.Weights)+1, "one twin: the tied embedding")
	require.Equal(t, len(base.Launches), len(p.Launches))
	var gemvs, twins int
	for i, ln := range p.Launches {
		k := p.Kernels[ln.Kernel]
		for _, a := range ln.Args {
			if a.Kind != ArgWeight {
				continue
			}
			w := p.Weights[a.Index]
			if k.Family == "gemv" {
				gemvs++
				require.Contains(t, k.Name, "_l1", k.Name)
				require.Positive(t, ln.One, "%s: a decode program of 2 sequences runs its own one-row kernel", k.Name)
				require.True(t, strings.HasSuffix(p.Kernels[ln.One-1].Name, "_l1"), p.Kernels[ln.One-1].Name)
				require.Equal(t, 1, w.Layout, "%s reads %s", k.Name, w.Name)
				bw := base.Weights[base.Launches[i].Args[0].Index]
				require.Equal(t, bw.Name, w.Name)
				require.Equal(t, bw.Parts, w.Parts)
				if w.Name == "token_embd.weight" {
					twins++
				}
			} else {
				require.Equal(t, 0, w.Layout, "%s reads %s", k.Name, w.Name)
			}
		}
	}
	var baseGEMVs int
	for _, ln := range base.Launches {
		if base.Kernels[ln.Kernel].Family == "gemv" {
			baseGEMVs++
		}
	}
	require.Equal(t, baseGEMVs, gemvs)
	require.Greater(t, gemvs, 2*smallQwen3.Layers)
	require.Equal(t, 1, twins)
	require.Contains(t, p.String(), "repacked")
	require.NotContains(t, base.String(), "repacked")

	// a picked layout-1 arm for a type without a repacked layout falls back to layout 0
	f16, err := Lower(buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.F16, dtype.F16)), opts)
	require.NoError(t, err)
	for _, k := range f16.Kernels {
		require.False(t, strings.HasSuffix(k.Name, "_l1"), k.Name)
	}
	for _, w := range f16.Weights {
		require.Equal(t, 0, w.Layout)
	}
}

// TestLowerBatchArm: repacked products of decode programs of two or more
// sequences launch the 16-row int8-activation arm (after XQuant), with no
// more rows a block than the program has sequences, for batches and the
// one-row arm for a single row; one-sequence programs, the exact configuration and a
// batch arm equal to the one-row arm keep a single kernel.
func TestLowerBatchArm(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	ones := func(o LowerOptions) (n int) {
		p, err := Lower(g, o)
		require.NoError(t, err)
		for _, ln := range p.Launches {
			if ln.One == 0 {
				continue
			}
			n++
			batch, one := p.Kernels[ln.Kernel], p.Kernels[ln.One-1]
			require.Equal(t, batch.Params, one.Params)
			require.Regexp(t, fmt.Sprintf(`_l1_g%d_`, min(16, o.MaxSeqs)), batch.Name)
			require.Regexp(t, `_l1_g1_`, one.Name)
			require.Equal(t, ln.One-1, ln.KernelFor(1))
			require.Equal(t, ln.Kernel, ln.KernelFor(2))
		}
		return n
	}
	o := LowerOptions{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16}
	require.Greater(t, ones(o), 2*smallQwen3.Layers)
	o.MaxSeqs = 64
	require.Greater(t, ones(o), 2*smallQwen3.Layers)
	o.MaxSeqs = 1
	require.Zero(t, ones(o))
	o.MaxSeqs, o.PrefillGEMV = 4, true
	require.Zero(t, ones(o))
	o.PrefillGEMV, o.Arms.GEMVBatch = false, DefaultXQGlobalOneArm
	require.Zero(t, ones(o))
	// the int8 invariant class puts its 16-row XQ 2 arm in place of a tensor-core batch arm:
	// capped at the program's sequences too
	o.Arms.GEMVBatch, o.BatchInvariant, o.InvariantInt8, o.MaxSeqs = DefaultXQMMAArm, true, true, 5
	require.Greater(t, ones(o), 2*smallQwen3.Layers)
}

// TestLowerFusedNorm: in decode programs the RMSNorm before products with
// GEMVNorm-capable arms (int8 activations staged by each block, XQ 1; f16
// with activations in shared memory) runs inside them: no rmsnorm
// launches, the products read the residual stream and the norm weight
// (f16 products only with FuseFloat). NoFusePrologue, the exact
// configuration and prefill keep the norm launches, and so do f16
// products without FuseFloat.
func TestLowerFusedNorm(t *testing.T) {
	family := launchesOf
	norms := 2*smallQwen3.Layers + 1
	for _, wt := range []dtype.Type{dtype.Q4_K, dtype.F16} {
		g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, wt, wt))
		xq1 := Arms{GEMVQuant: DefaultXQOneArm, GEMVBatch: DefaultXQBatchArm}
		o := LowerOptions{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16, Arms: xq1}
		p, err := Lower(g, o)
		require.NoError(t, err)
		if wt == dtype.F16 {
			require.Equal(t, norms, family(p, "rmsnorm"), "f16 products fuse only with FuseFloat")
			require.Equal(t, smallQwen3.Layers, family(p, "swiglu"))
			o.FuseFloat = true
			p, err = Lower(g, o)
			require.NoError(t, err)
		}
		require.Zero(t, family(p, "rmsnorm"), wt)
		require.Zero(t, family(p, "swiglu"), wt)
		fused, swi := 0, 0
		for _, ln := range p.Launches {
			k := p.Kernels[ln.Kernel]
			if strings.Contains(k.Name, "_swiglu") {
				swi++
				require.Equal(t, productParams(false), k.Params)
				gu := p.Buffers.Buffers[ln.Args[1].Index]
				require.Equal(t, 2*smallQwen3.FFN, gu.Width, "the down product reads the gate/up rows")
			}
			if !strings.Contains(k.Name, "_norm") || k.Family == "rope_kv" { // RopeKVNorm: the q/k norms
				continue
			}
			fused++
			require.Equal(t, "nw", k.Params[2].Name)
			require.Equal(t, WeightVector, p.Weights[ln.Args[2].Index].Kind)
			require.Equal(t, 0, p.Weights[ln.Args[2].Index].Layout)
			if ln.One > 0 {
				require.Equal(t, k.Params, p.Kernels[ln.One-1].Params)
			}
		}
		require.Equal(t, norms, fused, wt)
		require.Equal(t, smallQwen3.Layers, swi, wt)

		for _, o2 := range []LowerOptions{{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16, NoFusePrologue: true, Arms: xq1},
			{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16, PrefillGEMV: true},
			{Class: Prefill, MaxTokens: 64, MaxSeqs: 2, Context: 256, Cache: dtype.F16}} {
			p, err := Lower(g, o2)
			require.NoError(t, err)
			require.Equal(t, norms, family(p, "rmsnorm"), "%v %+v", wt, o2)
			require.Equal(t, smallQwen3.Layers, family(p, "swiglu"), "%v %+v", wt, o2)
			for _, k := range p.Kernels {
				require.NotContains(t, k.Name, "_norm")
				require.NotContains(t, k.Name, "_swiglu")
			}
		}
	}
}

// TestLowerFusedNormMixedTypes: when the products after a norm have
// different weight types (Q4_K_M's Q6_K attn_v), each run of one type (Q
// and K) is one product and (XQ 1) each normalises x itself; no norm
// launch remains.
func TestLowerFusedNormMixedTypes(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	p, err := Lower(g, LowerOptions{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16,
		Arms: Arms{GEMVQuant: DefaultXQOneArm, GEMVBatch: DefaultXQBatchArm}})
	require.NoError(t, err)
	norms, swiglus, fused := 0, 0, 0
	for _, ln := range p.Launches {
		k := p.Kernels[ln.Kernel]
		switch {
		case k.Family == "rmsnorm":
			norms++
		case k.Family == "swiglu":
			swiglus++
		case strings.Contains(k.Name, "_norm") && k.Family != "rope_kv":
			fused++
		}
	}
	require.Zero(t, norms)
	require.Zero(t, swiglus)
	// per layer: q and k together, v, gate/up together; then the output head
	require.Equal(t, 3*smallQwen3.Layers+1, fused)
	// q+k and v write their columns of one fused row: two launches, one
	// buffer, offsets 0 and q + k, rows of q + k + v
	hd := smallQwen3.HeadDim
	q, kv := smallQwen3.Heads*hd, smallQwen3.HeadsKV*hd
	found := false
	for i, ln := range p.Launches {
		k := p.Kernels[ln.Kernel]
		if !strings.Contains(k.Name, "_norm") || i+1 >= len(p.Launches) {
			continue
		}
		if !strings.Contains(p.Kernels[p.Launches[i+1].Kernel].Name, "_norm") {
			continue
		}
		off := 0
		for j, wd := range []int{q + kv, kv} {
			l := p.Launches[i+j]
			y := l.Args[3]
			name := p.Kernels[l.Kernel].Name
			require.Equal(t, p.Launches[i].Args[3].Index, y.Index, "one fused buffer")
			require.Equal(t, 4*off, y.Offset)
			require.Contains(t, name, fmt.Sprintf("_n%d_", wd))
			require.Contains(t, name, []string{"q4_k", "q6_k"}[j])
			require.Contains(t, name, fmt.Sprintf("_ys%d", q+2*kv))
			off += wd
		}
		found = true
		break
	}
	require.True(t, found, "two norm-fused products in a row")
}

// TestLowerXQGlobal: with XQ 2 arms (the defaults) every repacked decode product reads
// rows an XQuant launch wrote before it; the XQuant launches compute the
// norms and SwiGLUs (no rmsnorm or swiglu launch remains), Q, K and V of
// different types share one, and the batch kernel takes the one-row
// kernel's operands. A batch arm of the other int8 mode follows the
// one-row arm's; the exact configuration quantises nothing.
func TestLowerXQGlobal(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16}
	// the int8 large arm (from GEMVLargeRows rows, more than the program's):
	// the f16 one's XHalf rows from HalfLargeRows are TestLowerHalfFrom's
	o.Arms.GEMVLarge = DefaultXQMMAPipeArm
	// count lowers for seqs sequences and counts XQuant launches, products,
	// residual products quantising the next norm's rows and gate/up
	// products quantising the SwiGLU's, checking what every product reads
	count := func(seqs int) (quants, products, quantOuts, swigluOuts, combines int) {
		o := o
		o.MaxSeqs = seqs
		p, err := Lower(g, o)
		require.NoError(t, err)
		written := map[int]int{} // xq buffer → launches that wrote it
		for i, ln := range p.Launches {
			k := p.Kernels[ln.Kernel]
			require.NotEqual(t, "rmsnorm", k.Family)
			require.NotEqual(t, "swiglu", k.Family)
			switch {
			case k.Family == "xquant":
				quants++
				out := ln.Args[len(ln.Args)-2]
				require.Equal(t, "xq", k.Params[len(k.Params)-2].Name)
				written[out.Index]++
			case strings.HasSuffix(k.Name, "_xq"):
				// the decode attention's combine quantises for the output projection
				combines++
				require.Equal(t, "xo", k.Params[3].Name)
				written[ln.Args[3].Index]++
			case k.Family == "gemv":
				products++
				require.Equal(t, 1, written[ln.Args[1].Index], "launch %d %s reads rows nothing wrote before it", i, k.Name)
				require.Equal(t, XQRowBytes(k0(k.Name)), 4*p.Buffers.Buffers[ln.Args[1].Index].Width, k.Name)
				if seqs > 1 {
					require.Positive(t, ln.One, k.Name)
					require.Regexp(t, `_l1_g1_w4$`, p.Kernels[ln.One-1].Name)
					require.Equal(t, k.Params, p.Kernels[ln.One-1].Params)
				} else {
					require.Zero(t, ln.One, k.Name)
				}
				switch {
				case strings.Contains(k.Name, "_so_"):
					// gate/up: computes the SwiGLU and quantises it for the down product,
					// a block holding 32 gate and the same 32 up rows
					swigluOuts++
					require.Equal(t, xqSwiGLUOutParams, k.Params, k.Name)
					require.Regexp(t, `_rn_so_t512_r16_.*_l1_g1_w4$`, k.Name)
					written[ln.Args[2].Index]++
				case strings.Contains(k.Name, "_res_qo_"):
					// the residual products quantise the new row for the next norm's products,
					// their batch arm with whole groups of 32 rows a block
					quantOuts++
					require.Equal(t, xqQuantOutParams, k.Params, k.Name)
					require.Regexp(t, fmt.Sprintf(`_res_qo_.*_l1_g(%d|1)_w4$`, seqs), k.Name)
					written[ln.Args[5].Index]++
				case strings.Contains(k.Name, "_res_"):
					// without the epilogue: the residual add only
					require.Equal(t, xqGlobalParams, k.Params, k.Name)
					require.NotContains(t, k.Name, "_rn_")
				default:
					require.Equal(t, xqGlobalParams, k.Params, k.Name)
					if seqs > 1 {
						require.Regexp(t, fmt.Sprintf(`_l1_g%d_w2$`, seqs), k.Name) // the 16-row arm, at most seqs rows a block
					}
					// QKV, gate/up and the output head follow a norm: they scale by its 1/rms
					require.Contains(t, k.Name, "_rn_")
				}
			}
		}
		for _, w := range p.Weights {
			if strings.Contains(w.Name, "ffn_gate") {
				// the SwiGLU-output product reads the [gate | up] rows as every other product does
				require.Len(t, w.Parts, 2, w.Name)
				require.Contains(t, w.Parts[1].Name, "ffn_up", w.Name)
			}
		}
		return quants, products, quantOuts, swigluOuts, combines
	}
	// batches: XQuant launches for the first layer's QKV input (shared by the three products)
	// and per layer the SwiGLU; every later norm's rows come from the residual product before
	// it, the attention output's from the attention's combine. Products per layer: Q and K
	// (Q4_K, one product), V (Q6_K), the attention output, gate/up and down
	L := smallQwen3.Layers
	quants, products, quantOuts, swigluOuts, combines := count(4)
	require.Equal(t, []int{L + 1, 5*L + 1, 2 * L, 0, L}, []int{quants, products, quantOuts, swigluOuts, combines})
	// one sequence: the gate/up product also quantises the SwiGLU for the down product
	quants, products, quantOuts, swigluOuts, combines = count(1)
	require.Equal(t, []int{1, 5*L + 1, 2 * L, L, L}, []int{quants, products, quantOuts, swigluOuts, combines})
	// QuantOutBatch off (the runtime's default): batches quantise every product input
	// in an XQuant launch (QKV, attention output, gate/up, down per layer, and the
	// output head), one sequence still in the epilogues
	o.NoQuantOut = QuantOutBatch
	quants, products, quantOuts, swigluOuts, combines = count(4)
	require.Equal(t, []int{4*L + 1, 5*L + 1, 0, 0, 0}, []int{quants, products, quantOuts, swigluOuts, combines})
	quants, products, quantOuts, swigluOuts, combines = count(1)
	require.Equal(t, []int{1, 5*L + 1, 2 * L, L, L}, []int{quants, products, quantOuts, swigluOuts, combines})
	o.NoQuantOut = 0

	kinds := func(o LowerOptions) (xq, batch string) {
		p, err := Lower(g, o)
		require.NoError(t, err)
		for _, ln := range p.Launches {
			k := p.Kernels[ln.Kernel]
			if k.Family == "xquant" {
				xq = k.Name
			}
			if ln.One > 0 {
				batch = k.Name
			}
		}
		return xq, batch
	}
	o.Arms.GEMVBatch = DefaultXQBatchArm // XQ 1: follows the one-row arm, at most the program's 4 rows a block
	xq, batch := kinds(o)
	require.NotEmpty(t, xq)
	require.Regexp(t, `_g4_w4$`, batch)
	o.Arms = Arms{GEMVBatch: DefaultXQMMAArm} // tensor cores for batches read the same XQuant rows
	xq, batch = kinds(o)
	require.NotEmpty(t, xq)
	require.Regexp(t, `_m16_w2$`, batch)
	o.Arms = Arms{GEMVQuant: DefaultXQOneArm} // the one-row arm stages (XQ 1): so does the batch arm
	xq, batch = kinds(o)
	require.Empty(t, xq)
	require.Regexp(t, `_q16_w2$`, batch)
	o.Arms, o.PrefillGEMV = Arms{GEMVQuant: DefaultXQGlobalOneArm, GEMVBatch: DefaultXQGlobalBatchArm}, true
	xq, batch = kinds(o)
	require.Empty(t, xq)
	require.Empty(t, batch)
}

// k0 is the K of a product kernel's name (…_k4096_…).
func k0(name string) int {
	var k int
	for _, f := range strings.Split(name, "_") {
		if len(f) > 1 && f[0] == 'k' {
			if _, err := fmt.Sscanf(f, "k%d", &k); err == nil {
				return k
			}
		}
	}
	return 0
}

// TestLowerTunedBatchArm: a tunedb entry for a product's batch class
// (GEMVBatchClass) is the arm of its launches at two or more rows; the
// one-row kernel keeps its own arm.
func TestLowerTunedBatchArm(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	var asked []string
	o := LowerOptions{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16, Pick: func(family, class string) (Point, bool) {
		if family == "gemv" && strings.HasSuffix(class, "_batch") {
			asked = append(asked, class)
			return DefaultXQMMAArm.Point(), true
		}
		return nil, false
	}}
	p, err := Lower(g, o)
	require.NoError(t, err)
	require.NotEmpty(t, asked)
	batches := 0
	for _, ln := range p.Launches {
		if ln.One == 0 {
			continue
		}
		batches++
		require.Regexp(t, `_m16_w2$`, p.Kernels[ln.Kernel].Name)
		require.Regexp(t, `_g1_w4$`, p.Kernels[ln.One-1].Name)
	}
	require.Equal(t, 5*smallQwen3.Layers+1, batches) // per layer q+k, v (Q6_K), o, gate/up, down
}

// TestLowerLargeArm: in programs of GEMVLargeRows sequences or more, the
// launches of repacked products take a third kernel (Launch.Large, the
// pipelined tensor-core DefaultXQMMAPipeArm) at steps of that many rows, the batch
// kernel below and the one-row kernel at one, also over a tunedb pick of
// an XQ 2 batch arm; not in smaller programs, not over a tensor-core batch
// pick, not when the large arm is the batch arm, and not for the residual
// products whose epilogue quantises the next norm's rows (XQ 3 has no
// such epilogue).
func TestLowerLargeArm(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: GEMVLargeRows, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch}
	o.Arms.GEMVLarge = DefaultXQMMAPipeArm // the int8 arm (the f16 default: TestLowerHalfLarge)
	// count lowers and returns the launches with a batch kernel and those with a large one
	count := func(o LowerOptions) (batches, larges int) {
		p, err := Lower(g, o)
		require.NoError(t, err)
		for _, ln := range p.Launches {
			if ln.One == 0 {
				require.Zero(t, ln.Large)
				continue
			}
			batches++
			require.Equal(t, ln.One-1, ln.KernelFor(1))
			require.Equal(t, ln.Kernel, ln.KernelFor(GEMVLargeRows-1))
			// w4: fitted to a quantising epilogue; no more rows a block than the program's sequences
			require.Regexp(t, fmt.Sprintf(`_g%d_w[24]$`, min(16, o.MaxSeqs)), p.Kernels[ln.Kernel].Name)
			if ln.Large == 0 {
				require.Equal(t, ln.Kernel, ln.KernelFor(GEMVLargeRows))
				continue
			}
			larges++
			require.Equal(t, ln.Large-1, ln.KernelFor(GEMVLargeRows))
			require.Equal(t, ln.Large-1, ln.KernelFor(64))
			require.Regexp(t, `_m16_w2_p2$`, p.Kernels[ln.Large-1].Name)
			require.Contains(t, p.Kernels[ln.Large-1].Source, "cp.async")
			require.Equal(t, p.Kernels[ln.Kernel].Params, p.Kernels[ln.Large-1].Params)
		}
		return batches, larges
	}
	products := 5*smallQwen3.Layers + 1 // per layer q+k, v (Q6_K), o, gate/up, down; the output head
	b, lg := count(o)
	require.Equal(t, []int{products, products}, []int{b, lg})
	small := o
	small.MaxSeqs = GEMVLargeRows - 1
	b, lg = count(small)
	require.Equal(t, []int{products, 0}, []int{b, lg})
	same := o
	same.Arms.GEMVLarge = DefaultXQGlobalBatchArm
	b, lg = count(same)
	require.Equal(t, []int{products, 0}, []int{b, lg})
	tuned := o
	pick := DefaultXQGlobalBatchArm
	pick.Unroll = 2
	tuned.Pick = func(family, class string) (Point, bool) {
		if family == "gemv" && strings.HasSuffix(class, "_batch") {
			return pick.Point(), true
		}
		return nil, false
	}
	p, err := Lower(g, tuned)
	require.NoError(t, err)
	for _, ln := range p.Launches {
		if ln.One > 0 {
			require.Contains(t, p.Kernels[ln.Kernel].Name, "_u2_", "the tuned batch arm")
			require.Regexp(t, `_m16_w2_p2$`, p.Kernels[ln.Large-1].Name)
		}
	}
	mma := tuned
	mma.Pick = func(family, class string) (Point, bool) {
		if family == "gemv" && strings.HasSuffix(class, "_batch") {
			return DefaultXQMMAArm.Point(), true
		}
		return nil, false
	}
	p, err = Lower(g, mma)
	require.NoError(t, err)
	for _, ln := range p.Launches {
		require.Zero(t, ln.Large, "a tensor-core batch pick serves every batch step")
	}
	// the batch programs' epilogues on: the attention output and down products quantise
	// the next norm's rows, so only the other products have a large kernel
	epi := o
	epi.NoQuantOut = 0
	b, lg = count(epi)
	require.Equal(t, []int{products, products - 2*smallQwen3.Layers}, []int{b, lg})
}
