package codegen

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

var (
	smallQwen3MoE = ir.HParams{Arch: "qwen3moe", Name: "qwen3moe-small", ContextLength: 256, Embedding: 256, Layers: 2, FFN: 512,
		Heads: 4, HeadsKV: 2, HeadDim: 64, RopeBase: 1e6, RopeStyle: ir.RopeHalf, RMSEps: 1e-6, VocabSize: 1000, QKNorm: true,
		Experts: 16, ExpertsUsed: 4, ExpertFFN: 256, ExpertNorm: true}
	smallMixtral = ir.HParams{Arch: "mixtral", Name: "mixtral-small", ContextLength: 256, Embedding: 256, Layers: 2, FFN: 512,
		Heads: 4, HeadsKV: 2, HeadDim: 64, RopeBase: 1e6, RMSEps: 1e-5, VocabSize: 1000,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 512, ExpertNorm: true}
)

// synthMoETensors lists the tensors of a mixture-of-experts model of hp:
// synthTensors' with a router (F32) and expert tensors (gate and up of mt,
// down of dt) in place of the dense feed-forward.
func synthMoETensors(hp ir.HParams, mt, dt dtype.Type) tensorList {
	m := synthTensors(hp, mt, mt)
	for l := 0; l < hp.Layers; l++ {
		b := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		for _, s := range []string{"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"} {
			delete(m, b(s))
		}
		add := func(name string, t dtype.Type, ne ...int) {
			m[name] = struct {
				t  dtype.Type
				ne []int
			}{t, ne}
		}
		E, F, X := hp.Embedding, hp.ExpertFFN, hp.Experts
		add(b("ffn_gate_inp.weight"), dtype.F32, E, X)
		add(b("ffn_gate_exps.weight"), mt, E, F, X)
		add(b("ffn_up_exps.weight"), mt, E, F, X)
		add(b("ffn_down_exps.weight"), dt, F, E, X)
	}
	return m
}

func moeLowerCases() []lowerCase {
	qwen := func(t *testing.T) *ir.Graph {
		return buildGraph(t, smallQwen3MoE, synthMoETensors(smallQwen3MoE, dtype.Q4_K, dtype.Q6_K))
	}
	mixtral := func(t *testing.T) *ir.Graph {
		return buildGraph(t, smallMixtral, synthMoETensors(smallMixtral, dtype.Q8_0, dtype.Q8_0))
	}
	dec := LowerOptions{Class: Decode, MaxSeqs: 8, Context: 256, Cache: dtype.F16, Argmax: true}
	one := LowerOptions{Class: Decode, MaxSeqs: 1, Context: 256, Cache: dtype.F16, Argmax: true, RopeInProduct: true, Pick: pickTails}
	pre := LowerOptions{Class: Prefill, MaxTokens: 128, MaxSeqs: 4, Context: 256, Cache: dtype.F16}
	exact := pre
	exact.PrefillGEMV = true
	return []lowerCase{
		{"qwen3moe_decode", qwen, dec},
		{"qwen3moe_decode1", qwen, one},
		{"qwen3moe_prefill", qwen, pre},
		{"mixtral_decode", mixtral, dec},
		{"mixtral_prefill_exact", mixtral, exact},
	}
}

// MoEProgramsForTest lowers the mixture-of-experts test cases (exported
// for the external NVRTC compile test).
func MoEProgramsForTest(t *testing.T) map[string]*Program {
	out := map[string]*Program{}
	for _, c := range moeLowerCases() {
		p, err := Lower(c.g(t), c.opts)
		require.NoError(t, err, c.name)
		out[c.name] = p
	}
	return out
}

// TestLowerMoEGolden pins the dumps of the qwen3moe programs.
func TestLowerMoEGolden(t *testing.T) {
	for _, c := range moeLowerCases() {
		if !strings.HasPrefix(c.name, "qwen3moe") {
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
			require.NoError(t, err, "run go test ./codegen -run TestLowerMoEGolden -update")
			require.Equal(t, string(want), p.String())
		})
	}
}

// TestLowerMoE checks the mixture-of-experts programs: a route, a gate/up
// and a down product and a sum a layer, the ids, weights and groups they
// bind, the one-row kernels where one-row steps run, the sum into the
// residual stream, and the plan.
func TestLowerMoE(t *testing.T) {
	for _, c := range moeLowerCases() {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			o.Pick = floatMoEPick // the float products (untuned, the int8 ones run: TestLowerMoEXQ)
			p, err := Lower(c.g(t), o)
			require.NoError(t, err)
			require.NoError(t, p.Buffers.Check())
			layers := p.Layers
			oneSeq := c.opts.Class == Decode && c.opts.MaxSeqs == 1
			if oneSeq {
				require.Zero(t, launchesOf(p, "moe_route"), "one-sequence programs route in the gate/up product")
			} else {
				require.Equal(t, layers, launchesOf(p, "moe_route"))
			}
			require.Equal(t, 2*layers, launchesOf(p, "moe_gemv"))
			if oneSeq {
				require.Zero(t, launchesOf(p, "moe_sum"), "one-sequence programs sum in the down product")
			} else {
				require.Equal(t, layers, launchesOf(p, "moe_sum"))
			}
			type routing struct{ ids, wts, groups Arg }
			var routes []routing
			var router Arg   // the last router product's logits
			var normRows Arg // the last RouterNorm's normalised rows
			fused := c.opts.Class == Decode && !c.opts.PrefillGEMV
			for i, l := range p.Launches {
				k := p.Kernels[l.Kernel]
				require.Len(t, l.Args, len(k.Params), "L%d %s", i, k.Name)
				for _, a := range l.Args {
					if a.Kind == ArgBuffer {
						b := p.Buffers.Buffers[a.Index]
						require.True(t, b.First <= i && i <= b.Last, "L%d uses b%d outside its live range", i, a.Index)
					}
				}
				switch k.Family {
				case "moe_route":
					require.Equal(t, router, l.Args[0], "L%d routes by the router's logits", i)
					routes = append(routes, routing{l.Args[1], l.Args[2], l.Args[3]})
					require.True(t, p.Buffers.Buffers[l.Args[1].Index].Int32, "ids")
					require.True(t, p.Buffers.Buffers[l.Args[3].Index].Int32, "groups")
				case "moe_gemv":
					require.Equal(t, oneSeq, strings.HasSuffix(k.Name, "_one"), k.Name)
					if strings.Contains(k.Name, "_route_") {
						// the gate/up product chooses the experts and writes the choice
						require.True(t, oneSeq, k.Name)
						require.Equal(t, router, l.Args[3], "L%d routes by the router's logits", i)
						require.True(t, p.Buffers.Buffers[l.Args[4].Index].Int32, "ids")
						routes = append(routes, routing{ids: l.Args[4], wts: l.Args[5]})
						break
					}
					r := routes[len(routes)-1]
					if strings.Contains(k.Name, "_sum_") {
						require.True(t, oneSeq, k.Name)
						ids, wts := l.Args[2], l.Args[3]
						require.Equal(t, r.ids, ids, "L%d reads its route's ids", i)
						require.Equal(t, r.wts, wts, "L%d reads its route's weights", i)
						require.Equal(t, "x", p.Buffers.Buffers[l.Args[4].Index].Name, "L%d adds into the residual stream", i)
						break
					}
					ids, groups := l.Args[len(l.Args)-4], l.Args[len(l.Args)-3]
					require.Equal(t, r.ids, ids, "L%d reads its route's ids", i)
					require.Equal(t, r.groups, groups, "L%d reads its route's groups", i)
					if c.opts.Class == Decode && c.opts.MaxSeqs > 1 {
						require.Positive(t, l.One, "L%d has no one-row kernel", i)
						require.True(t, strings.HasSuffix(p.Kernels[l.One-1].Name, "_one"))
					} else {
						require.Zero(t, l.One)
					}
				case "moe_sum":
					require.Contains(t, k.Name, "_res_", "the sum adds into the residual stream")
				case "gemv", "mma":
					if strings.HasPrefix(k.Name, "gemv_f32_n") {
						require.Equal(t, "router", p.Buffers.Buffers[l.Args[2].Index].Name)
						router = l.Args[2]
					}
					if strings.HasPrefix(k.Name, "router_norm_f32_n") {
						// the norm before the experts in the router's prologue:
						// it reads the residual stream and writes the norm's rows
						require.Equal(t, "x", p.Buffers.Buffers[l.Args[1].Index].Name, "L%d normalises the residual stream", i)
						require.Equal(t, "norm", p.Buffers.Buffers[l.Args[3].Index].Name)
						require.Equal(t, "router", p.Buffers.Buffers[l.Args[4].Index].Name)
						router = l.Args[4]
						normRows = l.Args[3]
					}
				}
				if k.Family == "moe_gemv" && fused && len(k.Params) > 2 && k.Params[1].Name == "Wu" {
					require.Equal(t, "x", k.Params[2].Name)
					require.Equal(t, normRows, l.Args[2], "L%d's experts read the router's normalised rows", i)
				}
			}
			// the router is a float32 GEMV in every class; in a fusing
			// decode program with the norm before it
			routers, normed := 0, 0
			for _, l := range p.Launches {
				k := p.Kernels[l.Kernel]
				if k.Family == "gemv" && strings.HasPrefix(k.Name, "gemv_f32_n") {
					routers++
				}
				if k.Family == "gemv" && strings.HasPrefix(k.Name, "router_norm_f32_n") {
					normed++
				}
			}
			if fused {
				require.Equal(t, layers, normed)
				require.Zero(t, routers)
				require.Zero(t, launchesOf(p, "rmsnorm"), "no norm a layer of its own before the experts")
			} else {
				require.Equal(t, layers, routers)
				require.Zero(t, normed)
			}
			for _, w := range p.Weights {
				if strings.Contains(w.Name, "_exps") {
					require.Len(t, w.Parts, 1)
					require.Positive(t, w.Parts[0].Experts, w.Name)
					require.Equal(t, 0, w.Layout, "expert weights stay in the file's layout")
				}
			}
		})
	}
}

// writerOf returns the last launch before launch i that takes buffer
// argument a as an output (a parameter that is not const), or -1.
func writerOf(p *Program, i int, a Arg) int {
	for j := i - 1; j >= 0; j-- {
		l := p.Launches[j]
		k := p.Kernels[l.Kernel]
		for x, b := range l.Args {
			if b == a && !strings.HasPrefix(k.Params[x].Type, "const") {
				return j
			}
		}
	}
	return -1
}

// floatMoEPick picks the float experts' products' default arms, as a
// tunedb entry of an XQ 0 arm would.
func floatMoEPick(family, class string) (Point, bool) {
	if family != "moe_gemv" {
		return nil, false
	}
	return DefaultMoEArm.Point(), true
}

// TestLowerMoERouterArm: a router's product runs the tunedb's pick of its
// gemv class as a float32 GEMV on the file's layout (an int8 or repacked
// pick keeps only its geometry), else DefaultRouterArm.
func TestLowerMoERouterArm(t *testing.T) {
	c := moeLowerCases()[0]
	g := c.g(t)
	routerKernels := func(p *Program) []string {
		var names []string
		for _, l := range p.Launches {
			if k := p.Kernels[l.Kernel]; k.Family == "gemv" && (strings.HasPrefix(k.Name, "gemv_f32_n") || strings.HasPrefix(k.Name, "router_norm_f32_n")) {
				names = append(names, k.Name)
			}
		}
		return names
	}
	p, err := Lower(g, c.opts)
	require.NoError(t, err)
	untuned := routerKernels(p)
	require.NotEmpty(t, untuned)
	for _, n := range untuned {
		require.True(t, strings.HasSuffix(n, "_"+DefaultRouterArm.String()), n)
	}
	pick := GEMVArm{Threads: 64, RowsPerBlock: 2, Unroll: 2, SharedX: 1}
	quant := GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 1, RowsPerWarp: 4}
	for _, want := range []struct{ picked, runs GEMVArm }{{pick, pick}, {quant, RouterArm(quant)}} {
		o := c.opts
		o.Pick = func(family, class string) (Point, bool) {
			if family == "gemv" && strings.HasPrefix(class, "f32_n") {
				return want.picked.Point(), true
			}
			return nil, false
		}
		p, err := Lower(g, o)
		require.NoError(t, err)
		names := routerKernels(p)
		require.Len(t, names, len(untuned))
		for _, n := range names {
			require.True(t, strings.HasSuffix(n, "_"+want.runs.String()), "%s runs %v", n, want.runs)
		}
	}
	require.Zero(t, RouterArm(quant).XQ)
	require.Zero(t, RouterArm(quant).Layout)
	require.Equal(t, DefaultGEMVArm, RouterArm(GEMVArm{}))
}

// A graph the MoE lowering does not cover is refused with the node named:
// here layer 0's choice is weighed by layer 1's moe_weights, so its topk has
// no weights of its own.
func TestLowerMoEErrors(t *testing.T) {
	g := buildGraph(t, smallMixtral, synthMoETensors(smallMixtral, dtype.Q8_0, dtype.Q8_0))
	var topks, weights []*ir.Node
	for _, n := range g.Nodes {
		switch n.Op {
		case ir.OpTopK:
			topks = append(topks, n)
		case ir.OpMoEWeights:
			weights = append(weights, n)
		}
	}
	require.Len(t, topks, 2)
	weights[0].Args[1] = topks[1]
	_, err := Lower(g, LowerOptions{Class: Decode, MaxSeqs: 2, Context: 64, Cache: dtype.F16})
	require.ErrorIs(t, err, ErrLower)
	require.ErrorContains(t, err, "topk without moe_weights")
}

// TestLowerMoEXQ: a tunedb pick of an int8-activation arm (XQ 1) for the
// experts' products lowers them as moe_xq launches on repacked expert
// weights after an XQuant launch of their input (the down product's of its
// token's slot rows side by side), with one-row kernels of the same kind
// and no summing down product; the exact configuration and the f16 class
// keep the float products.
func TestLowerMoEXQ(t *testing.T) {
	for _, c := range moeLowerCases() {
		for _, tuned := range []bool{true, false} { // untuned, the int8 products are the default
			o := c.opts
			if tuned {
				base := o.Pick // the case's tails
				o.Pick = func(family, class string) (Point, bool) {
					if family == "moe_gemv" {
						return MoEArm{RowsPerBlock: 8, BatchRows: 8, XQ: 1}.Point(), true
					}
					if base != nil {
						return base(family, class)
					}
					return nil, false
				}
			}
			testLowerMoEXQ(t, c, o)
		}
	}
}

func testLowerMoEXQ(t *testing.T, c lowerCase, o LowerOptions) {
	t.Run(c.name, func(t *testing.T) {
		p, err := Lower(c.g(t), o)
		require.NoError(t, err)
		xqOK := !o.PrefillGEMV
		if !xqOK {
			require.Zero(t, launchesOf(p, "moe_xq"), "the exact configuration keeps the float products")
			return
		}
		require.Equal(t, 2*p.Layers, launchesOf(p, "moe_xq"))
		require.Zero(t, launchesOf(p, "moe_gemv"))
		if o.Class == Decode && o.MaxSeqs == 1 {
			// the one-row gate/up product chooses the experts
			require.Zero(t, launchesOf(p, "moe_route"))
			for _, l := range p.Launches {
				if k := p.Kernels[l.Kernel]; k.Family == "moe_xq" && k.Params[1].Name == "Wu" {
					require.Contains(t, k.Name, "_route_", k.Name)
					require.Equal(t, "logits", k.Params[3].Name)
					require.Equal(t, "router", p.Buffers.Buffers[l.Args[3].Index].Name)
				}
			}
		} else {
			require.Equal(t, p.Layers, launchesOf(p, "moe_route"))
		}
		if o.Class == Decode && o.MaxSeqs == 1 {
			// the one-row down product quantises its slots' rows and sums them
			require.Zero(t, launchesOf(p, "moe_sum"))
			sums := 0
			for _, l := range p.Launches {
				if k := p.Kernels[l.Kernel]; k.Family == "moe_xq" && strings.Contains(k.Name, "_slot_sum_") {
					require.Equal(t, "x", k.Params[1].Name, "%s reads the gate/up product's float rows", k.Name)
					require.Equal(t, "x", p.Buffers.Buffers[l.Args[4].Index].Name, "%s adds into the residual stream", k.Name)
					sums++
				}
			}
			require.Equal(t, p.Layers, sums)
			// each quantises the new residual row for the next norm's products in
			// its last block (MoEShape.QuantNext), which read it: one XQuant a step
			require.Equal(t, 1, launchesOf(p, "xquant"), "the first layer's input alone")
			require.Positive(t, p.Tickets)
			for i, l := range p.Launches {
				if k := p.Kernels[l.Kernel]; k.Family == "moe_xq" && strings.HasSuffix(k.Name, "_qn") {
					require.Len(t, l.Args, len(k.Params))
					require.Equal(t, ArgTickets, l.Args[8].Kind)
					require.Contains(t, p.Launches[i+1].Args, l.Args[7], "L%d's quantised row is the next product's input", i)
				}
			}
		} else {
			require.Equal(t, p.Layers, launchesOf(p, "moe_sum"), "the grouped int8 down product does not sum")
		}
		for i, l := range p.Launches {
			k := p.Kernels[l.Kernel]
			if k.Family != "moe_xq" {
				continue
			}
			if strings.Contains(k.Name, "_slot_sum_") {
				continue // quantises its rows itself
			}
			xq := l.Args[slices.IndexFunc(k.Params, func(p Param) bool { return p.Name == "xq" })]
			if k.Params[1].Name == "Wu" && o.Class == Decode && !o.PrefillGEMV {
				// the gate/up product reads the rows the router with the norm
				// before it wrote quantised
				w := writerOf(p, i, xq)
				require.GreaterOrEqual(t, w, 0, "L%d", i)
				require.True(t, strings.HasPrefix(p.Kernels[p.Launches[w].Kernel].Name, "router_norm_f32_n"), "L%d reads L%d's rows", i, w)
				require.Contains(t, p.Kernels[p.Launches[w].Kernel].Name, "_xq_")
			} else {
				prev := p.Kernels[p.Launches[i-1].Kernel]
				require.Equal(t, "xquant", prev.Family, "L%d's input is quantised right before it", i)
				require.Equal(t, p.Launches[i-1].Args[1], xq, "L%d reads the XQuant launch's rows", i)
			}
			for j, a := range l.Args {
				if a.Kind == ArgWeight {
					require.Equal(t, 1, p.Weights[a.Index].Layout, "L%d argument %d: expert weights repacked", i, j)
				}
			}
			if l.One > 0 {
				require.Equal(t, "moe_xq", p.Kernels[l.One-1].Family, "L%d: the one-row kernel keeps the class", i)
			}
		}
		f16 := o
		f16.BatchInvariant, f16.InvariantInt8 = true, false
		p, err = Lower(c.g(t), f16)
		require.NoError(t, err)
		require.Zero(t, launchesOf(p, "moe_xq"), "the f16 class keeps the float products")
	})
}

// TestLowerMoEDownSumPick: the summing down product takes a tunedb pick of
// a float one-row arm of its class and ignores an int8 one (it has none).
func TestLowerMoEDownSumPick(t *testing.T) {
	c := moeLowerCases()[1] // qwen3moe_decode1
	require.Equal(t, 1, c.opts.MaxSeqs)
	for _, want := range []struct {
		pick MoEArm
		runs string
	}{{MoEArm{RowsPerBlock: 4, BatchRows: 1, One: 1}, "_r4_b1_one"}, {MoEArm{RowsPerBlock: 4, BatchRows: 1, One: 1, XQ: 1}, "_r4_b1_one"}} {
		o := c.opts
		o.Pick = func(family, class string) (Point, bool) {
			if family == "moe_gemv" && strings.HasSuffix(class, "_sum") {
				return want.pick.Point(), true
			}
			return floatMoEPick(family, class) // the float products, which sum
		}
		p, err := Lower(c.g(t), o)
		require.NoError(t, err, "%v", want.pick)
		n := 0
		for _, k := range p.Kernels {
			if strings.Contains(k.Name, "_slot_sum_") {
				require.True(t, strings.HasSuffix(k.Name, want.runs), "%s for a pick of %v", k.Name, want.pick)
				n++
			}
		}
		require.Positive(t, n)
	}
}

// TestLowerMoERoutePick: a one-sequence program's routing gate/up product
// takes the geometry of its own class's pick (…_route_norm) and keeps the
// int8 or float kind of the class's products.
func TestLowerMoERoutePick(t *testing.T) {
	c := moeLowerCases()[1] // qwen3moe_decode1
	for _, want := range []struct {
		float bool
		runs  string
	}{{false, "_r4_b1_one_xq"}, {true, "_r4_b1_one"}} {
		o := c.opts
		o.Pick = func(family, class string) (Point, bool) {
			if family == "moe_gemv" && strings.HasSuffix(class, "_route_norm") {
				return MoEArm{RowsPerBlock: 4, BatchRows: 1, One: 1, XQ: 1}.Point(), true
			}
			if want.float {
				return floatMoEPick(family, class)
			}
			return nil, false
		}
		p, err := Lower(c.g(t), o)
		require.NoError(t, err)
		n := 0
		for _, k := range p.Kernels {
			if strings.Contains(k.Name, "_route_norm_") {
				require.True(t, strings.HasSuffix(k.Name, want.runs), "%s, float %v", k.Name, want.float)
				n++
			}
		}
		require.Positive(t, n)
	}
}
