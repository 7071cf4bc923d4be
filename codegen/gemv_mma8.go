package codegen

import (
	"fmt"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// The int8 tensor-core product of decode batches (GEMVArm.XQ 3): the
// operands of the XQ 2 products (repacked weights, activation rows from
// XQuant), multiplied by mma.sync with the weights as the A operand. A warp
// owns 16 weight rows and the block's activation rows in tiles of 8 (the N
// of m16n8k32); each group of 32 elements is one mma per tile, whose int32
// results are scaled by the group's weight and activation factors exactly
// as the dp4a products scale theirs (Q6_K, with a scale per 16 elements,
// takes two m16n8k16 instead).
//
// The fragments need no shuffles: lane (g, t) (g = lane/4, t = lane%4)
// holds in A's registers elements 4t..4t+3 and 16+4t..16+4t+3 of rows g
// and g+8, and word t of a repacked Q4_K or Q4_0 unit holds exactly those
// (low and high nibbles); for B it loads words t and 4+t of its token's
// group, and it receives C for rows g, g+8 and tokens 2t, 2t+1.

// mma8Frag describes, per weight type, the XQ 3 product's per-lane code:
// the row pointers of row R ("a" or "b": rows g and g+8), the raw words
// of group U a lane fetches (into registers of the suffix %[1]s, one
// group ahead of the mma that uses them), and their decoding into the
// fragment words lo, hi and the int32-to-float factors fa, fb (reading
// the fetched words through the prefix c).
type mma8Frag struct {
	k16  bool      // Q6_K: two m16n8k16 (lo, hi) instead of one m16n8k32
	ptrs []string  // %[1]s: row suffix, %[2]s: row expression
	raw  []mma8Raw // fetched a group ahead
	dec  []string  // %[1]s: row suffix, %[2]s: the group's sub-block of 8 (Q4_K); its words c<name>
}

// decode writes the decoding of row r's fetched words of a group whose
// index within its super-block is sub (an expression).
func (f mma8Frag) decode(w *Writer, r, sub string) {
	for _, l := range f.dec {
		w.Linef(l, r, sub)
	}
}

// mma8Rows is the row suffixes of mt tiles of 16 weight rows: a0, b0, a1, …
// (rows 16i + g and 16i + g + 8 of the warp's).
func mma8Rows(mt int) []string {
	var rows []string
	for i := range mt {
		rows = append(rows, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i))
	}
	return rows
}

// emitMMA8Acc declares the accumulators acc[MT][NT][4], zeroed.
func emitMMA8Acc(w *Writer) {
	w.Line("float acc[MT][NT][4];")
	w.For("mt", "0", "MT", "1", -1, func() {
		w.For("nt", "0", "NT", "1", -1, func() {
			w.For("i", "0", "4", "1", -1, func() { w.Line("acc[mt][nt][i] = 0.f;") })
		})
	})
}

// mma8Raw is one fetched word of a group: its C type, register name, and
// load expression (%[1]s: row suffix; @: the group).
type mma8Raw struct{ ctype, name, expr string }

var mma8Frags = map[dtype.Type]mma8Frag{
	dtype.Q4_0: {
		ptrs: []string{"const u32* qp%[1]s = (const u32*)((const uint4*)W + (size_t)(%[2]s) * UPR) + t;",
			"const u16* dp%[1]s = (const u16*)(W + DOFF) + (size_t)(%[2]s) * NB;"},
		raw: []mma8Raw{{"u32", "w", "qp%[1]s[4 * @]"}, {"u16", "dv", "dp%[1]s[@]"}},
		dec: []string{"const float fa%[1]s = f16_to_f32(cdv%[1]s), fb%[1]s = 0.f;",
			"const u32 lo%[1]s = cw%[1]s & 0x0f0f0f0fu, hi%[1]s = (cw%[1]s >> 4) & 0x0f0f0f0fu;"},
	},
	dtype.Q4_K: {
		ptrs: []string{"const u32* qp%[1]s = (const u32*)((const uint4*)W + (size_t)(%[2]s) * UPR) + t;",
			"const uint4* hp%[1]s = (const uint4*)(W + HOFF) + (size_t)(%[2]s) * NB;"},
		raw: []mma8Raw{{"u32", "w", "qp%[1]s[4 * @]"}, {"uint4", "hv", "hp%[1]s[@ >> 3]"}},
		dec: []string{"float fa%[1]s, mn%[1]s;", "q4k_dm(chv%[1]s, %[2]s, fa%[1]s, mn%[1]s);",
			"const float fb%[1]s = 8.f * fa%[1]s - mn%[1]s;",
			"const u32 lo%[1]s = cw%[1]s & 0x0f0f0f0fu, hi%[1]s = (cw%[1]s >> 4) & 0x0f0f0f0fu;"},
	},
	dtype.Q8_0: {
		// a group of 32 is two 16-element units: elements 4t.. in unit 2u, 16+4t.. in unit 2u+1
		ptrs: []string{"const u32* qp%[1]s = (const u32*)((const uint4*)W + (size_t)(%[2]s) * UPR) + t;",
			"const u16* dp%[1]s = (const u16*)(W + DOFF) + (size_t)(%[2]s) * NB;"},
		raw: []mma8Raw{{"u32", "wl", "qp%[1]s[8 * @]"}, {"u32", "wh", "qp%[1]s[8 * @ + 4]"}, {"u16", "dv", "dp%[1]s[@]"}},
		dec: []string{"const u32 lo%[1]s = cwl%[1]s, hi%[1]s = cwh%[1]s;", "const float fa%[1]s = f16_to_f32(cdv%[1]s), fb%[1]s = 0.f;"},
	},
	dtype.Q6_K: {
		k16: true,
		ptrs: []string{"const u32* lp%[1]s = (const u32*)((const uint4*)W + (size_t)(%[2]s) * UPR) + t;",
			"const u32* hp%[1]s = (const u32*)((const uint2*)(W + HOFF) + (size_t)(%[2]s) * UPR) + (t >> 1);",
			"const u16* sp%[1]s = (const u16*)(W + SOFF) + (size_t)(%[2]s) * UPR;",
			"const u16* dp%[1]s = (const u16*)(W + DOFF) + (size_t)(%[2]s) * NB;"},
		raw: []mma8Raw{{"u32", "wl", "lp%[1]s[4 * @]"}, {"u32", "wh", "hp%[1]s[2 * @]"}, {"u16", "sv", "sp%[1]s[@]"}, {"u16", "dv", "dp%[1]s[@ >> 3]"}},
		dec: []string{"u32 lo%[1]s, hi%[1]s;", "q6_words(cwl%[1]s, cwh%[1]s, t & 1, lo%[1]s, hi%[1]s);",
			"const float d%[1]s = f16_to_f32(cdv%[1]s);",
			"const float fa%[1]s = d%[1]s * (float)(signed char)(csv%[1]s & 0xffu), fb%[1]s = d%[1]s * (float)(signed char)(csv%[1]s >> 8);"},
	},
}

// fetch writes the loads of group idx into the raw registers of row r.
func (f mma8Frag) fetch(w *Writer, r, idx string) {
	for _, x := range f.raw {
		w.Linef("%s%s = %s;", x.name, r, strings.ReplaceAll(fmt.Sprintf(x.expr, r), "@", "("+idx+")"))
	}
}

// mma8SplitBytes is the static shared memory an XQ 3 arm's warps use to
// add their split sums: (KS-1)·RowsPerBlock sets of MT·NT·4 floats a lane.
func (a GEMVArm) mma8SplitBytes() int {
	ks := a.Threads / 32 / a.RowsPerBlock
	return 4 * (ks - 1) * a.RowsPerBlock * a.rowsPerWarp() * ((a.batchRows() + 7) / 8) * 4 * 32
}

// mma8Groups is the groups of 32 elements of a row of k.
func mma8Groups(k int) int { return k / 32 }

// gemvMMA8 is GEMV for arm.XQ 3: a warp owns RowsPerWarp (at least one)
// tiles of 16 weight rows, each activation fragment it loads serving all
// of them. A block holds RowsPerBlock such sets of rows; when it has more
// warps than that (Threads/32 = KS·RowsPerBlock), KS warps share each set
// and split its groups of 32 (warp ks takes groups ks, ks+KS, …, so the
// warps read adjacent bytes of each row), their sums added in shared
// memory before the first of them stores. Without the split a product of
// 4096 rows ran 64 blocks of four warps on 132 SMs, each warp a serial
// chain over all of K. grid (⌈n/(16·RowsPerWarp·RowsPerBlock)⌉, ⌈m/MB⌉).
func gemvMMA8(t dtype.Type, n, k int, residual bool, arm GEMVArm, e XQEnds, ystride int) (*Kernel, error) {
	ord := arm.Ordered != 0
	if ord && (!mma8OrderTypes[t] || e.QuantOut || e.SwiGLUOut || e.Rope) {
		return nil, fmt.Errorf("%w: ordered int8 tensor-core gemv for %v, ends %q", ErrUnsupported, t, e.suffix())
	}
	if arm.Stages > 0 {
		if _, ok := mma8PipeTypes[t]; ok && k%256 == 0 {
			if ord {
				return gemvMMA8OrderPipe(t, n, k, residual, arm, e, ystride)
			}
			return gemvMMA8Pipe(t, n, k, residual, arm, e, ystride)
		}
		// the other types take the unpipelined default, with the arm's batch rows and order
		mb, order := arm.BatchRows, arm.Ordered
		arm = DefaultXQMMAArm
		arm.BatchRows, arm.Ordered = mb, order
	}
	_, ok := rpTypes[t]
	fr, ok2 := mma8Frags[t]
	if !ok || !ok2 || k%32 != 0 {
		return nil, fmt.Errorf("%w: int8 tensor-core gemv for %v, K %d", ErrUnsupported, t, k)
	}
	mb := arm.batchRows()
	mt := arm.rowsPerWarp() // tiles of 16 weight rows a warp, sharing each activation load
	ks := arm.Threads / 32 / arm.RowsPerBlock
	epi := ""
	if residual {
		epi = "_res"
	}
	epi += e.suffix() + ysName(ystride)
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	deps := repackDeps(t, "f16", "warp", "pdl")
	src := source(fmt.Sprintf("gemv: %v weights repacked, int8 activations from xquant, int8 mma.sync, N %d, K %d, residual %v, %v", t, n, k, residual, arm),
		deps, func(w *Writer) {
			if t == dtype.Q6_K {
				emitQ6Words(w)
			}
			emitMMA8Ops(w)
			if ord {
				emitXQTerms(w, t)
			}
			emitMMA8Defines(w, t, n, k, arm, "groups", fmt.Sprintf("#define U %d // groups unrolled", arm.Unroll))
			w.Raw(ysDefine(ystride))
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: xqGlobalParams, Body: func(w *Writer) {
				emitMMA8Lanes(w)
				w.Line("const int r0 = (blockIdx.x * RPB + tw) * 16 * MT; // the warp's first row")
				w.Comment("rows past N read row N-1 and store nothing; tile i: rows r0 + 16i + g (suffix ai) and + 8 (bi)")
				for i := range mt {
					for _, p := range fr.ptrs {
						w.Linef(p, fmt.Sprintf("a%d", i), fmt.Sprintf("min(r0 + %d + g, N - 1)", 16*i))
						w.Linef(p, fmt.Sprintf("b%d", i), fmt.Sprintf("min(r0 + %d + g + 8, N - 1)", 16*i))
					}
				}
				w.Line("const int m0 = blockIdx.y * MB;")
				w.Line("const int mrows = min(MB, m - m0);")
				w.Comment("this lane's B rows (token g of each tile) and C columns (tokens 2t, 2t+1 of each tile)")
				w.Line("const u8* xb[NT];")
				w.Line("const float4* mc0[NT];")
				w.Line("const float4* mc1[NT];")
				w.Line("bool okb[NT], ok0[NT], ok1[NT];")
				w.For("nt", "0", "NT", "1", -1, func() {
					w.Line("const int nb = 8 * nt + g, n0 = 8 * nt + 2 * t;")
					w.Line("okb[nt] = nb < mrows;")
					w.Line("ok0[nt] = n0 < mrows;")
					w.Line("ok1[nt] = n0 + 1 < mrows;")
					w.Line("xb[nt] = xq + (size_t)(m0 + (okb[nt] ? nb : 0)) * XR + 4 * t;")
					w.Line("mc0[nt] = (const float4*)(xq + (size_t)(m0 + (ok0[nt] ? n0 : 0)) * XR + K);")
					w.Line("mc1[nt] = (const float4*)(xq + (size_t)(m0 + (ok1[nt] ? n0 + 1 : 0)) * XR + K);")
				})
				slots := arm.mma8OrderSlots()
				sets := arm.orderSplit()
				if ord {
					emitMMA8OrderAcc(w, sets*slots)
				} else {
					emitMMA8Acc(w)
				}
				rows := mma8Rows(mt)
				groups := mma8Groups(k)
				w.Comment("each group's words are fetched while the group before it multiplies; the weights'")
				w.Comment("first ones before the wait for the previous kernel (they do not depend on it)")
				for _, r := range rows {
					for _, x := range fr.raw {
						w.Linef("%s %s%s;", x.ctype, x.name, r)
					}
				}
				w.If(fmt.Sprintf("ks < %d", groups), func() {
					for _, r := range rows {
						fr.fetch(w, r, "ks")
					}
				})
				w.Line("pdl_wait();")
				if e.NormIn {
					w.Line("const u8* xr = xq + (size_t)m0 * XR;")
					emitXQRowNorms(w, e.NormEps, "xr", mb)
				}
				fetchX := func(idx string) {
					w.For("nt", "0", "NT", "1", -1, func() {
						w.Linef("xw0[nt] = okb[nt] ? *(const u32*)(xb[nt] + 32 * (%s)) : 0u;", idx)
						w.Linef("xw1[nt] = okb[nt] ? *(const u32*)(xb[nt] + 32 * (%s) + 16) : 0u;", idx)
						w.Linef("xf0[nt] = ok0[nt] ? mc0[nt][%s] : make_float4(0.f, 0.f, 0.f, 0.f);", idx)
						w.Linef("xf1[nt] = ok1[nt] ? mc1[nt][%s] : make_float4(0.f, 0.f, 0.f, 0.f);", idx)
					})
				}
				w.Line("u32 xw0[NT], xw1[NT];")
				w.Line("float4 xf0[NT], xf1[NT];")
				w.If(fmt.Sprintf("ks < %d", groups), func() { fetchX("ks") })
				// body writes the work of group u (in scope), its terms into slot
				// (ordered) or acc
				body := func(slot int) {
					for _, r := range rows {
						for _, x := range fr.raw {
							w.Linef("const %s c%s%s = %s%s;", x.ctype, x.name, r, x.name, r)
						}
					}
					w.Line("u32 cxw0[NT], cxw1[NT];")
					w.Line("float4 cxf0[NT], cxf1[NT];")
					w.For("nt", "0", "NT", "1", -1, func() {
						w.Line("cxw0[nt] = xw0[nt];")
						w.Line("cxw1[nt] = xw1[nt];")
						w.Line("cxf0[nt] = xf0[nt];")
						w.Line("cxf1[nt] = xf1[nt];")
					})
					w.If(fmt.Sprintf("u + KS < %d", groups), func() {
						for _, r := range rows {
							fr.fetch(w, r, "u + KS")
						}
						fetchX("u + KS")
					})
					for _, r := range rows {
						fr.decode(w, r, "u & 7")
					}
					w.For("nt", "0", "NT", "1", -1, func() {
						w.Line("const u32 b0 = cxw0[nt], b1 = cxw1[nt];")
						w.Line("const float4 x0 = cxf0[nt], x1 = cxf1[nt];")
						for i := range mt {
							a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
							if ord {
								emitMMA8OrderTile(w, t, a, b, fmt.Sprintf("oacc[%d][%d][nt]", slot, i))
							} else {
								emitMMA8Tile(w, t, fr, a, b, fmt.Sprintf("acc[%d][nt]", i))
							}
						}
					})
				}
				switch {
				case ord && sets > 1:
					emitMMA8SplitOrderLoop(w, groups, slots, sets, arm.orderUnroll(), body)
					for set := 1; set < sets; set++ {
						emitMMA8OrderLevels(w, slots, set)
					}
				case ord:
					w.Comment("R groups a round, the group of slot s at u0 + s·KS: its residue is ks + s·KS")
					w.Block(fmt.Sprintf("for (int u0 = ks; u0 < %d; u0 += 32)", groups), func() {
						for sl := range slots {
							scope(w, func() {
								w.Linef("const int u = u0 + %d * KS;", sl)
								w.If(fmt.Sprintf("u < %d", groups), func() { body(sl) })
							})
						}
					})
					emitMMA8OrderLevels(w, slots, 0)
				default:
					w.Linef("#pragma unroll %d", arm.Unroll)
					w.Block(fmt.Sprintf("for (int u = ks; u < %d; u += KS)", groups), func() { body(0) })
				}
				red := redStatic
				if ord && sets > 1 {
					emitMMA8SplitOrderFinish(w, slots, sets, ks)
					red = redDeclared
				}
				emitMMA8Finish(w, e, residual, mb, ks, red, ord)
			}})
		})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: xqGlobalParams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, 16*mt*arm.RowsPerBlock), ceilDiv(d.Tokens, mb), 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// emitMMA8Defines writes the #defines an XQ 3 kernel shares: the repacked
// layout's, the arm's tiles and split (KS warps splitting a set of rows'
// shares), the extra lines, and the bytes of a quantised activation row.
func emitMMA8Defines(w *Writer, t dtype.Type, n, k int, arm GEMVArm, shares string, extra ...string) {
	emitRepackDefines(w, rpTypes[t], n, k, k/t.BlockElems())
	w.Linef("#define RPB %d // sets of 16·MT weight rows a block", arm.RowsPerBlock)
	w.Linef("#define MT %d // tiles of 16 weight rows a warp", arm.rowsPerWarp())
	w.Linef("#define MB %d // activation rows per block", arm.batchRows())
	w.Linef("#define NT %d // tiles of 8 activation rows", (arm.batchRows()+7)/8)
	w.Linef("#define KS %d // warps splitting a set of rows' %s", arm.Threads/32/arm.RowsPerBlock, shares)
	for _, l := range extra {
		w.Line(l)
	}
	w.Linef("#define XR %d // bytes of a quantised activation row", XQRowBytes(k))
}

// emitMMA8Ops writes mma_k32 and mma_k16, the int8 mma.sync of XQ 3, and
// I2F: an mma sum c (|c| < 2^22: at most 32 × 127 × 127) as the float
// 1.5·2^23 + c, exactly, by integer addition to its bit pattern, I2F0 being
// 1.5·2^23. The scaling subtracts I2F0 together with the integer-valued
// offset terms (sums of int8 activations times 8 or 32, exact in float),
// so each term is the same float as (float)c minus the offset, without the
// conversion instruction, which issues at a quarter of the FMA rate and
// was four of the scaling's nine instructions a product element.
func emitMMA8Ops(w *Writer) {
	w.Line("#define I2F(c) __int_as_float((c) + 0x4b400000)")
	w.Line("#define I2F0 12582912.f")
	w.Comment("c += a·b over 16 rows × 8 columns × 32 (or 16) int8 elements.")
	w.Emit(Func{Name: "mma_k32", Params: []Param{{"int*", "c"}, {"u32", "a0"}, {"u32", "a1"}, {"u32", "a2"}, {"u32", "a3"}, {"u32", "b0"}, {"u32", "b1"}},
		Body: func(w *Writer) {
			w.Line(`asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"`)
			w.Line(`    : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));`)
		}})
	w.Emit(Func{Name: "mma_k16", Params: []Param{{"int*", "c"}, {"u32", "a0"}, {"u32", "a1"}, {"u32", "b0"}},
		Body: func(w *Writer) {
			w.Line(`asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"`)
			w.Line(`    : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a0), "r"(a1), "r"(b0));`)
		}})
}

// emitMMA8Lanes writes a lane's place in an XQ 3 kernel: its lane, its
// mma group g and thread t, its warp wi, the warp's set of rows tw and its
// share of K ks.
func emitMMA8Lanes(w *Writer) {
	w.Line("const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;")
	w.Line("const int wi = threadIdx.x >> 5, tw = wi % RPB, ks = wi / RPB; // set of rows, share of K")
}

// mma8Red is where an XQ 3 kernel's warps leave their split sums.
type mma8Red int

const (
	redStatic   mma8Red = iota // a static array red
	redRing                    // the dynamic shared memory psm of a pipelined kernel's rings
	redDeclared                // the static array red, declared before (emitMMA8SplitOrderFinish)
)

// emitMMA8Finish writes what follows an XQ 3 kernel's main loop: the
// norm's barrier, the split sums of its KS warps added in shared memory,
// and the stores of warp 0 of each row set (acc[MT][NT][4], with ok0, ok1,
// m0, r0, g, t, lane, ks and tw in scope). The split sums take the
// shared memory red says (mma8Red).
func emitMMA8Finish(w *Writer, e XQEnds, residual bool, mb, ks int, red mma8Red, ordered bool) {
	op := "="
	if residual {
		op = "+="
	}
	if e.NormIn {
		emitXQNormBarrier(w, mb)
	}
	if ks > 1 {
		w.Comment("the split sums: warps ks > 0 leave theirs in shared memory, warp 0 of the set adds them and stores")
		switch red {
		case redRing:
			if !e.NormIn || mb == 1 {
				w.Line("__syncthreads(); // every warp is done with its ring")
			}
			w.Line("float (*red)[RPB][MT * NT * 4][32] = (float (*)[RPB][MT * NT * 4][32])psm;")
		case redStatic:
			w.Line("__shared__ float red[KS - 1][RPB][MT * NT * 4][32];")
		}
		w.If("ks > 0", func() {
			w.For("mt", "0", "MT", "1", -1, func() {
				w.For("nt", "0", "NT", "1", -1, func() {
					w.For("i", "0", "4", "1", -1, func() { w.Line("red[ks - 1][tw][(mt * NT + nt) * 4 + i][lane] = acc[mt][nt][i];") })
				})
			})
		})
		w.Line("__syncthreads();")
		w.If("ks == 0", func() {
			if ordered {
				// the butterfly's levels KS/2 … 1: warp s pairs with warp s + o
				w.For("mt", "0", "MT", "1", -1, func() {
					w.For("nt", "0", "NT", "1", -1, func() {
						w.For("i", "0", "4", "1", -1, func() { emitOrderWarpLevels(w, "acc[mt][nt][i]", "red", ks) })
					})
				})
				return
			}
			w.For("s", "0", "KS - 1", "1", -1, func() {
				w.For("mt", "0", "MT", "1", -1, func() {
					w.For("nt", "0", "NT", "1", -1, func() {
						w.For("i", "0", "4", "1", -1, func() { w.Line("acc[mt][nt][i] += red[s][tw][(mt * NT + nt) * 4 + i][lane];") })
					})
				})
			})
		})
	}
	store := func() {
		w.For("nt", "0", "NT", "1", -1, func() {
			if e.NormIn {
				rn := func(j string) string {
					if mb == 1 {
						return "rn[0]"
					}
					return "srn[min(" + j + ", MB - 1)]"
				}
				w.Linef("const float rn0 = ok0[nt] ? %s : 0.f, rn1 = ok1[nt] ? %s : 0.f;", rn("8 * nt + 2 * t"), rn("8 * nt + 2 * t + 1"))
			}
			w.Line("const size_t y0 = (size_t)(m0 + 8 * nt + 2 * t) * YS;")
			w.For("mt", "0", "MT", "1", -1, func() {
				w.Line("float* c = acc[mt][nt];")
				if e.NormIn {
					w.Line("c[0] *= rn0;")
					w.Line("c[1] *= rn1;")
					w.Line("c[2] *= rn0;")
					w.Line("c[3] *= rn1;")
				}
				w.Line("const int ra = r0 + 16 * mt + g, rb = ra + 8;")
				w.If("ok0[nt] && ra < N", func() { w.Linef("y[y0 + ra] %s c[0];", op) })
				w.If("ok1[nt] && ra < N", func() { w.Linef("y[y0 + YS + ra] %s c[1];", op) })
				w.If("ok0[nt] && rb < N", func() { w.Linef("y[y0 + rb] %s c[2];", op) })
				w.If("ok1[nt] && rb < N", func() { w.Linef("y[y0 + YS + rb] %s c[3];", op) })
			})
		})
	}
	if ks > 1 {
		w.If("ks == 0", store)
	} else {
		store()
	}
	w.Line("pdl_launch();")
}

// emitMMA8Tile writes the mma of one group for the tile of weight rows a
// (rows g) and b (rows g+8) against the activation fragment b0, b1 with
// factors x0, x1 (tokens 2t, 2t+1), accumulated into acc (four floats).
func emitMMA8Tile(w *Writer, t dtype.Type, fr mma8Frag, a, b, acc string) {
	r := strings.NewReplacer("{acc}", acc, "{loa}", "lo"+a, "{lob}", "lo"+b, "{hia}", "hi"+a, "{hib}", "hi"+b,
		"{faa}", "fa"+a, "{fab}", "fa"+b, "{fba}", "fb"+a, "{fbb}", "fb"+b)
	line := func(s string) { w.Line(r.Replace(s)) }
	w.Block(fmt.Sprintf("/* rows %s, %s */", a, b), func() {
		if fr.k16 {
			w.Comment("Q6_K: the halves have their own scales; quants centred by 32")
			line("int s[4] = {0, 0, 0, 0}, h[4] = {0, 0, 0, 0};")
			line("mma_k16(s, {loa}, {lob}, b0);")
			line("mma_k16(h, {hia}, {hib}, b1);")
			line("{acc}[0] += x0.x * ({faa} * (I2F(s[0]) - (I2F0 + 32.f * x0.y)) + {fba} * (I2F(h[0]) - (I2F0 + 32.f * x0.z)));")
			line("{acc}[1] += x1.x * ({faa} * (I2F(s[1]) - (I2F0 + 32.f * x1.y)) + {fba} * (I2F(h[1]) - (I2F0 + 32.f * x1.z)));")
			line("{acc}[2] += x0.x * ({fab} * (I2F(s[2]) - (I2F0 + 32.f * x0.y)) + {fbb} * (I2F(h[2]) - (I2F0 + 32.f * x0.z)));")
			line("{acc}[3] += x1.x * ({fab} * (I2F(s[3]) - (I2F0 + 32.f * x1.y)) + {fbb} * (I2F(h[3]) - (I2F0 + 32.f * x1.z)));")
			return
		}
		line("int c[4] = {0, 0, 0, 0};")
		line("mma_k32(c, {loa}, {lob}, {hia}, {hib}, b0, b1);")
		if t == dtype.Q8_0 {
			line("{acc}[0] += {faa} * x0.x * (I2F(c[0]) - I2F0);")
			line("{acc}[1] += {faa} * x1.x * (I2F(c[1]) - I2F0);")
			line("{acc}[2] += {fab} * x0.x * (I2F(c[2]) - I2F0);")
			line("{acc}[3] += {fab} * x1.x * (I2F(c[3]) - I2F0);")
			return
		}
		w.Comment("Σ (a q - mn) x = a dx Σ (q - 8) xq + b Σ x, b = 8a - mn (0 for Q4_0)")
		line("{acc}[0] += {faa} * x0.x * (I2F(c[0]) - (I2F0 + 8.f * (x0.y + x0.z))) + {fba} * x0.w;")
		line("{acc}[1] += {faa} * x1.x * (I2F(c[1]) - (I2F0 + 8.f * (x1.y + x1.z))) + {fba} * x1.w;")
		line("{acc}[2] += {fab} * x0.x * (I2F(c[2]) - (I2F0 + 8.f * (x0.y + x0.z))) + {fbb} * x0.w;")
		line("{acc}[3] += {fab} * x1.x * (I2F(c[3]) - (I2F0 + 8.f * (x1.y + x1.z))) + {fbb} * x1.w;")
	})
}
