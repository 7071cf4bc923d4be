package codegen

import (
	"fmt"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// Mixture-of-experts kernels. A router's logits (a GEMV) go to MoERoute,
// one block that chooses each token's experts, weighs them and groups the
// step's (token, choice) slots by expert, so no step needs the host to
// see the choice. MoEGEMV multiplies only the chosen experts' rows: at one
// row a block per (row set, choice) finds its expert in the ids; at more
// rows a block per (row set, expert) reads that expert's slots from the
// groups and each weight row once for up to BatchRows of them, so every
// chosen expert's weights are read once a step (prefill runs the same
// grouped product, on CUDA cores). MoESum adds the experts' outputs,
// weighted, into the residual stream.
//
// The slot of choice j of token t is t·Used + j. The groups buffer holds
// the offsets of each expert's slots (Experts+1 ints, the last the slot
// count) and then the slots, grouped by expert; within a group their order
// is unspecified (atomics place them), which changes no result: every slot
// is computed on its own.

// MoEShape is a mixture-of-experts product: Experts experts of N rows of
// K elements of type Type, Used chosen a token. With SwiGLU the product is
// a gate and up pair (the up rows of type Up) and writes silu(gate)·up.
// PerSlot: x holds a row per slot (the down product's input), else a row
// per token.
type MoEShape struct {
	Type, Up            dtype.Type
	SwiGLU              bool
	N, K, Experts, Used int
	PerSlot             bool
	// Sum (a PerSlot product without SwiGLU, one-row arms only): each
	// row's Used slot products are summed, weighted, into the residual
	// row y, as MoESum would add them (the down product and the sum of a
	// one-token step in one launch).
	Sum bool
	// Route (one-row arms, a row of x a token): the kernel chooses the
	// token's experts from the router's logits itself (MoERoute's code for
	// one token, in each block's first warp) and its block (0, 0) writes
	// the choice's ids and weights for the products after it, so a
	// one-token step launches no MoERoute. Norm: its weights renormalised
	// over the chosen (MoERoute's norm).
	Route, Norm bool
	// QuantNext (Sum with an int8 arm, one token): the block that finishes
	// last also quantises the new residual row for the next norm's XQ 2
	// products (XQuant with ProNorm: x·nw, the groups' sums of squares)
	// into xo, so the next layer launches no XQuant; its parameters after
	// m: nw, xo and a ticket (ArgTickets). Not part of the class: the
	// product is the same.
	QuantNext bool
}

func (s MoEShape) check() error {
	if err := checkRow(s.Type, s.K); err != nil {
		return err
	}
	if s.SwiGLU {
		if err := checkRow(s.Up, s.K); err != nil {
			return err
		}
	}
	if s.N <= 0 || s.Experts <= 0 || s.Used <= 0 || s.Used > s.Experts {
		return fmt.Errorf("%w: moe product of %d rows, %d of %d experts", ErrUnsupported, s.N, s.Used, s.Experts)
	}
	if s.Sum && (!s.PerSlot || s.SwiGLU) {
		return fmt.Errorf("%w: a summing moe product is the down product (a row of x a slot, no SwiGLU)", ErrUnsupported)
	}
	if s.QuantNext && !s.Sum {
		return fmt.Errorf("%w: only a summing moe product quantises the next norm's row", ErrUnsupported)
	}
	if s.Route && (s.PerSlot || s.Experts > MoERouteMaxExperts) {
		return fmt.Errorf("%w: a routing moe product reads a row a token, of at most %d experts", ErrUnsupported, MoERouteMaxExperts)
	}
	return nil
}

// MoEClass is the class of a MoEGEMV, e.g. "q4_k_n768_k2048_e128_u8_swiglu"
// (gate and up of one type; "q4_k+q6_k_…" when they differ) or
// "q6_k_n2048_k768_e128_u8_slot" (a row of x a slot).
func MoEClass(s MoEShape) string {
	t := typeTag(s.Type)
	if s.SwiGLU && s.Up != s.Type {
		t += "+" + typeTag(s.Up)
	}
	c := fmt.Sprintf("%s_n%d_k%d_e%d_u%d", t, s.N, s.K, s.Experts, s.Used)
	if s.SwiGLU {
		c += "_swiglu"
	}
	if s.PerSlot {
		c += "_slot"
	}
	if s.Sum {
		c += "_sum"
	}
	if s.Route {
		c += "_route"
		if s.Norm {
			c += "_norm"
		}
	}
	return c
}

// MoERouteClass is the class of MoERoute, e.g. "e128_u8_norm".
func MoERouteClass(experts, used int, norm bool) string {
	c := fmt.Sprintf("e%d_u%d", experts, used)
	if norm {
		c += "_norm"
	}
	return c
}

// MoESumClass is the class of MoESum, e.g. "n2048_u8_res".
func MoESumClass(n, used int, residual bool) string {
	c := fmt.Sprintf("n%d_u%d", n, used)
	if residual {
		c += "_res"
	}
	return c
}

// MoEArm is the tuning of MoEGEMV: a warp a weight row, RowsPerBlock rows a
// block; a grouped block (One 0) reads each weight unit once for up to
// BatchRows of its expert's slots; a one-row block (One 1, BatchRows 1)
// serves one slot of a one-token step. XQ 1 multiplies repacked weights
// with int8 activations an XQuant launch wrote (MoEXQ) instead of float
// ones: its own numerical class (tolerance XQTol), never in the exact
// configuration or the f16 class.
type MoEArm struct {
	RowsPerBlock, BatchRows, One int
	XQ                           int
}

// DefaultMoEArm is the grouped arm: eight rows a block, eight slots a
// weight read. DefaultMoEOneArm is the one-row arm of decode steps of one
// sequence.
var (
	DefaultMoEArm    = MoEArm{RowsPerBlock: 8, BatchRows: 8}
	DefaultMoEOneArm = MoEArm{RowsPerBlock: 8, BatchRows: 1, One: 1}
)

// MoEKnobs is the search space of MoEArm.
var MoEKnobs = []Knob{
	{"rows_per_block", []int{1, 2, 4, 8, 16}},
	{"batch_rows", []int{1, 2, 4, 8, 16}},
	{"one", []int{0, 1}},
	{"xq", []int{0, 1}},
}

// Validate reports whether a is well formed.
func (a MoEArm) Validate() error {
	if a.RowsPerBlock < 1 || a.RowsPerBlock > 32 || a.BatchRows < 1 || a.BatchRows > 16 || a.One < 0 || a.One > 1 || (a.One == 1 && a.BatchRows != 1) ||
		a.XQ < 0 || a.XQ > 1 {
		return fmt.Errorf("%w: moe arm %+v", ErrUnsupported, a)
	}
	return nil
}

// String is the arm's short name used in kernel names and tables.
func (a MoEArm) String() string {
	s := fmt.Sprintf("r%d_b%d", a.RowsPerBlock, a.BatchRows)
	if a.One == 1 {
		s += "_one"
	}
	if a.XQ == 1 {
		s += "_xq"
	}
	return s
}

// Point returns a as a Point.
func (a MoEArm) Point() Point {
	return Point{"rows_per_block": a.RowsPerBlock, "batch_rows": a.BatchRows, "one": a.One, "xq": a.XQ}
}

// MoEArmOf returns the MoEArm p describes (missing knobs are zero).
func MoEArmOf(p Point) MoEArm {
	return MoEArm{RowsPerBlock: p["rows_per_block"], BatchRows: p["batch_rows"], One: p["one"], XQ: p["xq"]}
}

// MoERouteMaxExperts bounds the experts MoERoute takes: a lane holds
// Experts/32 logits in registers.
const MoERouteMaxExperts = 512

// MoERoute returns the router kernel: for each of m tokens (a warp a token)
// the Used largest logits of its Experts (a NaN as −∞; equal logits by the
// lower expert), their weights (a softmax over all the logits, renormalised
// over the chosen with norm), and then the slots grouped by expert:
//
//	moe_route(const float* logits, int* ids, float* wts, int* groups, int m)
//
// logits [m][Experts], ids and wts [m][Used], groups [Experts+1+m·Used].
// One block (grid 1): the grouping needs every token's choice.
func MoERoute(experts, used int, norm bool, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if experts <= 0 || experts > MoERouteMaxExperts || used <= 0 || used > experts {
		return nil, fmt.Errorf("%w: moe route of %d of %d experts", ErrUnsupported, used, experts)
	}
	name := fmt.Sprintf("moe_route_%s_%s", MoERouteClass(experts, used, norm), arm)
	params := []Param{{"const float* __restrict__", "logits"}, {"int* __restrict__", "ids"}, {"float* __restrict__", "wts"},
		{"int* __restrict__", "groups"}, {"int", "m"}}
	nv := ceilDiv(experts, 32)
	src := source(fmt.Sprintf("moe_route: %d of %d experts, norm %v, %v", used, experts, norm, arm), []string{"types", "warp", "pdl"}, func(w *Writer) {
		w.Linef("#define E %d // experts", experts)
		w.Linef("#define USED %d // experts a token", used)
		w.Linef("#define NV %d // logits a lane", nv)
		w.Linef("#define WARPS %d", arm.Threads/32)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("__shared__ int cnt[E];")
			w.For("e", "threadIdx.x", "E", fmt.Sprint(arm.Threads), 0, func() { w.Line("cnt[e] = 0;") })
			w.Line("const int lane = threadIdx.x & 31;")
			w.Line("pdl_wait();")
			w.For("t", "threadIdx.x >> 5", "m", "WARPS", 0, func() { moeRouteToken(w, norm, "lane == 0") })
			w.Comment("the step's choices are written: count each expert's slots, then place them")
			w.Line("__syncthreads();")
			w.For("s", "threadIdx.x", "m * USED", fmt.Sprint(arm.Threads), 0, func() { w.Line("atomicAdd(&cnt[ids[s]], 1);") })
			w.Line("__syncthreads();")
			moeRouteScan(w, experts)
			w.Line("__syncthreads();")
			w.For("s", "threadIdx.x", "m * USED", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("groups[E + 1 + atomicAdd(&cnt[ids[s]], 1)] = s;")
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "moe_route", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(1, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// moeRouteToken writes a warp's choice for token t: NV logits a lane, USED
// rounds of a warp-wide argmax (larger value, then lower expert) over
// those not yet taken, then the weights, stored to ids and wts where store
// holds (a lane's condition); the choice stays in sel[USED].
func moeRouteToken(w *Writer, norm bool, store string) {
	w.Line("const float* row = logits + (size_t)t * E;")
	w.Line("float v[NV];")
	w.For("i", "0", "NV", "1", -1, func() {
		w.Line("const int e = lane + 32 * i;")
		w.Line("const float lg = e < E ? row[e] : -__int_as_float(0x7f800000);")
		w.Line("v[i] = lg != lg ? -__int_as_float(0x7f800000) : lg; // a NaN counts as -inf")
	})
	w.Line("unsigned taken = 0u;")
	w.Line("float top[USED];")
	w.Line("int sel[USED];")
	w.For("j", "0", "USED", "1", -1, func() {
		w.Line("float bv = -__int_as_float(0x7f800000);")
		w.Line("int bi = 0x7fffffff;")
		w.For("i", "0", "NV", "1", -1, func() {
			w.Line("const int e = lane + 32 * i;")
			w.If("!((taken >> i) & 1u) && e < E && (v[i] > bv || (v[i] == bv && e < bi))", func() {
				w.Line("bv = v[i];")
				w.Line("bi = e;")
			})
		})
		w.Line("#pragma unroll")
		w.Block("for (int o = 16; o > 0; o >>= 1)", func() {
			w.Line("const float ov = __shfl_xor_sync(0xffffffffu, bv, o);")
			w.Line("const int oi = __shfl_xor_sync(0xffffffffu, bi, o);")
			w.If("ov > bv || (ov == bv && oi < bi)", func() {
				w.Line("bv = ov;")
				w.Line("bi = oi;")
			})
		})
		w.If("(bi & 31) == lane", func() { w.Line("taken |= 1u << (bi >> 5);") })
		w.Line("top[j] = bv;")
		w.Line("sel[j] = bi;")
	})
	w.Comment("the largest logit is the first chosen")
	w.Line("const float mx = top[0];")
	if norm {
		w.Comment("renormalised over the chosen: a softmax over their logits")
		w.Line("float den = 0.f;")
		w.For("j", "0", "USED", "1", -1, func() { w.Line("den += expf(top[j] - mx);") })
	} else {
		w.Line("float den = 0.f;")
		w.For("i", "0", "NV", "1", -1, func() {
			w.If("lane + 32 * i < E", func() { w.Line("den += expf(v[i] - mx);") })
		})
		w.Line("den = warp_sum(den);")
	}
	w.If(store, func() {
		w.For("j", "0", "USED", "1", -1, func() {
			w.Line("ids[t * USED + j] = sel[j];")
			w.Line("wts[t * USED + j] = expf(top[j] - mx) / den;")
		})
	})
}

// emitRouteChoice writes the start of a routing one-row product (MoEShape.Route):
// the token's choice by the block's first warp (block (0, 0) stores ids and
// weights for the products after), then the block's slot blockIdx.y: its
// expert e and the range beg…end of one slot (none for rows past rows).
func emitRouteChoice(w *Writer, norm bool, rows string) {
	w.Comment("the token's choice, by the first warp (block (0, 0) stores it for the products after)")
	w.Line("__shared__ int se;")
	w.If("threadIdx.x < 32", func() {
		w.Line("const int t = 0;")
		moeRouteToken(w, norm, "lane == 0 && blockIdx.x == 0 && blockIdx.y == 0")
		w.If("lane == 0", func() { w.Line("se = sel[blockIdx.y];") })
	})
	w.Line("__syncthreads();")
	w.Comment("slot blockIdx.y of a one-token step")
	w.Line("const int e = se;")
	w.Linef("const int beg = 0, end = r < %s ? 1 : 0;", rows)
}

// emitSlotSum writes the end of a summing down product (MoEShape.Sum):
// lane 0 adds the warp's slot products d, weighted, into the residual row
// r, one fused multiply-add a slot from 0, as MoESum adds.
func emitSlotSum(w *Writer) {
	w.If("lane == 0", func() {
		w.Line("float sum = 0.f;")
		w.For("j", "0", "USED", "1", -1, func() { w.Line("sum = __fmaf_rn(wts[j], d[j], sum);") })
		w.Line("y[r] = y[r] + sum;")
	})
}

// moeRouteScan turns cnt into the exclusive offsets of the experts' slots,
// written to groups[0..E] (groups[E] the slot count) and kept in cnt for
// the placement: the first warp, each lane a run of consecutive experts.
func moeRouteScan(w *Writer, experts int) {
	per := ceilDiv(experts, 32)
	w.If("threadIdx.x < 32", func() {
		w.Linef("const int e0 = lane * %d;", per)
		w.Line("int run = 0;")
		w.For("i", "0", fmt.Sprint(per), "1", -1, func() {
			w.If("e0 + i < E", func() { w.Line("run += cnt[e0 + i];") })
		})
		w.Line("int inc = run; // inclusive scan of the runs over the lanes")
		w.Line("#pragma unroll")
		w.Block("for (int o = 1; o < 32; o <<= 1)", func() {
			w.Line("const int n = __shfl_up_sync(0xffffffffu, inc, o);")
			w.If("lane >= o", func() { w.Line("inc += n;") })
		})
		w.Line("int at = inc - run;")
		w.For("i", "0", fmt.Sprint(per), "1", -1, func() {
			w.If("e0 + i < E", func() {
				w.Line("const int c = cnt[e0 + i];")
				w.Line("groups[e0 + i] = at;")
				w.Line("cnt[e0 + i] = at;")
				w.Line("at += c;")
			})
		})
		w.If("lane == 31", func() { w.Line("groups[E] = inc;") })
	})
}

// MoEGEMV returns the chosen experts' product of shape s:
//
//	moe_gemv(const u8* W, [const u8* Wu,] const float* x, const int* ids, const int* groups, float* y, int m)
//
// W (and Wu) hold Experts·N rows of K (expert e's rows from e·N), x [m][K]
// (a row a token) or [m·Used][K] (PerSlot), y [m·Used][N]: y[s][r] = W[e(s)·N
// + r]·x_s, or with SwiGLU silu(W·x_s)·(Wu·x_s). Weights in the file's
// layout, dequantised in registers, a warp a row. A grouped arm's grid is
// (⌈N/RowsPerBlock⌉, Experts): each block reads its expert's slots from
// groups (MoERoute) and returns at once when it has none. A one-row arm's
// (One) is (⌈N/RowsPerBlock⌉, Used): block y serves slot y of a one-token
// step and reads its expert from ids.
func MoEGEMV(s MoEShape, arm MoEArm) (*Kernel, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if s.QuantNext && arm.XQ != 1 {
		return nil, fmt.Errorf("%w: the next norm's quantisation in a summing moe product of int8 arms, not %v", ErrUnsupported, arm)
	}
	if arm.XQ == 1 {
		return MoEXQ(s, arm)
	}
	if s.Sum {
		return moeGEMVSum(s, arm)
	}
	if s.Route && arm.One != 1 {
		return nil, fmt.Errorf("%w: a routing moe product runs one-row arms, not %v", ErrUnsupported, arm)
	}
	rowBytes, _ := s.Type.RowBytes(s.K)
	name := fmt.Sprintf("moe_gemv_%s_%s", MoEClass(s), arm)
	name = strings.ReplaceAll(name, "+", "_")
	params := []Param{{"const u8* __restrict__", "W"}}
	helpers := []string{dqHelper(s.Type), "warp", "pdl"}
	if s.SwiGLU {
		params = append(params, Param{"const u8* __restrict__", "Wu"})
		helpers = append(helpers, dqHelper(s.Up))
	}
	if s.Route {
		params = append(params, Param{"const float* __restrict__", "x"}, Param{"const float* __restrict__", "logits"},
			Param{"int* __restrict__", "ids"}, Param{"float* __restrict__", "wts"}, Param{"float* __restrict__", "y"}, Param{"int", "m"})
	} else {
		params = append(params, Param{"const float* __restrict__", "x"}, Param{"const int* __restrict__", "ids"},
			Param{"const int* __restrict__", "groups"}, Param{"float* __restrict__", "y"}, Param{"int", "m"})
	}
	threads := 32 * arm.RowsPerBlock
	title := fmt.Sprintf("moe_gemv: %v weights, %d of %d experts of N %d, K %d, swiglu %v, a row a slot %v, %v", s.Type, s.Used, s.Experts, s.N, s.K, s.SwiGLU, s.PerSlot, arm)
	src := source(title, helpers, func(w *Writer) {
		w.Linef("#define N %d // rows an expert", s.N)
		w.Linef("#define K %d", s.K)
		w.Linef("#define E %d // experts", s.Experts)
		w.Linef("#define USED %d // experts a token", s.Used)
		w.Linef("#define ROW_BYTES %d", rowBytes)
		if s.SwiGLU {
			ub, _ := s.Up.RowBytes(s.K)
			w.Linef("#define UP_BYTES %d", ub)
		}
		w.Linef("#define RPB %d // rows a block, a warp a row", arm.RowsPerBlock)
		w.Linef("#define BR %d // slots a weight read", arm.BatchRows)
		if s.Route {
			w.Linef("#define NV %d // logits a lane", ceilDiv(s.Experts, 32))
		}
		if s.PerSlot {
			w.Line("#define XROW(s) (s) // x has a row a slot")
		} else {
			w.Line("#define XROW(s) ((s) / USED) // x has a row a token")
		}
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
			w.Line("const int lane = threadIdx.x & 31;")
			w.Line("const int r = blockIdx.x * RPB + (threadIdx.x >> 5);")
			w.Line("pdl_wait();")
			if s.Route {
				emitRouteChoice(w, s.Norm, "N")
			} else if arm.One == 1 {
				w.Comment("slot blockIdx.y of a one-token step")
				w.Line("const int e = ids[blockIdx.y];")
				w.Line("const int beg = 0, end = r < N ? 1 : 0;")
			} else {
				w.Line("const int e = blockIdx.y;")
				w.Line("const int beg = groups[e], end = r < N ? groups[e + 1] : beg;")
			}
			w.Line("const u8* wr = W + ((size_t)e * N + r) * ROW_BYTES;")
			if s.SwiGLU {
				w.Line("const u8* ur = Wu + ((size_t)e * N + r) * UP_BYTES;")
			}
			w.For("c", "beg", "end", "BR", 0, func() { moeGEMVChunk(w, s, arm) })
			w.Line("pdl_launch();")
		}})
	})
	rowSets := ceilDiv(s.N, arm.RowsPerBlock)
	return &Kernel{Family: "moe_gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		if arm.One == 1 {
			return Geometry{Grid: dim3(rowSets, s.Used, 1), Block: dim3(threads, 1, 1)}
		}
		return Geometry{Grid: dim3(rowSets, s.Experts, 1), Block: dim3(threads, 1, 1)}
	}}, nil
}

// moeGEMVChunk writes the products of a warp's row with slots c…c+BR−1 of
// its group (fewer at its end): each weight unit dequantised once for all.
func moeGEMVChunk(w *Writer, s MoEShape, arm MoEArm) {
	w.Line("const int nb = min(BR, end - c);")
	w.Line("int sl[BR];")
	w.For("i", "0", "BR", "1", -1, func() {
		if arm.One == 1 {
			w.Line("sl[i] = blockIdx.y;")
		} else {
			w.Line("sl[i] = i < nb ? groups[E + 1 + c + i] : 0;")
		}
	})
	w.Line("float acc[BR];")
	if s.SwiGLU {
		w.Line("float accu[BR];")
	}
	w.For("i", "0", "BR", "1", -1, func() {
		w.Line("acc[i] = 0.f;")
		if s.SwiGLU {
			w.Line("accu[i] = 0.f;")
		}
	})
	w.For("u", "lane", "K / 32", "32", 0, func() {
		w.Line("float v[32];")
		w.Linef("%s(wr, u, v);", dqFunc(s.Type))
		if s.SwiGLU {
			w.Line("float vu[32];")
			w.Linef("%s(ur, u, vu);", dqFunc(s.Up))
		}
		w.For("i", "0", "BR", "1", -1, func() {
			w.If("i < nb", func() {
				w.Line("const float4* xu = (const float4*)(x + (size_t)XROW(sl[i]) * K + 32 * u);")
				acc := []string{"acc[i]"}
				if s.SwiGLU {
					acc = append(acc, "accu[i]")
				}
				emitMoEUnitDot(w, acc...)
			})
		})
	})
	w.For("i", "0", "BR", "1", -1, func() {
		w.If("i < nb", func() {
			w.Line("float g = warp_sum(acc[i]);")
			if s.SwiGLU {
				w.Line("const float up = warp_sum(accu[i]);")
				w.Line("g = g / (1.f + expf(-g)) * up;")
			}
			w.If("lane == 0", func() { w.Line("y[(size_t)sl[i] * N + r] = g;") })
		})
	})
}

// emitMoEUnitDot writes the float products of a dequantised unit with the
// activations at xu: acc[0] += v·x (and acc[1] += vu·x, the up rows'),
// eight float4s, each added as one expression. The one-row, grouped and
// summing MoE kernels all add a slot's sum so, which is why they give the
// same floats.
func emitMoEUnitDot(w *Writer, acc ...string) {
	w.For("q", "0", "8", "1", -1, func() {
		w.Line("const float4 a = xu[q];")
		for i, a := range acc {
			v := []string{"v", "vu"}[i]
			w.Linef("%s += %[2]s[4 * q] * a.x + %[2]s[4 * q + 1] * a.y + %[2]s[4 * q + 2] * a.z + %[2]s[4 * q + 3] * a.w;", a, v)
		}
	})
}

// MoESum returns the weighted sum of the experts' outputs:
//
//	moe_sum(const float* d, const float* wts, float* y, int m)
//
// y[t] (+)= Σ_j wts[t][j]·d[t·Used+j], j in order (a fused multiply-add
// each, from 0: MoEGEMV's Sum kernels add the same way), for d [m·Used][n]
// and wts [m][Used] (MoERoute's); with residual the sum is added to y (the
// residual stream). grid (m).
func MoESum(n, used int, residual bool, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if n <= 0 || n%4 != 0 || used <= 0 {
		return nil, fmt.Errorf("%w: moe sum of %d of rows of %d", ErrUnsupported, used, n)
	}
	name := fmt.Sprintf("moe_sum_%s_%s", MoESumClass(n, used, residual), arm)
	params := []Param{{"const float* __restrict__", "d"}, {"const float* __restrict__", "wts"}, {"float* __restrict__", "y"}, {"int", "m"}}
	src := source(fmt.Sprintf("moe_sum: %d experts' rows of %d, residual %v, %v", used, n, residual, arm), []string{"types", "pdl"}, func(w *Writer) {
		w.Linef("#define N %d", n)
		w.Linef("#define USED %d // experts a token", used)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("pdl_wait();")
			w.Line("const int t = blockIdx.x;")
			w.Comment("rows of N (a multiple of 4) floats are 16-byte aligned: the buffers are")
			w.Line("const float4* dr = (const float4*)(d + (size_t)t * USED * N);")
			w.Line("float4* yr = (float4*)(y + (size_t)t * N);")
			w.Line("float wj[USED];")
			w.For("j", "0", "USED", "1", -1, func() { w.Line("wj[j] = wts[t * USED + j];") })
			w.For("i", "threadIdx.x", "N / 4", fmt.Sprint(arm.Threads), 0, func() {
				if residual {
					w.Line("float4 a = yr[i];")
					w.Line("float4 s = make_float4(0.f, 0.f, 0.f, 0.f);")
				} else {
					w.Line("float4 s = make_float4(0.f, 0.f, 0.f, 0.f);")
				}
				w.For("j", "0", "USED", "1", -1, func() {
					w.Line("const float4 v = dr[j * (N / 4) + i];")
					w.Line("s.x = __fmaf_rn(wj[j], v.x, s.x); s.y = __fmaf_rn(wj[j], v.y, s.y);")
					w.Line("s.z = __fmaf_rn(wj[j], v.z, s.z); s.w = __fmaf_rn(wj[j], v.w, s.w);")
				})
				if residual {
					w.Line("yr[i] = make_float4(a.x + s.x, a.y + s.y, a.z + s.z, a.w + s.w);")
				} else {
					w.Line("yr[i] = s;")
				}
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "moe_sum", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// DefaultMoERouteArm is MoERoute's block: 16 warps, a token each at a time.
var DefaultMoERouteArm = BlockArm{Threads: 512}

// MoEShapes are the products of a mixture-of-experts layer of shape s with
// expert weights of type t: the gate/up pair (SwiGLU, a row of x a token)
// and the down product (a row of x a slot).
func MoEShapes(s Shape, t dtype.Type) (gateUp, down MoEShape) {
	gateUp = MoEShape{Type: t, Up: t, SwiGLU: true, N: s.ExpertFFN, K: s.Hidden, Experts: s.Experts, Used: s.ExpertsUsed}
	down = MoEShape{Type: t, N: s.Hidden, K: s.ExpertFFN, Experts: s.Experts, Used: s.ExpertsUsed, PerSlot: true}
	return gateUp, down
}

// MoEKernels are the kernels lowering runs for the mixture-of-experts
// feed-forward of shape s (Experts > 0): the router's float32 GEMV, the
// routing, and for each weight type of types whose rows s allows the
// experts' products in their grouped and one-row arms (and the down
// product that sums, MoEShape.Sum), and the weighted sum.
func MoEKernels(s Shape, types []dtype.Type) ([]*Kernel, error) {
	var ks []*Kernel
	add := func(k *Kernel, err error) error {
		if err == nil {
			ks = append(ks, k)
		}
		return err
	}
	if err := add(GEMV(dtype.F32, s.Experts, s.Hidden, false, DefaultRouterArm)); err != nil {
		return nil, err
	}
	for _, quant := range []bool{false, true} { // decode programs'
		if err := add(RouterNorm(dtype.F32, s.Experts, s.Hidden, DefaultRouterArm, s.Eps, quant)); err != nil {
			return nil, err
		}
	}
	if err := add(MoERoute(s.Experts, s.ExpertsUsed, s.ExpertNorm, DefaultMoERouteArm)); err != nil {
		return nil, err
	}
	if err := add(MoESum(s.Hidden, s.ExpertsUsed, true, DefaultBlockArm)); err != nil {
		return nil, err
	}
	for _, t := range types {
		gu, dn := MoEShapes(s, t)
		for _, p := range []MoEShape{gu, dn} {
			if p.check() != nil {
				continue
			}
			for _, a := range []MoEArm{DefaultMoEArm, DefaultMoEOneArm} {
				if err := add(MoEGEMV(p, a)); err != nil {
					return nil, err
				}
			}
		}
		// one-sequence decode programs' own one-row products, float and
		// (where the type has them) int8: the gate/up product that routes,
		// the down product that sums
		gu.Route, gu.Norm = true, s.ExpertNorm
		dn.Sum = true
		for _, p := range []MoEShape{gu, dn} {
			if p.check() != nil {
				continue
			}
			for _, xq := range []int{0, 1} {
				a := DefaultMoEOneArm
				a.XQ = xq
				if xq == 1 && MoEXQFits(p) != nil {
					continue
				}
				if err := add(MoEGEMV(p, a)); err != nil {
					return nil, err
				}
			}
		}
	}
	return ks, nil
}

// MoEArms lists every valid MoEArm of the search space.
func MoEArms() []MoEArm {
	return enumerate(MoEKnobs, func(v map[string]int) MoEArm { return MoEArmOf(v) }, MoEArm.Validate)
}
