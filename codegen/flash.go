package codegen

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// FlashArm is the tuning of the tensor-core prefill attention.
type FlashArm struct {
	Warps int // warps per block, 16 queries each
	// Stages is how a block stages keys and values in shared memory: 1
	// through registers, a block of keys at a time (load, wait, score);
	// 2 by cp.async into a ring of two blocks of keys, the next copied
	// while the present one is scored (f16 cache only: the 8-bit cache's
	// rows become f16 on the way), its grid heads first (grid (HQ,
	// FlashGrid)), so the query heads of one KV head run side by side and
	// read its keys once from memory. 0 means 1.
	Stages int
}

// DefaultFlashArm is the arm lowering uses where the tunedb has no pick
// (family attn_flash): 64 queries a block, keys through the cp.async ring.
// It won every case measured (H200, session 25: kernel-check 1.3-2.3x the
// register arm, the autotune case 2.72x); FlashArmFor gives the 8-bit
// cache, which has no ring, the same warps staged through registers.
var DefaultFlashArm = FlashArm{Warps: 4, Stages: 2}

// FlashArmFor is a for s: the same warps staged through registers where s's
// cache has no ring (the 8-bit cache), else a.
func FlashArmFor(s AttnShape, a FlashArm) FlashArm {
	if a.stages() == 2 && s.Cache != dtype.F16 {
		a.Stages = 1
	}
	return a
}

// FlashKnobs is the search space of FlashArm.
var FlashKnobs = []Knob{{"warps", []int{2, 4, 8}}, {"stages", []int{1, 2}}}

// Validate reports whether a is well formed.
func (a FlashArm) Validate() error {
	if a.Warps < 1 || a.Warps > 16 || a.Stages < 0 || a.Stages > 2 {
		return fmt.Errorf("%w: flash attention arm %+v", ErrUnsupported, a)
	}
	return nil
}

// String is the arm's short name used in kernel names and tables: w4,
// or w4_s2 for the cp.async ring.
func (a FlashArm) String() string {
	if a.stages() == 2 {
		return fmt.Sprintf("w%d_s2", a.Warps)
	}
	return fmt.Sprintf("w%d", a.Warps)
}

func (a FlashArm) stages() int { return max(1, a.Stages) }

// Point is the arm as a search-space point.
func (a FlashArm) Point() Point { return Point{"warps": a.Warps, "stages": a.stages()} }

// FlashArmOf returns the FlashArm p describes (missing knobs are zero).
func FlashArmOf(p Point) FlashArm { return FlashArm{Warps: p["warps"], Stages: p["stages"]} }

// flashShared is the dynamic shared memory of arm's blocks at s: the ring
// of two blocks of keys and values (none for one stage, whose staging is
// static).
func (a FlashArm) flashShared(s AttnShape) int {
	if a.stages() == 1 {
		return 0
	}
	return 2 * 2 * flashKeys * (s.HeadDim + 8) * 2
}

// FlashTol is the check tolerance (relative L2 error against the f32
// reference) of FlashPrefillAttention: its queries and probabilities are
// rounded to f16.
const FlashTol = 5e-3

// flashKeys is the keys a block stages in shared memory at a time.
const flashKeys = 64

// FlashSupported reports whether FlashPrefillAttention has a kernel for s:
// an f16 or 8-bit cache and heads of 16 to 128 dimensions in steps of 16.
// The 8-bit cache's keys and values become f16 (times their block's
// scale) as the block stages them.
func FlashSupported(s AttnShape) bool {
	return s.validate() == nil && (s.Cache == dtype.F16 || s.Cache == CacheQ8) && s.HeadDim%16 == 0 && s.HeadDim >= 16 && s.HeadDim <= 128
}

// FlashPrefillAttention returns causal prefill attention on tensor cores
// (mma.sync m16n8k16, f16 operands, f32 accumulation), with the parameters
// and results of PrefillAttention:
//
//	attn_flash(const float* q, const cache_t* kc, const cache_t* vc, const int* pages,
//	           const int* tok_base, const int* tok_pos, const int* tiles, float* out, int ntok)
//
// (cache_t u16 for the f16 cache; u8 for the 8-bit one, whose rows are
// staged as f16: each int8 times its block's scale).
//
// A block takes one tile (FlashTiles: up to 16·Warps consecutive tokens of
// one sequence, tiles[blockIdx.x] its first, -1 for none) of one query
// head; each warp holds 16 of them as an m16 tile. A step that mixes
// decodes with prompt chunks thus gives each decode a block of its own,
// where consecutive tokens would put many sequences in one block, each
// staged and scored in turn by every warp. The block stages the sequence's
// (one tok_base: its page table, pages + tok_base) keys and
// values, flashKeys rows at a time, in shared memory; each warp scores its
// queries against them (Q·Kᵀ, the B fragments read by ldmatrix), masks
// the keys past each token's position and those of other sequences, keeps
// an online softmax per row, and adds P·V (P rounded to f16, V fragments
// by ldmatrix.trans). Queries are scaled and rounded to f16, so the result
// differs from PrefillAttention's f32 arithmetic by f16 rounding (kernel-
// check's tolerance FlashTol). grid (FlashGrid, HQ); the ring arms (HQ, FlashGrid).
func FlashPrefillAttention(s AttnShape, arm FlashArm) (*Kernel, error) {
	if !FlashSupported(s) {
		return nil, fmt.Errorf("%w: tensor-core prefill attention for %s", ErrUnsupported, s.tag())
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	ring := arm.stages() == 2
	if ring && s.Cache != dtype.F16 {
		return nil, fmt.Errorf("%w: flash attention arm %v (a cp.async ring) over the %v cache", ErrUnsupported, arm, s.Cache)
	}
	name := fmt.Sprintf("attn_flash_%s_%s", s.tag(), arm)
	ct := cacheCType(s.Cache)
	params := []Param{{"const float* __restrict__", "q"}, {"const " + ct + "* __restrict__", "kc"}, {"const " + ct + "* __restrict__", "vc"},
		{"const int* __restrict__", "pages"}, {"const int* __restrict__", "tok_base"}, {"const int* __restrict__", "tok_pos"}, {"const int* __restrict__", "tiles"}, {"float* __restrict__", "out"}, {"int", "ntok"}}
	threads := 32 * arm.Warps
	q8 := s.Cache == CacheQ8
	what := fmt.Sprintf("causal prefill attention on tensor cores: %s, %d warps", s.tag(), arm.Warps)
	if ring {
		what += ", keys and values copied by cp.async into a ring of two blocks"
	}
	src := source(what, []string{"types", "pdl"}, func(w *Writer) {
		s.defines(w)
		w.Linef("#define NW %d // warps, 16 queries each", arm.Warps)
		w.Linef("#define KB %d // keys staged at a time", flashKeys)
		w.Line("#define LDK (HD + 8) // shared row stride in halves: rows start 16 bytes apart in bank order")
		w.Line("#define D16 (HD / 16) // k steps of Q·Kᵀ")
		w.Line("#define NTO (HD / 8) // n tiles of the output")
		w.Linef("#define NEG_INF %s", cfloat(float32(math.Inf(-1))))
		w.Blank()
		w.Comment("c += a·b, 16×16 f16 times 16×8 f16 into f32.")
		w.Emit(Func{Name: "mma_f16", Params: []Param{{"float*", "c"}, {"const u32*", "a"}, {"u32", "b0"}, {"u32", "b1"}}, Body: func(w *Writer) {
			w.Line(`asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"`)
			w.Line(`    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));`)
		}})
		w.Comment("lo and hi rounded to f16, lo in the low half.")
		w.Emit(Func{Name: "pack_h2", Return: "u32", Params: []Param{{"float", "lo"}, {"float", "hi"}}, Body: func(w *Writer) {
			w.Line("u32 r;")
			w.Line(`asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));`)
			w.Line("return r;")
		}})
		if q8 {
			w.Comment("The 8 int8 elements of r times scale as f16, two to a word.")
			w.Emit(Func{Name: "q8_h8", Return: "uint4", Params: []Param{{"uint2", "r"}, {"float", "scale"}}, Body: func(w *Writer) {
				w.Line("float v[8];")
				w.For("i", "0", "8", "1", -1, func() { w.Line("v[i] = (float)(signed char)((i < 4 ? r.x : r.y) >> (8 * (i & 3))) * scale;") })
				w.Line("return make_uint4(pack_h2(v[0], v[1]), pack_h2(v[2], v[3]), pack_h2(v[4], v[5]), pack_h2(v[6], v[7]));")
			}})
		}
		w.Emit(Func{Name: "smem_addr", Return: "u32", Params: []Param{{"const void*", "p"}}, Body: func(w *Writer) {
			w.Line("u32 a;")
			w.Line(`asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));`)
			w.Line("return a;")
		}})
		if ring {
			emitCPAsync(w)
		}
		w.Emit(Func{Name: "ldsm_x4", Params: []Param{{"const u16*", "p"}, {"u32*", "r"}}, Body: func(w *Writer) {
			w.Line(`asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"`)
			w.Line(`    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));`)
		}})
		w.Emit(Func{Name: "ldsm_x4_t", Params: []Param{{"const u16*", "p"}, {"u32*", "r"}}, Body: func(w *Writer) {
			w.Line(`asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"`)
			w.Line(`    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));`)
		}})
		w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
			if ring {
				w.Line("extern __shared__ __align__(16) u16 fsm[]; // the ring: [2][K, V][KB * LDK]")
			} else {
				w.Line("__shared__ __align__(16) u16 Ks[KB * LDK];")
				w.Line("__shared__ __align__(16) u16 Vs[KB * LDK];")
			}
			w.Line("__shared__ int sb[NW * 16], sp[NW * 16];")
			w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;")
			if ring {
				// heads the faster grid dimension: the query heads of one KV head, which read the
				// same keys, run side by side and share them through L2
				w.Line("const int h = blockIdx.x, kvh = h / GROUP, t0 = tiles[blockIdx.y];")
			} else {
				w.Line("const int h = blockIdx.y, kvh = h / GROUP, t0 = tiles[blockIdx.x];")
			}
			w.Line("pdl_wait();")
			w.If("t0 < 0", func() { w.Line("return; // past the step's tiles") })
			w.Comment("the tile's tokens: sequence (its page table's offset in pages) and position; -1 past its run")
			w.Line("const int tb0 = tok_base[t0];")
			w.For("i", "threadIdx.x", "NW * 16", "NW * 32", 0, func() {
				w.Line("const bool ok = t0 + i < ntok && tok_base[t0 + i] == tb0;")
				w.Line("sb[i] = ok ? tb0 : -1;")
				w.Line("sp[i] = ok ? tok_pos[t0 + i] : -1;")
			})
			w.Line("__syncthreads();")
			w.Comment("this lane's rows of the warp's tile: ra (g) and rb (g + 8)")
			w.Line("const int ra = warp * 16 + g, rb = ra + 8;")
			w.Line("const int basea = sb[ra], baseb = sb[rb], posa = sp[ra], posb = sp[rb];")
			w.Comment("Q as A fragments, scaled and rounded to f16: a0 row ra, a1 row rb, dims 2t, 2t+1 (+8 in a2, a3)")
			w.Line("u32 qf[D16][4];")
			w.Line("const float* qa = q + (size_t)min(t0 + ra, ntok - 1) * QSTRIDE + h * HD + 2 * t;")
			w.Line("const float* qb = q + (size_t)min(t0 + rb, ntok - 1) * QSTRIDE + h * HD + 2 * t;")
			w.For("ks", "0", "D16", "1", -1, func() {
				w.Line("qf[ks][0] = pack_h2(qa[16 * ks] * SCALE, qa[16 * ks + 1] * SCALE);")
				w.Line("qf[ks][1] = pack_h2(qb[16 * ks] * SCALE, qb[16 * ks + 1] * SCALE);")
				w.Line("qf[ks][2] = pack_h2(qa[16 * ks + 8] * SCALE, qa[16 * ks + 9] * SCALE);")
				w.Line("qf[ks][3] = pack_h2(qb[16 * ks + 8] * SCALE, qb[16 * ks + 9] * SCALE);")
			})
			w.Line("float o[NTO][4];")
			w.For("n", "0", "NTO", "1", -1, func() {
				w.For("e", "0", "4", "1", -1, func() { w.Line("o[n][e] = 0.f;") })
			})
			w.Line("float ma = NEG_INF, mb = NEG_INF, la = 0.f, lb = 0.f;")
			w.Comment("the tile's tokens, one sequence's: its first rows (row 0 always)")
			w.Line("const int b = tb0;")
			w.Line("int maxpos = -1;")
			if s.Window > 0 {
				w.Line("int minpos = 0x7fffffff;")
			}
			w.Block("for (int i1 = 0; i1 < NW * 16 && sb[i1] == b; ++i1)", func() {
				w.Line("maxpos = max(maxpos, sp[i1]);")
				if s.Window > 0 {
					w.Line("minpos = min(minpos, sp[i1]);")
				}
			})
			w.Line("int wmax = -1; // the last key any row of this warp reads")
			if s.Window > 0 {
				w.Line("int wmin = 0x7fffffff; // the first key any row of this warp reads")
			}
			w.For("r", "warp * 16", "warp * 16 + 16", "1", -1, func() {
				w.If("sb[r] == b", func() {
					w.Line("wmax = max(wmax, sp[r]);")
					if s.Window > 0 {
						w.Line("wmin = min(wmin, sp[r] - WINDOW + 1);")
					}
				})
			})
			from := "0"
			if s.Window > 0 {
				w.Comment("the block of keys holding the tile's first key in a window: earlier blocks are skipped")
				w.Line("const int cfirst = max(0, minpos - WINDOW + 1) / KB * KB;")
				from = "cfirst"
			}
			// stage copies keys c .. c+KB-1 into ring block buf by cp.async
			// (zeros past maxpos, whose scores are masked: no NaN reaches P·V)
			stage := func(c, buf string) {
				w.Block("", func() {
					w.Linef("u16* const kd0 = fsm + (%s) * (2 * KB * LDK);", buf)
					w.For("idx", "threadIdx.x", "KB * (HD / 8)", "NW * 32", 0, func() {
						w.Line("const int r = idx / (HD / 8), seg = idx % (HD / 8);")
						w.Line("u16* const kd = kd0 + r * LDK + 8 * seg;")
						w.Line("u16* const vd = kd + KB * LDK;")
						w.IfElse(c+" + r <= maxpos", func() {
							w.Linef("const size_t off = PROW(pages + b, %s + r) * CROW + kvh * HD + 8 * seg;", c)
							w.Line("cp_cg16(smem_addr(kd), kc + off);")
							w.Line("cp_cg16(smem_addr(vd), vc + off);")
						}, func() {
							w.Line("*(uint4*)kd = make_uint4(0u, 0u, 0u, 0u);")
							w.Line("*(uint4*)vd = make_uint4(0u, 0u, 0u, 0u);")
						})
					})
					w.Line("CP_COMMIT();")
				})
			}
			loop := fmt.Sprintf("for (int c0 = %s; c0 <= maxpos; c0 += KB)", from)
			if ring {
				w.If(from+" <= maxpos", func() { stage(from, "0") })
				loop = fmt.Sprintf("for (int c0 = %s, it = 0; c0 <= maxpos; c0 += KB, ++it)", from)
			}
			w.Block(loop, func() {
				if ring {
					w.Line("__syncthreads(); // the ring's other block is read: the previous keys are scored")
					w.IfElse("c0 + KB <= maxpos", func() {
						stage("c0 + KB", "(it & 1) ^ 1")
						w.Line("CP_WAIT(1); // this thread's copies of the present block have landed")
					}, func() { w.Line("CP_WAIT(0);") })
					w.Line("__syncthreads(); // and every thread's")
					w.Line("const u16* const Ks = fsm + (it & 1) * (2 * KB * LDK);")
					w.Line("const u16* const Vs = Ks + KB * LDK;")
				} else {
					w.Line("__syncthreads(); // the previous keys are read")
					w.For("idx", "threadIdx.x", "KB * (HD / 8)", "NW * 32", 0, func() {
						w.Line("const int r = idx / (HD / 8), seg = idx % (HD / 8);")
						w.Line("uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = kv;")
						w.If("c0 + r <= maxpos", func() {
							w.Line("const size_t row = PROW(pages + b, c0 + r);")
							w.Line("const size_t off = row * CROW + kvh * HD + 8 * seg;")
							if q8 {
								w.Line("const size_t so = row * CROW + HKV * HD + 4 * ((kvh * HD + 8 * seg) >> 5); // the block's scale")
								w.Line("kv = q8_h8(*(const uint2*)(kc + off), *(const float*)(kc + so));")
								w.Line("vv = q8_h8(*(const uint2*)(vc + off), *(const float*)(vc + so));")
							} else {
								w.Line("kv = *(const uint4*)(kc + off);")
								w.Line("vv = *(const uint4*)(vc + off);")
							}
						})
						w.Line("*(uint4*)(Ks + r * LDK + 8 * seg) = kv;")
						w.Line("*(uint4*)(Vs + r * LDK + 8 * seg) = vv;")
					})
					w.Line("__syncthreads();")
				}
				w.If("c0 > wmax", func() { w.Line("continue; // causal: none of these keys for this warp") })
				if s.Window > 0 {
					w.If("c0 + KB <= wmin", func() { w.Line("continue; // every key before the windows of this warp's rows") })
				}
				w.Comment("S = Q·Kᵀ over the staged keys: n tile j holds keys 8j .. 8j+7")
				w.Line("float s[KB / 8][4];")
				w.For("j", "0", "KB / 8", "1", -1, func() {
					w.For("e", "0", "4", "1", -1, func() { w.Line("s[j][e] = 0.f;") })
				})
				w.For("ks", "0", "D16", "1", -1, func() {
					w.For("jp", "0", "KB / 16", "1", -1, func() {
						w.Line("u32 kf[4]; // keys 16jp.. (dims 16ks.., +8), keys 16jp+8.. (the same)")
						w.Line("ldsm_x4(Ks + (16 * jp + (lane & 7) + 8 * (lane >> 4)) * LDK + 16 * ks + 8 * ((lane >> 3) & 1), kf);")
						w.Line("mma_f16(s[2 * jp], qf[ks], kf[0], kf[1]);")
						w.Line("mma_f16(s[2 * jp + 1], qf[ks], kf[2], kf[3]);")
					})
				})
				if s.Softcap > 0 {
					w.For("j", "0", "KB / 8", "1", -1, func() {
						w.For("e", "0", "4", "1", -1, func() { s.capScore(w, "s[j][e]") })
					})
				}
				w.Comment("mask: keys past the row's position or of another sequence")
				past := func(pos string) string {
					if s.Window > 0 {
						return fmt.Sprintf("key > %s || key <= %s - WINDOW", pos, pos)
					}
					return "key > " + pos
				}
				w.Line("float xa = NEG_INF, xb = NEG_INF;")
				w.For("j", "0", "KB / 8", "1", -1, func() {
					w.For("e", "0", "2", "1", -1, func() {
						w.Line("const int key = c0 + 8 * j + 2 * t + e;")
						w.If("basea != b || "+past("posa"), func() { w.Line("s[j][e] = NEG_INF;") })
						w.If("baseb != b || "+past("posb"), func() { w.Line("s[j][2 + e] = NEG_INF;") })
						w.Line("xa = fmaxf(xa, s[j][e]);")
						w.Line("xb = fmaxf(xb, s[j][2 + e]);")
					})
				})
				w.Line("xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1));")
				w.Line("xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));")
				w.Line("xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1));")
				w.Line("xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));")
				w.Line("const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);")
				w.Line("const float ua = na == NEG_INF ? 0.f : na, ub = nb == NEG_INF ? 0.f : nb; // rows with no key yet")
				w.Line("const float ca = __expf(ma - ua), cb = __expf(mb - ub);")
				w.Line("la *= ca;")
				w.Line("lb *= cb;")
				w.For("n", "0", "NTO", "1", -1, func() {
					w.Line("o[n][0] *= ca;")
					w.Line("o[n][1] *= ca;")
					w.Line("o[n][2] *= cb;")
					w.Line("o[n][3] *= cb;")
				})
				w.Line("ma = na;")
				w.Line("mb = nb;")
				w.Comment("P as A fragments of P·V: k step kk is n tiles 2kk (a0, a1) and 2kk+1 (a2, a3)")
				w.Line("u32 pf[KB / 16][4];")
				w.For("j", "0", "KB / 8", "1", -1, func() {
					w.Line("const float p0 = __expf(s[j][0] - ua), p1 = __expf(s[j][1] - ua);")
					w.Line("const float p2 = __expf(s[j][2] - ub), p3 = __expf(s[j][3] - ub);")
					w.Line("la += p0 + p1;")
					w.Line("lb += p2 + p3;")
					w.Line("pf[j >> 1][2 * (j & 1)] = pack_h2(p0, p1);")
					w.Line("pf[j >> 1][2 * (j & 1) + 1] = pack_h2(p2, p3);")
				})
				w.For("kk", "0", "KB / 16", "1", -1, func() {
					w.For("np", "0", "NTO / 2", "1", -1, func() {
						w.Line("u32 vf[4]; // keys 16kk.. and 16kk+8.. of dims 16np.., then of dims 16np+8..")
						w.Line("ldsm_x4_t(Vs + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * LDK + 16 * np + 8 * (lane >> 4), vf);")
						w.Line("mma_f16(o[2 * np], pf[kk], vf[0], vf[1]);")
						w.Line("mma_f16(o[2 * np + 1], pf[kk], vf[2], vf[3]);")
					})
				})
			})
			w.Comment("the rows' sums over the quad, then the normalised output")
			w.Line("la += __shfl_xor_sync(0xffffffffu, la, 1);")
			w.Line("la += __shfl_xor_sync(0xffffffffu, la, 2);")
			w.Line("lb += __shfl_xor_sync(0xffffffffu, lb, 1);")
			w.Line("lb += __shfl_xor_sync(0xffffffffu, lb, 2);")
			w.Line("const float ia = 1.f / la, ib = 1.f / lb;")
			w.For("n", "0", "NTO", "1", -1, func() {
				w.If("basea >= 0", func() {
					w.Line("*(float2*)(out + (size_t)(t0 + ra) * HQ * HD + h * HD + 8 * n + 2 * t) = make_float2(o[n][0] * ia, o[n][1] * ia);")
				})
				w.If("baseb >= 0", func() {
					w.Line("*(float2*)(out + (size_t)(t0 + rb) * HQ * HD + h * HD + 8 * n + 2 * t) = make_float2(o[n][2] * ib, o[n][3] * ib);")
				})
			})
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "attn_flash", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		tiles := FlashGrid(d.Tokens, d.Seqs, arm.Rows())
		if !ring {
			return Geometry{Grid: dim3(tiles, s.Heads, 1), Block: dim3(threads, 1, 1)}
		}
		// static: the tile's sequences and positions (sb, sp: two ints a row)
		return Geometry{Grid: dim3(s.Heads, tiles, 1), Block: dim3(threads, 1, 1),
			Shared: uint32(arm.flashShared(s)), StaticShared: uint32(2 * 4 * arm.Rows())}
	}}, nil
}

// Rows is the tokens a tile of the arm holds: 16 a warp.
func (a FlashArm) Rows() int { return 16 * a.Warps }

// FlashGrid is the blocks a query head of FlashPrefillAttention launches for
// a step of ntok tokens over seqs sequences, tiles of rows tokens: at least
// its tiles, whatever the sequences' lengths (each run of a sequence, and
// the padding after them, has one tile more than its whole tiles).
func FlashGrid(ntok, seqs, rows int) int {
	return max(1, min(ntok, ceilDiv(ntok, rows)+seqs+1))
}

// FlashTiles writes the tiles of FlashPrefillAttention over a step whose
// tokens' page-table offsets are base (InTokBase) into tiles: each run of
// equal offsets (a sequence's tokens, which the step keeps together, or
// the padding after them) cut every rows tokens, as the tile's first token,
// then -1 to the end of tiles. It returns the number of tiles; tiles holds
// at least len(base) entries.
func FlashTiles(tiles, base []int32, rows int) int {
	n := 0
	for t := 0; t < len(base); t++ {
		if t == 0 || base[t] != base[t-1] || t-int(tiles[n-1]) == rows {
			tiles[n] = int32(t)
			n++
		}
	}
	for i := n; i < len(tiles); i++ {
		tiles[i] = -1
	}
	return n
}
