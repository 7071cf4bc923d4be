package codegen

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// DecodeAttention returns the two kernels of flash-decoding for one query
// token per sequence. The partial kernel handles (kv head, split, seq), all
// GROUP query heads of the kv head at once, so each key and value row is
// read once per group:
//
//	attn_part(const float* q, const cache_t* kc, const cache_t* vc, const int* pages,
//	          const int* kv_base, const int* kv_len, float* part_o, float* part_ml, int splits)
//
// writing each query head's normalised split output part_o
// [seq][head][split][HD] and its (max, sum) pair part_ml; key j < kv_len[s]
// of sequence s is cache row PageRow(pages, kv_base[s], j). The combine kernel
// merges the splits by log-sum-exp into out [seq][HQ·HD]:
//
//	attn_combine(const float* part_o, const float* part_ml, const int* kv_len, float* out, int splits)
//
// splits is the launch-time split count, DecodeArm.Splits(Dims.KVLen).
//
// Within a block, lane groups of LPK lanes each take one key row per step
// (16-byte loads where the head fits, see decodeTiling), reduce the score
// with shuffles inside the group, and keep an online softmax (running max,
// sum and rescaled output slice) over their keys; the groups of a warp are
// merged with shuffles, the warps through shared memory.
func DecodeAttention(s AttnShape, arm DecodeArm) (partial, combine *Kernel, err error) {
	return decodeAttention(s, arm, false)
}

// DecodeAttentionXQ is DecodeAttention whose combine writes its rows
// quantised for the XQ 2 product that reads them (the attention output
// projection), so that product needs no XQuant launch:
//
//	attn_combine_…_xq(const float* part_o, const float* part_ml, const int* kv_len, u8* xo, int splits)
func DecodeAttentionXQ(s AttnShape, arm DecodeArm) (partial, combine *Kernel, err error) {
	if s.HeadDim%32 != 0 {
		return nil, nil, fmt.Errorf("%w: quantised decode attention output with head dim %d", ErrUnsupported, s.HeadDim)
	}
	return decodeAttention(s, arm, true)
}

// decodeAttention is DecodeAttention, with the combine of decodeCombine(xq).
func decodeAttention(s AttnShape, arm DecodeArm, xq bool) (partial, combine *Kernel, err error) {
	if arm.Fuse {
		return nil, nil, fmt.Errorf("%w: decode attention arm %v combines in its partial kernel (DecodeAttentionFused)", ErrUnsupported, arm)
	}
	if partial, err = decodePartial(s, arm, false); err != nil {
		return nil, nil, err
	}
	return partial, decodeCombine(s, arm, xq), nil
}

// DecodeAttentionFused is DecodeAttention in one launch, for an arm with
// Fuse: the partial kernel, whose block that finishes a (sequence, kv
// head) last (a ticket counter a head, which it sets back to zero) then
// runs the combine of that head's query heads, with the combine kernel's
// arithmetic (the same floats, and with xq the same bytes):
//
//	attn_part_…_f(q, kc, vc, pages, kv_base, kv_len, part_o, part_ml, int splits, int* tickets, float* out)
//	attn_part_…_f_xq(…, int* tickets, u8* xo)
//
// tickets holds an int a (sequence, kv head), zero before the launch.
func DecodeAttentionFused(s AttnShape, arm DecodeArm, xq bool) (*Kernel, error) {
	if !arm.Fuse {
		return nil, fmt.Errorf("%w: decode attention arm %v has a combine launch (DecodeAttention)", ErrUnsupported, arm)
	}
	if xq && s.HeadDim%32 != 0 {
		return nil, fmt.Errorf("%w: quantised decode attention output with head dim %d", ErrUnsupported, s.HeadDim)
	}
	return decodePartial(s, arm, xq)
}

// decodePartial is DecodeAttention's partial kernel; for an arm with Fuse
// the fused kernel of DecodeAttentionFused (xq: its quantised rows).
func decodePartial(s AttnShape, arm DecodeArm, xq bool) (*Kernel, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if err := arm.validKernel(); err != nil {
		return nil, err
	}
	ct := cacheCType(s.Cache)
	pname := fmt.Sprintf("attn_part_%s_%s", s.tag(), arm)
	pparams := []Param{{"const float* __restrict__", "q"}, {"const " + ct + "* __restrict__", "kc"}, {"const " + ct + "* __restrict__", "vc"},
		{"const int* __restrict__", "pages"}, {"const int* __restrict__", "kv_base"}, {"const int* __restrict__", "kv_len"},
		{"float* __restrict__", "part_o"}, {"float* __restrict__", "part_ml"}, {"int", "splits"}}
	deps := append(cacheHelpers(s.Cache), "warp", "pdl")
	what := "partials"
	if arm.Fuse {
		what = "partials and, in each head's last block, the combine"
		if xq {
			pname += "_xq"
			what += " into int8 rows"
			deps = append(deps, "types", "warp_up")
			pparams = append(pparams, Param{"int* __restrict__", "tickets"}, Param{"u8* __restrict__", "xo"})
		} else {
			pparams = append(pparams, Param{"int* __restrict__", "tickets"}, Param{"float* __restrict__", "out"})
		}
	}
	tl := arm.tile(s)
	group := s.Heads / s.HeadsKV
	psrc := source(fmt.Sprintf("split-KV decode attention, %s: %s, %v", what, s.tag(), arm), deps, func(w *Writer) {
		s.defines(w)
		w.Linef("#define CHUNK %d", arm.Chunk)
		w.Linef("#define THREADS %d", arm.Threads)
		w.Linef("#define NW %d", arm.Threads/32)
		w.Linef("#define VEC %d // cache elements per vector load", tl.vec)
		w.Linef("#define LPK %d // lanes per key row", tl.lpk)
		w.Linef("#define KPW %d // keys per warp step", tl.kpw())
		w.Linef("#define NV %d // vector loads per lane per row", tl.nv)
		w.Linef("#define EPL %d // head elements per lane", tl.epl())
		w.Linef("#define HT %d // query heads per pass", tl.ht)
		w.Linef("#define U %d // keys in flight per lane group", tl.u)
		if arm.Preload {
			w.Linef("#define NEWEST %d // rows at a sequence's end the step may have written (DecodeArm.Newest)", max(1, arm.Newest))
		}
		w.Line("#define MNEG (-3.0e38f) // running max before any key: exp(MNEG - x) is 0, exp(MNEG - MNEG) is 1")
		if arm.Fuse && xq {
			w.Linef("#define XRO %d // bytes of a quantised output row", XQRowBytes(s.Heads*s.HeadDim))
		}
		w.Blank()
		raw := emitVecLoad(w, s.Cache, tl.vec)
		q8 := s.Cache == CacheQ8
		w.Emit(Func{Name: pname, Global: true, LaunchBounds: arm.Threads, Params: pparams, Body: func(w *Writer) {
			w.Line("__shared__ float so[NW][HT][HD]; // each warp's output accumulator")
			w.Line("__shared__ float sm[NW][HT], sl[NW][HT], sw[NW][HT]; // each warp's max and sum; merge weights")
			w.Line("const int kvh = blockIdx.x, seq = blockIdx.z;")
			w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
			w.Line("const int grp = lane / LPK, gl = lane % LPK; // the lane's key slot in the warp step, its place in the row")
			if !arm.Preload {
				w.Line("pdl_wait();")
			}
			// end is the sequence's key count, len the keys the splits cover
			// (the window's), first the first of them
			end, first := "len", ""
			if s.Window > 0 {
				w.Line("const int kv_end = kv_len[seq]; // the sequence's keys")
				w.Line("const int lo = max(0, kv_end - WINDOW); // the first key in the window")
				w.Line("const int len = kv_end - lo; // the keys the splits cover")
				end, first = "kv_end", "lo + "
			} else {
				w.Line("const int len = kv_len[seq];")
			}
			// perSplit writes the work of one split: its keys, its partials
			perSplit := func() {
				if arm.Live == 0 {
					w.Linef("const int j0 = %ssplit * CHUNK;", first)
					w.Linef("const int n = min(CHUNK, %s - j0);", end)
				} else {
					if arm.Live != 4 { // Live 4's chunk is the sequence's, before the loop
						arm.liveChunk(w, "gridDim.z")
					}
					w.Linef("const int j0 = %ssplit * chunk;", first)
					w.Linef("const int n = min(chunk, %s - j0);", end)
				}
				w.Comment("query head kvh * GROUP + g writes partial po0 + g * splits")
				w.Line("const size_t po0 = (size_t)(seq * HQ + kvh * GROUP) * splits + split;")
				emptySplit := func() {
					if arm.Preload {
						w.Line("pdl_wait();")
					}
					if arm.Live == 0 {
						w.For("e", "threadIdx.x", "GROUP * HD", "THREADS", 0, func() { w.Line("part_o[(po0 + (size_t)(e / HD) * splits) * HD + e % HD] = 0.f;") })
					} else {
						w.Comment("past the live length: neutral partials (the combine never reads their outputs)")
					}
					w.For("g", "threadIdx.x", "GROUP", "THREADS", 0, func() {
						w.Linef("part_ml[2 * (po0 + (size_t)g * splits)] = %s;", cfloat(float32(math.Inf(-1))))
						w.Line("part_ml[2 * (po0 + (size_t)g * splits) + 1] = 0.f;")
					})
					if arm.Fuse {
						w.Line("break; // to the ticket: every block takes one")
					} else {
						w.Line("return;")
					}
				}
				if arm.Live != 4 { // Live 4's loop visits live splits only
					w.If("n <= 0", emptySplit)
				}
				w.Comment("the sequence's page table, and this lane's first element within a key row")
				w.Line("const int* __restrict__ pt = pages + kv_base[seq];")
				w.Line("const int e0 = kvh * HD + gl * VEC;")
				if q8 {
					w.Comment("from a lane's first element r of a row to the row's scales (16-byte aligned)")
					w.Line("const int to_scales = HKV * HD - kvh * HD - gl * VEC;")
				}
				// decl declares the raw key and value vectors kr and vr of U
				// slots (and, for the 8-bit cache, their scales kr_s and vr_s)
				decl := func(kr, vr string) {
					w.Linef("%s %s[U][NV], %s[U][NV];", raw, kr, vr)
					if q8 {
						w.Linef("float %s_s[U][NV], %s_s[U][NV];", kr, vr)
					}
				}
				// rowLoads writes the loads of slot u's key and value vectors at
				// cache element r into kr and vr (their scales into kr_s and
				// vr_s); ld formats the load of a pointer ("*%s", or
				// "__ldcg(%s)" past L1)
				rowLoads := func(kr, vr, ld string) {
					w.For("i", "0", "NV", "1", -1, func() {
						for _, c := range [][2]string{{kr, "kc"}, {vr, "vc"}} {
							w.Linef("%s[u][i] = %s;", c[0], fmt.Sprintf(ld, fmt.Sprintf("(const %s*)(%s + r + i * (LPK * VEC))", raw, c[1])))
							if q8 {
								w.Linef("%s_s[u][i] = %s;", c[0], fmt.Sprintf(ld, fmt.Sprintf("((const float*)(%s + r + to_scales) + ((kvh * HD + (i * LPK + gl) * VEC) >> 5))", c[1])))
							}
						}
					})
				}
				// load writes the loads of the key and value rows of step jb into kr and vr
				load := func(jb, kr, vr string) {
					w.For("u", "0", "U", "1", -1, func() {
						w.Comment("slots past the split's end reload its last key (in bounds) and are masked below")
						w.Linef("const size_t r = PROW(pt, j0 + min(%s + u * KPW + grp, n - 1)) * CROW + e0;", jb)
						rowLoads(kr, vr, "*%s")
					})
				}
				if arm.Preload {
					w.Comment("the warp's first step of keys and values before the wait: the rows before len - NEWEST are")
					w.Comment("earlier steps'; the newest, the previous kernel's (a verify step's entries share their")
					w.Comment("sequence's pages, each writing one row), are read again after the wait, as keys or as")
					w.Comment("the masked slots' repeat of the split's last key")
					w.Line("const int jf = warp * (KPW * U);")
					decl("kp", "vp")
					w.If("jf < n", func() { load("jf", "kp", "vp") })
					w.Line("pdl_wait();")
					w.If("jf < n", func() {
						w.For("u", "0", "U", "1", -1, func() {
							w.Line("const int j = min(jf + u * KPW + grp, n - 1);")
							w.If(fmt.Sprintf("j0 + j >= %s - NEWEST", end), func() {
								w.Comment("past L1, which may hold the line as it was before the wait")
								w.Line("const size_t r = PROW(pt, j0 + j) * CROW + e0;")
								rowLoads("kp", "vp", "__ldcg(%s)")
							})
						})
					})
				}
				pass := func() {
					w.Line("float qr[HT][EPL], acc[HT][EPL], m[HT], l[HT];")
					w.For("hh", "0", "HT", "1", -1, func() {
						w.Line("const float* qh = q + (size_t)seq * QSTRIDE + (kvh * GROUP + hp + hh) * HD;")
						w.For("i", "0", "NV", "1", -1, func() {
							w.For("t", "0", "VEC", "1", -1, func() {
								w.Line("qr[hh][i * VEC + t] = qh[(i * LPK + gl) * VEC + t] * SCALE;")
								w.Line("acc[hh][i * VEC + t] = 0.f;")
							})
						})
						w.Line("m[hh] = MNEG;")
						w.Line("l[hh] = 0.f;")
					})
					w.Comment("key slots of the warp: jb + u * KPW + grp; the bound is warp-uniform, so every lane reaches each shuffle")
					w.For("jb", "warp * (KPW * U)", "n", "NW * KPW * U", 0, func() {
						decl("kr", "vr")
						if arm.Preload {
							w.IfElse("jb == jf", func() {
								w.For("u", "0", "U", "1", -1, func() {
									w.For("i", "0", "NV", "1", -1, func() {
										w.Line("kr[u][i] = kp[u][i];")
										w.Line("vr[u][i] = vp[u][i];")
										if q8 {
											w.Line("kr_s[u][i] = kp_s[u][i];")
											w.Line("vr_s[u][i] = vp_s[u][i];")
										}
									})
								})
							}, func() { load("jb", "kr", "vr") })
						} else {
							load("jb", "kr", "vr")
						}
						w.Line("float sc[U][HT];")
						w.For("u", "0", "U", "1", -1, func() {
							w.Line("float kf[EPL];")
							w.For("i", "0", "NV", "1", -1, func() { w.Line("ld_vec(kr[u][i], kf + i * VEC);") })
							w.For("hh", "0", "HT", "1", -1, func() {
								w.Line("float a = 0.f;")
								if q8 {
									w.Comment("each vector's block scale once, on its partial dot")
									w.For("i", "0", "NV", "1", -1, func() {
										w.Line("float ai = 0.f;")
										w.For("t", "0", "VEC", "1", -1, func() { w.Line("ai += qr[hh][i * VEC + t] * kf[i * VEC + t];") })
										w.Line("a += ai * kr_s[u][i];")
									})
								} else {
									w.For("e", "0", "EPL", "1", -1, func() { w.Line("a += qr[hh][e] * kf[e];") })
								}
								w.Line("#pragma unroll")
								w.Block("for (int o = LPK / 2; o > 0; o >>= 1)", func() { w.Line("a += __shfl_xor_sync(0xffffffffu, a, o);") })
								s.capScore(w, "a")
								w.Linef("sc[u][hh] = jb + u * KPW + grp < n ? a : %s;", cfloat(float32(math.Inf(-1))))
							})
						})
						w.Comment("online softmax: rescale the running sum and output to the new max")
						w.For("hh", "0", "HT", "1", -1, func() {
							w.Line("float mx = m[hh];")
							w.For("u", "0", "U", "1", -1, func() { w.Line("mx = fmaxf(mx, sc[u][hh]);") })
							w.Line("const float corr = expf(m[hh] - mx);")
							w.Line("m[hh] = mx;")
							w.Line("l[hh] *= corr;")
							w.For("e", "0", "EPL", "1", -1, func() { w.Line("acc[hh][e] *= corr;") })
							w.For("u", "0", "U", "1", -1, func() {
								w.Line("sc[u][hh] = expf(sc[u][hh] - mx);")
								w.Line("l[hh] += sc[u][hh];")
							})
						})
						w.For("u", "0", "U", "1", -1, func() {
							w.Line("float vf[EPL];")
							w.For("i", "0", "NV", "1", -1, func() { w.Line("ld_vec(vr[u][i], vf + i * VEC);") })
							w.For("hh", "0", "HT", "1", -1, func() {
								if q8 {
									w.For("i", "0", "NV", "1", -1, func() {
										w.Line("const float p = sc[u][hh] * vr_s[u][i]; // the probability times the block's scale")
										w.For("t", "0", "VEC", "1", -1, func() { w.Line("acc[hh][i * VEC + t] += p * vf[i * VEC + t];") })
									})
									return
								}
								w.For("e", "0", "EPL", "1", -1, func() { w.Line("acc[hh][e] += sc[u][hh] * vf[e];") })
							})
						})
					})
					w.Comment("merge the warp's lane groups (all lanes take part); each group then holds the warp's state")
					w.Line("#pragma unroll")
					w.Block("for (int o = LPK; o < 32; o <<= 1)", func() {
						w.For("hh", "0", "HT", "1", -1, func() {
							w.Line("const float mo = __shfl_xor_sync(0xffffffffu, m[hh], o), lo = __shfl_xor_sync(0xffffffffu, l[hh], o);")
							w.Line("const float mx = fmaxf(m[hh], mo), a = expf(m[hh] - mx), b = expf(mo - mx);")
							w.Line("m[hh] = mx;")
							w.Line("l[hh] = l[hh] * a + lo * b;")
							w.For("e", "0", "EPL", "1", -1, func() {
								w.Line("acc[hh][e] = acc[hh][e] * a + __shfl_xor_sync(0xffffffffu, acc[hh][e], o) * b;")
							})
						})
					})
					w.If("lane < LPK", func() {
						w.For("hh", "0", "HT", "1", -1, func() {
							w.For("i", "0", "NV", "1", -1, func() {
								w.For("t", "0", "VEC", "1", -1, func() { w.Line("so[warp][hh][(i * LPK + gl) * VEC + t] = acc[hh][i * VEC + t];") })
							})
						})
					})
					w.If("lane == 0", func() {
						w.For("hh", "0", "HT", "1", -1, func() {
							w.Line("sm[warp][hh] = m[hh];")
							w.Line("sl[warp][hh] = l[hh];")
						})
					})
					w.Line("__syncthreads();")
					w.Comment("merge the warps: warp 0 holds key 0, so the max is finite and the sum positive")
					w.If("threadIdx.x < HT", func() {
						w.Line("const int hh = threadIdx.x;")
						w.Line("float mx = sm[0][hh], sum = 0.f;")
						w.For("v", "1", "NW", "1", -1, func() { w.Line("mx = fmaxf(mx, sm[v][hh]);") })
						w.For("v", "0", "NW", "1", -1, func() {
							w.Line("sw[v][hh] = expf(sm[v][hh] - mx);")
							w.Line("sum += sl[v][hh] * sw[v][hh];")
						})
						w.For("v", "0", "NW", "1", -1, func() { w.Line("sw[v][hh] /= sum;") })
						w.Line("const size_t po = po0 + (size_t)(hp + hh) * splits;")
						w.Line("part_ml[2 * po] = mx;")
						w.Line("part_ml[2 * po + 1] = sum;")
					})
					w.Line("__syncthreads();")
					w.For("e", "threadIdx.x", "HT * HD", "THREADS", 0, func() {
						w.Line("const int hh = e / HD, d = e % HD;")
						w.Line("float o = 0.f;")
						w.For("v", "0", "NW", "1", -1, func() { w.Line("o += so[v][hh][d] * sw[v][hh];") })
						w.Line("part_o[(po0 + (size_t)(hp + hh) * splits) * HD + d] = o;")
					})
				}
				if tl.ht == group {
					w.Line("const int hp = 0; // one pass: all GROUP heads")
					pass()
				} else {
					w.Comment("GROUP / HT passes over the split's keys (the repeat reads hit L2)")
					w.Line("#pragma unroll 1")
					w.Block("for (int hp = 0; hp < GROUP; hp += HT)", func() {
						pass()
						w.Line("__syncthreads(); // shared memory is reused by the next pass")
					})
				}
			}
			if arm.Live == 4 {
				arm.liveChunk(w, "gridDim.z")
				live := arm.liveSplits(w)
				w.Comment("the launched splits take the live ones in turn (a sequence's sums never depend on how many blocks ran)")
				w.Line("#pragma unroll 1")
				w.Block("for (int split = blockIdx.y; split < "+live+"; split += gridDim.y)", func() {
					perSplit()
					w.Line("__syncthreads(); // the next split reuses shared memory")
				})
			} else {
				w.Line("const int split = blockIdx.y;")
				if arm.Fuse {
					w.Block("do", perSplit)
					w.Line("while (0);")
				} else {
					perSplit()
				}
			}
			if arm.Fuse {
				emitFusedCombine(w, s, arm, xq)
			}
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "attn_decode", Name: pname, Source: psrc, Params: pparams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(s.HeadsKV, arm.LaunchSplits(arm.Splits(s.KeySpan(d.KVLen)), d.Seqs, s.HeadsKV), d.Seqs), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// decodeCombine is DecodeAttention's combine kernel; with xq it writes
// the output rows quantised for an XQ 2 product (XQRowBytes(HQ·HD) bytes
// each, XQuant's layout: each warp quantises the group of 32 it holds)
// into xo instead of float rows into out (DecodeAttentionXQ).
func decodeCombine(s AttnShape, arm DecodeArm, xq bool) *Kernel {
	cname := fmt.Sprintf("attn_combine_%s_%s", s.tag(), arm)
	outp := Param{"float* __restrict__", "out"}
	if xq {
		cname += "_xq"
		outp = Param{"u8* __restrict__", "xo"}
	}
	cparams := []Param{{"const float* __restrict__", "part_o"}, {"const float* __restrict__", "part_ml"}, {"const int* __restrict__", "kv_len"},
		outp, {"int", "splits"}}
	what := "split-KV decode attention, combine"
	if xq {
		what += " into int8 rows"
	}
	deps := []string{"types", "warp", "pdl"}
	if xq {
		deps = append(deps, "warp_up")
	}
	csrc := source(fmt.Sprintf("%s: %s, %v", what, s.tag(), arm), deps, func(w *Writer) {
		s.defines(w)
		if arm.Live != 0 {
			w.Linef("#define CHUNK %d", arm.Chunk)
		}
		if xq {
			w.Linef("#define XRO %d // bytes of a quantised output row", XQRowBytes(s.Heads*s.HeadDim))
		}
		w.Blank()
		w.Emit(Func{Name: cname, Global: true, LaunchBounds: s.HeadDim, Params: cparams, Body: func(w *Writer) {
			w.Line("__shared__ float red[32];")
			w.Line("const int h = blockIdx.x, seq = blockIdx.y, d = threadIdx.x;")
			w.Line("pdl_wait();")
			w.Line("const size_t p0 = (size_t)(seq * HQ + h) * splits;")
			if arm.Live != 0 {
				if s.Window > 0 {
					w.Line("const int len = min(kv_len[seq], WINDOW); // the keys the splits cover")
				} else {
					w.Line("const int len = kv_len[seq];")
				}
				arm.liveChunk(w, "gridDim.y")
			}
			live := arm.liveSplits(w)
			w.Comment("the max over the splits, read in parallel")
			w.Linef("float mx = %s;", cfloat(float32(math.Inf(-1))))
			w.For("i", "threadIdx.x", live, "HD", 0, func() { w.Line("mx = fmaxf(mx, part_ml[2 * (p0 + i)]);") })
			blockReduce(w, "mx", "m", "max", s.HeadDim)
			w.Comment("every split read holds a written output (zeros for an empty one), so the loads need no branch")
			emitSplitSums(w, live, "")
			emitCombineOut(w, xq)
			if xq {
				w.Line("__syncthreads(); // every warp's rows written before the block's launch trigger")
			}
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "attn_decode", Name: cname, Source: csrc, Params: cparams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(s.Heads, d.Seqs, 1), Block: dim3(s.HeadDim, 1, 1)}
	}}
}

// emitCombineOut writes the combine's output of element d of head h of
// sequence seq from num and den: the float into out, or with xq the int8
// value into xo (a warp holds a group of 32, quantised as XQuant does).
func emitCombineOut(w *Writer, xq bool) {
	if !xq {
		w.Line("out[(size_t)seq * HQ * HD + h * HD + d] = den > 0.f ? num / den : 0.f;")
		return
	}
	w.Line("const float z = den > 0.f ? num / den : 0.f;")
	w.Comment("a warp holds a group of 32 outputs: quantised as XQuant does")
	w.Line("const int col = h * HD + d;")
	w.Line("u8* xr = xo + (size_t)seq * XRO;")
	emitWarpQuant(w, "xr", "col", "HQ * HD", "(d & 31) == 0")
}

// emitFusedCombine writes the end of a fused partial kernel
// (DecodeAttentionFused): each block takes a ticket of its (sequence, kv
// head) once its partials are visible; the block that takes the last
// sets the counter back to zero and combines the head's GROUP query
// heads as decodeCombine does, element d of head h by a thread (a warp
// 32 consecutive elements of one head), the max over the splits by each
// thread alone (a max does not depend on its order), the partials read
// past L1 (other blocks wrote them).
func emitFusedCombine(w *Writer, s AttnShape, arm DecodeArm, xq bool) {
	w.Comment("the combine, in the block of the (sequence, kv head) that finishes last")
	emitLastBlock(w, "tickets + seq * HKV + kvh", "(int)gridDim.y", "this block's partials", func() {
		w.Comment("a block that held no live split has not waited for the previous kernel yet (the output")
		w.Comment("rows may share memory with what that kernel reads); waiting again returns at once")
		w.Line("pdl_wait();")
		w.Line("#pragma unroll 1")
		w.Block("for (int e0 = 0; e0 < GROUP * HD; e0 += THREADS)", func() {
			w.Comment("warp-uniform: HD and THREADS are multiples of 32")
			w.If("e0 + threadIdx.x < GROUP * HD", func() {
				w.Line("const int h = kvh * GROUP + (e0 + threadIdx.x) / HD, d = (e0 + threadIdx.x) % HD;")
				w.Line("const size_t p0 = (size_t)(seq * HQ + h) * splits;")
				live := "splits"
				if arm.Live != 0 {
					w.Comment("len is the keys the splits cover, as the combine's")
					arm.liveChunk(w, "gridDim.z")
					live = arm.liveSplits(w)
				}
				w.Linef("float m = %s;", cfloat(float32(math.Inf(-1))))
				w.For("i", "0", live, "1", 0, func() { w.Line("m = fmaxf(m, __ldcg(&part_ml[2 * (p0 + i)]));") })
				emitSplitSums(w, live, "__ldcg")
				emitCombineOut(w, xq)
			})
		})
		w.Line("__syncthreads(); // every warp's rows written before the block's launch trigger (fin is the block's)")
	})
}

// emitSplitSums writes num and den of the combine over splits i < live of
// head p0's partials: den the sum of the weights l·exp(max − m), num of
// the weighted outputs of element d; ld ("" or "__ldcg") reads them.
func emitSplitSums(w *Writer, live, ld string) {
	rd := func(arr, idx string) string {
		if ld == "" {
			return arr + "[" + idx + "]"
		}
		return ld + "(&" + arr + "[" + idx + "])"
	}
	w.Line("float num = 0.f, den = 0.f;")
	w.For("i", "0", live, "1", 4, func() {
		w.Linef("const float l = %s;", rd("part_ml", "2 * (p0 + i) + 1"))
		w.Linef("const float wgt = l > 0.f ? l * expf(%s - m) : 0.f;", rd("part_ml", "2 * (p0 + i)"))
		w.Linef("num = __fmaf_rn(wgt, %s, num); // one rounding in every combine (the float and the quantising one)", rd("part_o", "(p0 + i) * HD + d"))
		w.Line("den += wgt;")
	})
}

// emitVecLoad writes ld_vec(r, v): the vec cache elements of one raw vector
// load r as floats into v, and returns the raw load's C type.
func emitVecLoad(w *Writer, t dtype.Type, vec int) string {
	if t == CacheQ8 {
		return emitQ8Vec(w, vec)
	}
	eb := 2
	if t == dtype.F32 {
		eb = 4
	}
	raw, words := map[int]string{16: "uint4", 8: "uint2", 4: "u32"}[vec*eb], map[int][]string{16: {"r.x", "r.y", "r.z", "r.w"}, 8: {"r.x", "r.y"}, 4: {"r"}}[vec*eb]
	w.Comment("The %d cache elements of one %d-byte load as floats.", vec, vec*eb)
	w.Emit(Func{Name: "ld_vec", Params: []Param{{raw, "r"}, {"float*", "v"}}, Body: func(w *Writer) {
		for i, x := range words {
			switch t {
			case dtype.F32:
				w.Linef("v[%d] = __uint_as_float(%s);", i, x)
			default:
				w.Linef("v[%d] = %s;", 2*i, cacheLoad(t, "(u16)("+x+" & 0xffffu)"))
				w.Linef("v[%d] = %s;", 2*i+1, cacheLoad(t, "(u16)("+x+" >> 16)"))
			}
		}
	}})
	return raw
}

// decodeTiling is how the partial kernel spreads a key row over a warp: a
// group of lpk lanes reads one row of HD elements with nv vector loads of
// vec elements each (lane gl of the group owns the elements
// (i·lpk + gl)·vec .. +vec of every row, i < nv), so a warp reads 32/lpk keys
// per step and each lane holds nv·vec elements of q and of the output
// accumulator per query head. ht query heads (a divisor of GROUP) are handled
// per pass over the split's keys; u keys per lane group are loaded at once.
type decodeTiling struct {
	vec, lpk, nv, ht, u int
}

func (t decodeTiling) kpw() int { return 32 / t.lpk }   // keys per warp step
func (t decodeTiling) epl() int { return t.nv * t.vec } // head elements per lane

// decodeTile picks the tiling for shape s and a block of threads threads:
// the most query heads per pass (each lane holding at most 32 q elements
// and the per-warp partial outputs at most 32 KB of shared memory), then the
// widest loads.
func decodeTile(s AttnShape, threads int) decodeTiling {
	eb := 2
	switch s.Cache {
	case dtype.F32:
		eb = 4
	case CacheQ8:
		eb = 1
	}
	group, nw := s.Heads/s.HeadsKV, threads/32
	var best decodeTiling
	for lb := 16; lb >= 4 && lb >= eb; lb /= 2 {
		t := decodeTiling{vec: lb / eb, lpk: 1}
		nvec := s.HeadDim / t.vec
		for t.lpk < 32 && nvec%(2*t.lpk) == 0 {
			t.lpk *= 2
		}
		t.nv = nvec / t.lpk
		t.ht = 1
		for h := group; h > 1; h-- {
			if group%h == 0 && h*t.epl() <= 32 && nw*h*s.HeadDim*4 <= 32<<10 {
				t.ht = h
				break
			}
		}
		if best.vec == 0 || t.ht > best.ht || (t.ht == best.ht && best.epl() > 32 && t.epl() < best.epl()) {
			best = t
		}
	}
	// about 64 bytes of K (and as much of V) per lane in flight, at most 32 scores held
	best.u = max(1, min(8, 64/(best.nv*best.vec*eb), 32/best.ht))
	if s.Cache == CacheQ8 {
		// Two keys in flight: the 8-bit rows cost instructions (a byte
		// permute and a subtraction an element, two scale loads a key),
		// not bytes. On an H100, llama2-7b q4_k_m at 16 sequences
		// (tg128@512) decoded 2690.81 tok/s with 2 against 2380.12 with
		// the 8 of the rule above and 2380.71 with 4 (docs/PERFORMANCE.md).
		best.u = 2
	}
	return best
}
