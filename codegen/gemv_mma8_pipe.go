package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// The pipelined XQ 3 product (GEMVArm.Stages > 0). The unpipelined kernel
// fetches each group of 32 elements one group ahead into registers, so a
// warp has one group of its weights in flight (16·MT rows × 16 bytes):
// with 16 warps a multiprocessor that is about 8 KB, and at the latency of
// HBM under load it cannot read much more than a tenth of the copy rate,
// which is what the H200 measured at 16 rows (docs/PERFORMANCE.md).
//
// Here each warp owns a ring of Stages groups in shared memory that
// cp.async fills Stages-1 groups ahead of the mma: the warp's weight units
// of the group (and, once a super-block, the rows' heads, in a ring of
// two), and the group's int8 activations and their factors of every token
// of the block, so no register waits on a load until the group is used.
// A warp takes whole super-blocks (ks, ks+KS, …), eight groups in a row:
// the heads are fetched once per super-block instead of once per group,
// and with Stages dividing 8 every ring slot and sub-block index is a
// constant of the unrolled loop. The warps synchronise with nothing but
// themselves (cp.async.wait_group and __syncwarp) until the split sums.
//
// The arithmetic is the unpipelined kernel's, term for term (mma8Frags'
// decoding, emitMMA8Tile, emitMMA8Finish); only the order in which the
// split warps add their groups differs.

// mma8PipeTypes are the weight types the pipelined arm covers; the others
// take the unpipelined kernel.
var mma8PipeTypes = map[dtype.Type]mma8PipeType{
	dtype.Q4_K: {rowBytes: 16, headBytes: 16},
	dtype.Q6_K: {rowBytes: 28, headBytes: 4},
}

// mma8PipeType is a weight type's bytes in a warp's ring: a row's bytes
// of one group in a stage, and a row's bytes of one super-block in the
// head ring. A stage holds its rows' bytes plane by plane (Q6_K: the
// 16-byte units of low bits of all WR rows, then their 8 bytes of high
// bits, then the 4-byte words holding their scales), each plane aligned
// for its copies and read without bank conflicts.
type mma8PipeType struct{ rowBytes, headBytes int }

// mma8TokenBytes is a token's bytes of one group in a stage: its 32 int8
// activations, then their float4 of factors (48: the lanes reading words
// of eight tokens hit distinct banks).
const mma8TokenBytes = 48

// mma8PipeShared is the dynamic shared memory of arm's blocks for rows of
// type pt: each warp's ring of Stages groups and its two heads, which the
// split sums reuse after the main loop.
func (a GEMVArm) mma8PipeShared(pt mma8PipeType) int {
	wr := 16 * a.rowsPerWarp()
	stage := wr*pt.rowBytes + 8*((a.batchRows()+7)/8)*mma8TokenBytes
	return max(a.Threads/32*(a.Stages*a.Unroll*stage+2*wr*pt.headBytes), a.mma8SplitBytes())
}

// mma8PipeMaxShared is the most shared memory arm's blocks take over the
// types it covers (and the norm's 1/rms of each row).
func (a GEMVArm) mma8PipeMaxShared() int {
	n := 0
	for _, pt := range mma8PipeTypes {
		n = max(n, a.mma8PipeShared(pt))
	}
	return n + 4*a.batchRows()
}

// emitCPAsync writes the cp.async helpers: 16-byte copies that skip L1
// (weights, read once) or keep it (activations, which the block's other
// row sets read too), 8- and 4-byte ones, and the group commit and wait.
func emitCPAsync(w *Writer) {
	w.Comment("Asynchronous copies global to shared (sm_80+): s is a shared address.")
	for _, c := range []struct {
		name, op string
		n        int
	}{{"cp_cg16", "cg", 16}, {"cp_ca16", "ca", 16}, {"cp_ca8", "ca", 8}, {"cp_ca4", "ca", 4}} {
		w.Emit(Func{Name: c.name, Params: []Param{{"u32", "s"}, {"const void*", "g"}}, Body: func(w *Writer) {
			w.Linef(`asm volatile("cp.async.%s.shared.global [%%0], [%%1], %d;" :: "r"(s), "l"(g) : "memory");`, c.op, c.n)
		}})
	}
	w.Line(`#define CP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")`)
	w.Line(`#define CP_WAIT(n) asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory")`)
	w.Blank()
}

// gemvMMA8Pipe is gemvMMA8 for arm.Stages > 0 over Q4_K and Q6_K weights
// (K a multiple of 256; Validate has checked the arm's shared memory).
// grid (⌈n/(16·RowsPerWarp·RowsPerBlock)⌉, ⌈m/MB⌉), dynamic shared memory
// mma8PipeShared.
func gemvMMA8Pipe(t dtype.Type, n, k int, residual bool, arm GEMVArm, e XQEnds, ystride int) (*Kernel, error) {
	fr := mma8Frags[t]
	pt := mma8PipeTypes[t]
	mb := arm.batchRows()
	mt := arm.rowsPerWarp()
	ks := arm.Threads / 32 / arm.RowsPerBlock
	nt := (mb + 7) / 8
	p := arm.Stages
	gs := arm.Unroll // groups a stage
	wr := 16 * mt
	cr := ceilDiv(wr, 32)            // weight rows a lane copies
	xa := ceilDiv(3*8*nt, 32)        // activation chunks a lane copies (three a token)
	shared := arm.mma8PipeShared(pt) // a block's
	pr := pipeRing{t: t, fr: fr, mt: mt, cr: cr, p: p, gs: gs}
	epi := ""
	if residual {
		epi = "_res"
	}
	epi += e.suffix() + ysName(ystride)
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	deps := repackDeps(t, "f16", "warp", "pdl")
	src := source(fmt.Sprintf("gemv: %v weights repacked, int8 activations from xquant, int8 mma.sync fed by cp.async, %d stages, N %d, K %d, residual %v, %v", t, p, n, k, residual, arm),
		deps, func(w *Writer) {
			if t == dtype.Q6_K {
				emitQ6Words(w)
			}
			emitCPAsync(w)
			emitMMA8Ops(w)
			emitMMA8Defines(w, t, n, k, arm, "super-blocks")
			pr.defines(w, pt, mma8TokenBytes, ystride)
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: xqGlobalParams, Body: func(w *Writer) {
				pr.warpStart(w)
				acts := emitActCopies(w, xa)
				pr.columns(w)
				pr.loop(w, func() {
					if e.NormIn {
						w.Line("const u8* xr = xq + (size_t)m0 * XR;")
						emitXQRowNorms(w, e.NormEps, "xr", mb)
					}
				}, acts, func(j int) {
					w.For("nt", "0", "NT", "1", -1, func() {
						emitSlotTokens(w)
						for i := range mt {
							emitMMA8Tile(w, t, fr, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("acc[%d][nt]", i))
						}
					})
				})
				emitMMA8Finish(w, e, residual, mb, ks, redRing, false)
			}})
		})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: xqGlobalParams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, wr*arm.RowsPerBlock), ceilDiv(d.Tokens, mb), 1), Block: dim3(arm.Threads, 1, 1), Shared: uint32(shared),
			StaticShared: uint32(4 * mb)}
	}}, nil
}

// emitActCopies writes the places of the activation chunks this lane of
// an XQ 3 ring copies (xa a lane) and returns the writer of their copies
// of group u into the slot at shared address sa (tokens at XO).
func emitActCopies(w *Writer, xa int) func(u, sa string) {
	w.Comment("the activation chunks this lane copies: chunk c is part c / (8·NT) (int8 bytes 0-15,")
	w.Comment("16-31, the factors) of token c %% (8·NT), a token past the block's rows copying its last")
	for a := range xa {
		w.Linef("const int xc%[1]d = lane + %[2]d, xt%[1]d = xc%[1]d %% (8 * NT), xp%[1]d = xc%[1]d / (8 * NT);", a, 32*a)
		w.Linef("const bool xk%[1]d = xc%[1]d < 3 * 8 * NT;", a)
		w.Linef("const u8* xg%[1]d = xq + (size_t)(m0 + min(xt%[1]d, mrows - 1)) * XR + (xp%[1]d < 2 ? 16 * xp%[1]d : K);", a)
		w.Linef("const int xs%[1]d = xp%[1]d < 2 ? 32 : 16; // bytes a group", a)
		w.Linef("const u32 xo%[1]d = XO + xt%[1]d * TB + 16 * xp%[1]d;", a)
	}
	return func(u, sa string) {
		for a := range xa {
			w.If(fmt.Sprintf("xk%d", a), func() { w.Linef("cp_ca16(%s + xo%[2]d, xg%[2]d + xs%[2]d * (%[3]s));", sa, a, u) })
		}
	}
}

// pipeRing is what the pipelined products (XQ 3 here, XQ 4 in
// gemv_mmah.go) share: the weight rows a lane copies into its warp's ring,
// their copies, and the ring's schedule over the warp's super-blocks.
type pipeRing struct {
	t             dtype.Type
	fr            mma8Frag
	mt, cr, p, gs int // tiles of 16 rows a warp, rows a lane copies, stages, groups a stage
}

func (pr pipeRing) ring() int { return pr.p * pr.gs }

// defines writes the ring's shape (stages, slots, bytes of a row's group,
// of its head and of a token's group, pt's) after emitMMA8Defines.
func (pr pipeRing) defines(w *Writer, pt mma8PipeType, tokenBytes, ystride int) {
	w.Linef("#define P %d // stages of a warp's ring", pr.p)
	w.Linef("#define RING %d // its group slots: P stages of %d groups", pr.ring(), pr.gs)
	w.Linef("#define WR %d // weight rows a warp", 16*pr.mt)
	w.Linef("#define RB %d // a row's bytes of a group in a stage", pt.rowBytes)
	w.Linef("#define HB %d // a row's bytes of a super-block head", pt.headBytes)
	w.Linef("#define TB %d // a token's bytes of a group in a stage", tokenBytes)
	if tokenBytes == mmahTokenBytes {
		w.Line("#define HR (2 * K) // bytes of an f16 activation row")
	}
	w.Line("#define XO (WR * RB) // the tokens' offset in a stage")
	w.Line("#define SB (XO + 8 * NT * TB) // bytes of a group slot")
	w.Line("#define WSM (RING * SB + 2 * WR * HB) // bytes of a warp's ring and heads")
	w.Line("#define NSB (K / 256) // super-blocks a row")
	w.Raw(ysDefine(ystride))
	w.Blank()
}

// warpStart writes a warp's place in the block (its rows, its share of K,
// its ring) and the pointers to the weight rows its lanes copy.
func (pr pipeRing) warpStart(w *Writer) {
	w.Line("extern __shared__ uint4 psm[];")
	emitMMA8Lanes(w)
	w.Line("const int r0 = (blockIdx.x * RPB + tw) * WR; // the warp's first row")
	w.Line("const u8* ws = (const u8*)psm + wi * WSM; // the warp's ring, then its two heads")
	w.Line("const u32 wsa = (u32)__cvta_generic_to_shared(ws);")
	w.Line("const int nsb = ks < NSB ? (NSB - 1 - ks) / KS + 1 : 0; // the warp's super-blocks: ks, ks + KS, …")
	w.Line("const int m0 = blockIdx.y * MB;")
	w.Line("const int mrows = min(MB, m - m0);")
	pr.rowPointers(w)
}

// columns writes which of this lane's C columns hold tokens of the block,
// and the accumulators.
func (pr pipeRing) columns(w *Writer) {
	emitMMA8Columns(w)
	emitMMA8Acc(w)
}

// emitMMA8Columns writes which of this lane's C columns hold tokens of the
// block (ok0, ok1).
func emitMMA8Columns(w *Writer) {
	w.Comment("this lane's C columns (tokens 2t, 2t+1 of each tile)")
	w.Line("bool ok0[NT], ok1[NT];")
	w.For("nt", "0", "NT", "1", -1, func() {
		w.Line("ok0[nt] = 8 * nt + 2 * t < mrows;")
		w.Line("ok1[nt] = 8 * nt + 2 * t + 1 < mrows;")
	})
}

// rowPointers writes the pointers to the weight rows this lane copies.
func (pr pipeRing) rowPointers(w *Writer) {
	r := pr
	w.Comment("the weight rows this lane copies (rows past N copy row N-1 and store nothing)")
	for c := range r.cr {
		w.Linef("const bool wc%d = lane + %d < WR;", c, 32*c)
		w.Linef("const int wr%d = min(r0 + lane + %d, N - 1);", c, 32*c)
		switch r.t {
		case dtype.Q4_K:
			w.Linef("const uint4* cq%[1]d = (const uint4*)W + (size_t)wr%[1]d * UPR;", c)
			w.Linef("const uint4* ch%[1]d = (const uint4*)(W + HOFF) + (size_t)wr%[1]d * NB;", c)
		case dtype.Q6_K:
			w.Linef("const uint4* cl%[1]d = (const uint4*)W + (size_t)wr%[1]d * UPR;", c)
			w.Linef("const uint2* cH%[1]d = (const uint2*)(W + HOFF) + (size_t)wr%[1]d * UPR;", c)
			w.Linef("const u32* cs%[1]d = (const u32*)(W + SOFF) + (size_t)wr%[1]d * (UPR / 2);", c)
			w.Linef("const size_t cd%[1]d = (size_t)wr%[1]d * NB;", c)
		}
	}
}

// weights writes the copies of the warp's weights of group u
// (super-block sb) into the stage at shared address sa, and with head the
// rows' heads of sb into the head slot ha.
func (pr pipeRing) weights(w *Writer, u, sb, sa, ha string, head bool) {
	r := pr
	for c := range r.cr {
		w.If(fmt.Sprintf("wc%d", c), func() {
			row := fmt.Sprintf("(lane + %d)", 32*c)
			switch r.t {
			case dtype.Q4_K:
				w.Linef("cp_cg16(%s + %s * RB, cq%d + (%s));", sa, row, c, u)
				if head {
					w.Linef("cp_cg16(%s + %s * HB, ch%d + (%s));", ha, row, c, sb)
				}
			case dtype.Q6_K:
				w.Linef("cp_cg16(%s + %s * 16, cl%d + (%s));", sa, row, c, u)
				w.Linef("cp_ca8(%s + WR * 16 + %s * 8, cH%d + (%s));", sa, row, c, u)
				w.Linef("cp_ca4(%s + WR * 24 + %s * 4, cs%d + ((%s) >> 1));", sa, row, c, u)
				if head {
					w.Linef("cp_ca4(%s + %s * HB, (const u32*)(W + DOFF) + ((cd%d + (%s)) >> 1));", ha, row, c, sb)
				}
			}
		})
	}
}

// slotWords writes row r's (the warp's row lr) words of a group from its
// slot st and its super-block's heads at hs, as pr.fr.decode reads them:
// Q6_K's scales shifted by csvShift (the group's half of their word) and
// its d by dsh<r>, which the caller has set.
func (pr pipeRing) slotWords(w *Writer, r, lr, csvShift string) {
	switch pr.t {
	case dtype.Q4_K:
		w.Linef("const u32 cw%s = *(const u32*)(st + %s * RB + 4 * t);", r, lr)
		w.Linef("const uint4 chv%s = *(const uint4*)(hs + %s * HB);", r, lr)
	case dtype.Q6_K:
		w.Linef("const u32 cwl%s = *(const u32*)(st + %s * 16 + 4 * t);", r, lr)
		w.Linef("const u32 cwh%s = *(const u32*)(st + WR * 16 + %s * 8 + 4 * (t >> 1));", r, lr)
		w.Linef("const u16 csv%s = (u16)(*(const u32*)(st + WR * 24 + %s * 4) >> %s);", r, lr, csvShift)
		w.Linef("const u16 cdv%s = (u16)(*(const u32*)(hs + %s * HB) >> dsh%s);", r, lr, r)
	}
}

// emitSlotTokens writes, inside a loop over nt, this lane's B fragment
// (b0, b1: token g of tile nt) and its C columns' factors (x0, x1: tokens
// 2t, 2t+1) of the group in slot st of an XQ 3 ring.
func emitSlotTokens(w *Writer) {
	w.Line("const u8* xt = st + XO + (8 * nt + g) * TB;")
	w.Line("const u32 b0 = *(const u32*)(xt + 4 * t), b1 = *(const u32*)(xt + 16 + 4 * t);")
	w.Line("const float4 x0 = *(const float4*)(st + XO + (8 * nt + 2 * t) * TB + 32);")
	w.Line("const float4 x1 = *(const float4*)(st + XO + (8 * nt + 2 * t + 1) * TB + 32);")
}

// loop writes the ring's schedule: the first stages' weights before the
// wait for the previous kernel and afterWait after it, then each
// super-block's groups, each stage's copies P-1 stages ahead (acts(u, sa):
// group u's activations into the slot at sa) and each group's rows' words
// read from its slot and decoded (mma8Frags), then mma(j), its products.
func (pr pipeRing) loop(w *Writer, afterWait func(), acts func(u, sa string), mma func(j int)) {
	w.Comment("the first P-1 stages: the weights before the wait for the previous kernel (they do not")
	w.Comment("depend on it), as one commit group, then each stage's activations as one")
	w.If("nsb > 0", func() {
		for j := range (pr.p - 1) * pr.gs {
			pr.weights(w, fmt.Sprintf("8 * ks + %d", j), "ks", fmt.Sprintf("wsa + %d * SB", j%pr.ring()), "wsa + RING * SB", j == 0)
		}
	})
	w.Line("CP_COMMIT();")
	w.Line("pdl_wait();")
	afterWait()
	rows := mma8Rows(pr.mt)
	local := map[string]string{} // each row's index among the warp's
	for i, r := range rows {
		local[r] = fmt.Sprintf("(%d + g)", 8*i)
	}
	w.If("nsb > 0", func() {
		for c := range pr.p - 1 {
			for x := range pr.gs {
				j := c*pr.gs + x
				acts(fmt.Sprintf("8 * ks + %d", j), fmt.Sprintf("wsa + %d * SB", j%pr.ring()))
			}
			w.Line("CP_COMMIT();")
		}
		w.Block("for (int i = 0; i < nsb; ++i)", func() {
			w.Line("const int sb = ks + KS * i;")
			w.Line("const u8* hs = ws + RING * SB + (i & 1) * WR * HB; // the heads of super-block sb")
			if pr.t == dtype.Q6_K {
				for _, r := range rows {
					w.Linef("const int dsh%s = (int)(((size_t)min(r0 + %s, N - 1) * NB + sb) & 1) * 16; // d's half of its word", r, local[r])
				}
			}
			// group writes the work of group j of the super-block from its ring slot
			group := func(j int) {
				scope(w, func() {
					w.Linef("const u8* st = ws + %d * SB; // group 8·sb + %d", j%pr.ring(), j)
					for _, r := range rows {
						pr.slotWords(w, r, local[r], fmt.Sprint(16*(j&1)))
						pr.fr.decode(w, r, fmt.Sprint(j))
					}
					mma(j)
				})
			}
			for c := range 8 / pr.gs {
				w.Block(fmt.Sprintf("/* groups 8·sb + %d.. %d */", c*pr.gs, c*pr.gs+pr.gs-1), func() {
					w.Line("CP_WAIT(P - 2); // this stage's copies have landed")
					w.Line("__syncwarp(); // … every lane's, and every lane is done with the slots refilled next")
					for x := range pr.gs {
						jn := c*pr.gs + (pr.p-1)*pr.gs + x // the group the stage P-1 ahead holds
						jj, di := jn%8, jn/8
						next := func() {
							sb := "sb"
							if di > 0 {
								sb = "sb + KS"
							}
							u := fmt.Sprintf("8 * (%s) + %d", sb, jj)
							sa := fmt.Sprintf("wsa + %d * SB", jj%pr.ring())
							ha := fmt.Sprintf("wsa + RING * SB + ((i + %d) & 1) * WR * HB", di)
							pr.weights(w, u, sb, sa, ha, jj == 0)
							acts(u, sa)
						}
						if di > 0 {
							w.If("i + 1 < nsb", next)
						} else {
							next()
						}
					}
					w.Line("CP_COMMIT();")
					for x := range pr.gs {
						j := c*pr.gs + x
						group(j)
					}
				})
			}
		})
	})
}
