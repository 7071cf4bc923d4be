package codegen

// The sampling kernel's device code (see Sample): helpers, the searches
// and the body. Each function states which step of runtime.Sampler's
// order it computes.

// sampleHelpers writes the state, the keys and weights, the block
// reductions, the penalties and Philox.
func sampleHelpers(w *Writer) {
	lines(w, `
// One sequence's sampling state: its rows and the thresholds found so far.
struct sample_state {
    const float* x;   // the raw logits
    const float* src; // the working logits: x, or w after the mask, bias and penalties
    float* w;         // the working row, then the survivors' weights
    float inv_t;      // 1 / temperature
    float ymax;       // the largest temperature-scaled candidate logit
    u32 tk;           // top-k survivors: key above tk, or equal with id <= ck
    int ck;
    u32 tp;           // top-p survivors: weight bits above tp, or equal with id <= cp
    int cp;
    float min_p;      // min-p survivors: weight at least min_p
    u32 t;            // the ties find_rank counts (RANK_TIE): key t under mode
    int mode;
};

// An order-preserving map of floats to unsigned keys: -Inf lowest, +Inf highest.
static __device__ __forceinline__ u32 ord_key(float f) {
    const u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The fixed-point weight of e = exp(y - ymax) in [0, 1]: floor(e * 2^40), 0 for NaN.
static __device__ __forceinline__ u64 weight_fx(float e) {
    return e > 0.f ? (u64)(fminf(e, 1.f) * FX_ONE) : 0ull;
}

// ceil(f * total), exactly, for 0 < f < 1: f is m / 2^sh with an integer m < 2^24.
static __device__ __forceinline__ u64 ceil_frac(float f, u64 total) {
    const u32 u = __float_as_uint(f), e = (u >> 23) & 0xffu;
    const u64 m = e ? ((u & 0x7fffffu) | 0x800000u) : (u & 0x7fffffu);
    const int sh = e ? 150 - (int)e : 149;
    const u64 lo = m * total, hi = __umul64hi(m, total);
    if (sh >= 128) return (lo | hi) != 0ull ? 1ull : 0ull;
    u64 q, rest;
    if (sh >= 64) {
        q = hi >> (sh - 64);
        rest = lo | (hi & ((1ull << (sh - 64)) - 1ull));
    } else {
        q = (lo >> sh) | (hi << (64 - sh));
        rest = lo & ((1ull << sh) - 1ull);
    }
    return q + (rest != 0ull ? 1ull : 0ull);
}

static __device__ __forceinline__ u64 warp_sum_u64(u64 v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

// The inclusive running sum of v over the warp's lanes.
static __device__ __forceinline__ u64 warp_scan_u64(u64 v) {
    const int lane = threadIdx.x & 31;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u64 n = __shfl_up_sync(FULL, v, o);
        if (lane >= o) v += n;
    }
    return v;
}

// Block reductions: every thread gets the result. Each begins with a
// barrier, so the next may reuse the shared array at once.
static __device__ __forceinline__ u64 block_sum_u64(u64 v, u64* red) {
    v = warp_sum_u64(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 s = 0;
    for (int k = 0; k < NW; ++k) s += red[k];
    return s;
}

// The PIV sums c[j] over the block.
static __device__ __forceinline__ void block_sum_piv(u64* c, u64* red) {
    #pragma unroll
    for (int j = 0; j < PIV; ++j) c[j] = warp_sum_u64(c[j]);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        #pragma unroll
        for (int j = 0; j < PIV; ++j) red[(threadIdx.x >> 5) * PIV + j] = c[j];
    }
    __syncthreads();
    #pragma unroll
    for (int j = 0; j < PIV; ++j) {
        u64 s = 0;
        for (int k = 0; k < NW; ++k) s += red[k * PIV + j];
        c[j] = s;
    }
}

static __device__ __forceinline__ float block_max_f(float v, float* red) {
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = red[0];
    for (int k = 1; k < NW; ++k) m = fmaxf(m, red[k]);
    return m;
}

// A float sum in a fixed order: each thread's, the lanes' butterfly, then the warps in order.
static __device__ __forceinline__ float block_sum_f(float v, float* red) {
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = red[0];
    for (int k = 1; k < NW; ++k) s = __fadd_rn(s, red[k]);
    return s;
}

// Whether (ov, oi) ranks before (v, i): a larger value, or an equal one with a lower id; id -1 is no element.
static __device__ __forceinline__ bool ranks_before(float ov, int oi, float v, int i) {
    return oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i));
}

// The id of the largest value over the block (lowest id on ties; -1 when no thread has one).
static __device__ __forceinline__ int block_argmax(float v, int i, float* redf, int* redi) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(FULL, v, o);
        const int oi = __shfl_xor_sync(FULL, i, o);
        if (ranks_before(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        redf[threadIdx.x >> 5] = v;
        redi[threadIdx.x >> 5] = i;
    }
    __syncthreads();
    v = redf[0];
    i = redi[0];
    for (int k = 1; k < NW; ++k) {
        if (ranks_before(redf[k], redi[k], v, i)) {
            v = redf[k];
            i = redi[k];
        }
    }
    return i;
}

// Whether the mask words m (words of them) allow token i.
static __device__ __forceinline__ bool allowed(const u32* m, int words, int i) {
    return (i >> 5) < words && ((m[i >> 5] >> (i & 31)) & 1u);
}

// The repetition, presence and frequency penalties of a logit v whose
// token was generated n times (runtime.Sampler.penalize), unfused.
static __device__ __forceinline__ float penalize(float v, u32 n, float rep, float pres, float freq) {
    if (rep > 0.f && rep != 1.f) v = v > 0.f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
    if (n > 0u) v = __fsub_rn(v, __fadd_rn(pres, __fmul_rn(freq, (float)n)));
    return v;
}

// Philox4x32-10 (Salmon et al., SC11): the counter c becomes four random
// words under the key (k0, k1).
static __device__ __forceinline__ void philox(u32* c, u32 k0, u32 k1) {
    #pragma unroll
    for (int r = 0; r < 10; ++r) {
        const u32 hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        const u32 hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        const u32 n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

// The row a pass of mode reads.
static __device__ __forceinline__ const float* sample_row(const sample_state& s, int mode) {
    return mode == KEY_Y ? s.src : mode == KEY_RAW ? s.x : s.w;
}

// The key of an element of value v under mode, and its quantity q: keys
// order elements as the sampler ranks them; an element of quantity 0 is
// not one (KEY_Y: -Inf or NaN; KEY_W: no weight).
static __device__ __forceinline__ u32 sample_key(const sample_state& s, int mode, float v, u64& q) {
    if (mode == KEY_Y) {
        const bool cand = v > NEG_INF;
        q = cand ? 1ull : 0ull;
        return cand ? ord_key(__fmul_rn(v, s.inv_t)) : 0u;
    }
    if (mode == KEY_RAW) {
        q = 1ull;
        return ord_key(v);
    }
    q = weight_fx(v);
    return __float_as_uint(v);
}

// The weight with which element i (weight e) is drawn: its own if it
// survives top-p and min-p, else 0.
static __device__ __forceinline__ u64 drawn(const sample_state& s, float e, int i) {
    const u32 k = __float_as_uint(e);
    const bool keep = (k > s.tp || (k == s.tp && i <= s.cp)) && e >= s.min_p;
    return keep ? weight_fx(e) : 0ull;
}

// What find_rank counts of element i: a tie of the last search, or the drawn weight.
static __device__ __forceinline__ u64 rank_qty(const sample_state& s, int what, int i) {
    if (what == RANK_DRAW) return drawn(s, s.w[i], i);
    u64 q;
    const u32 k = sample_key(s, s.mode, sample_row(s, s.mode)[i], q);
    return k == s.t && q > 0ull ? 1ull : 0ull;
}

// The id of the element where the running quantity (what) in id order
// first exceeds target, which is below the block's total; warp_total is
// the quantity of the calling warp's chunk. Three levels: the chunk, a
// split of the chunk over the block's warps, a round of 32 ids.
static __device__ int find_rank(const sample_state& s, int what, u64 target, u64 warp_total, u64* red, int* found) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) red[warp] = warp_total;
    if (threadIdx.x == 0) *found = -1;
    __syncthreads();
    int c = 0;
    while (c < NW - 1 && red[c] <= target) {
        target -= red[c];
        ++c;
    }
    u64 q = 0;
    for (int k = 0; k < SPLIT; ++k) {
        const int r = warp * SPLIT + k, i = c * CHUNK + r * 32 + lane;
        if (r < ROUNDS && i < VOCAB) q += rank_qty(s, what, i);
    }
    q = warp_sum_u64(q);
    __syncthreads();
    if (lane == 0) red[warp] = q;
    __syncthreads();
    int v = 0;
    while (v < NW - 1 && red[v] <= target) {
        target -= red[v];
        ++v;
    }
    if (warp == v) {
        u64 run = 0;
        for (int k = 0; k < SPLIT; ++k) {
            const int r = v * SPLIT + k, i = c * CHUNK + r * 32 + lane;
            const u64 a = r < ROUNDS && i < VOCAB ? rank_qty(s, what, i) : 0ull;
            const u64 incl = warp_scan_u64(a);
            const u64 tot = __shfl_sync(FULL, incl, 31);
            if (run + tot > target) {
                const u32 hit = __ballot_sync(FULL, run + incl > target);
                if (lane == 0) *found = c * CHUNK + r * 32 + __ffs(hit) - 1;
                break;
            }
            run += tot;
        }
    }
    __syncthreads();
    return *found;
}
`)
	w.Blank()
}

// sampleSearch writes search and tie_cut: the threshold of a selection
// and the lowest-id ties it keeps.
func sampleSearch(w *Writer) {
	w.Comment("The largest key t (mode) such that the elements with keys of at least t")
	w.Comment("hold quantity need or more; keys above hi hold less. PIV keys a pass.")
	emitSearch(w, "search", []Param{{"const sample_state&", "s"}, {"int", "mode"}, {"u64", "need"}, {"u32", "hi"}, {"u64*", "red"}}, func() {
		w.Line("const int lane = threadIdx.x & 31, base = (threadIdx.x >> 5) * CHUNK;")
		w.Line("const float* row = sample_row(s, mode);")
	}, func(body func()) { sampleLoop(w, "row", body) })
	w.Comment("search over the cnt values of vals (shared memory), in any order")
	emitSearch(w, "search_in", []Param{{"const sample_state&", "s"}, {"int", "mode"}, {"const float*", "vals"}, {"int", "cnt"}, {"u64", "need"}, {"u32", "hi"}, {"u64*", "red"}}, func() {}, func(body func()) {
		w.For("i", "threadIdx.x", "cnt", "NT", 0, func() {
			w.Line("const float v = vals[i];")
			body()
		})
	})
	w.Comment("search (mode, need, hi) over the elements that can hold its threshold: keys of at least")
	w.Comment("kl (KEY_W: weights of at least lq). Where they hold need, the threshold is among them,")
	w.Comment("so they go to shared memory and the passes read them there, unless more than COMPACT")
	w.Comment("are (or they hold less than need: the row then)")
	w.Emit(Func{Name: "compact_search", Return: "u32", Params: []Param{{"const sample_state&", "s"}, {"int", "mode"}, {"u64", "need"}, {"u32", "hi"},
		{"u32", "kl"}, {"u64", "lq"}, {"float*", "cvals"}, {"int*", "ccount"}, {"u64*", "red"}}, Body: func(w *Writer) {
		w.Line("const int lane = threadIdx.x & 31, base = (threadIdx.x >> 5) * CHUNK;")
		w.Line("const float* row = sample_row(s, mode);")
		w.Line("__syncthreads();")
		w.If("threadIdx.x == 0", func() { w.Line("*ccount = 0;") })
		w.Line("__syncthreads();")
		w.Line("u64 held = 0;")
		sampleLoop(w, "row", func() {
			w.Line("u64 q;")
			w.Line("const u32 k = sample_key(s, mode, v, q);")
			w.If("q > 0ull && (mode == KEY_W ? q >= lq : k >= kl)", func() {
				w.Line("held += q;")
				w.Line("const int slot = atomicAdd(ccount, 1);")
				w.If("slot < COMPACT", func() { w.Line("cvals[slot] = v;") })
			})
		})
		w.Line("held = block_sum_u64(held, red); // its barriers also order the slots' writes")
		w.Line("const int cnt = *ccount;")
		w.If("cnt > COMPACT || held < need", func() { w.Line("return search(s, mode, need, hi, red);") })
		w.Line("return search_in(s, mode, cvals, cnt, need, hi, red);")
	}})
	w.Comment("The id through which the elements whose key (mode) is t are kept: those")
	w.Comment("above t and the lowest-id ties reach quantity need (VOCAB: every tie).")
	w.Emit(Func{Name: "tie_cut", Return: "int", Params: []Param{{"sample_state&", "s"}, {"int", "mode"}, {"u32", "t"}, {"u64", "need"}, {"u64*", "red"}, {"int*", "found"}}, Body: func(w *Writer) {
		w.Line("const int lane = threadIdx.x & 31, base = (threadIdx.x >> 5) * CHUNK;")
		w.Line("const float* row = sample_row(s, mode);")
		w.Line("u64 above = 0, ties = 0;")
		sampleLoop(w, "row", func() {
			w.Line("u64 q;")
			w.Line("const u32 k = sample_key(s, mode, v, q);")
			w.Line("above += k > t ? q : 0ull;")
			w.Line("ties += k == t && q > 0ull ? 1ull : 0ull;")
		})
		w.Line("const u64 wties = warp_sum_u64(ties);")
		w.Line("above = block_sum_u64(above, red);")
		w.Line("const u64 all = block_sum_u64(ties, red);")
		w.Comment("every tie has the same quantity")
		w.Line("const u64 unit = mode == KEY_W ? weight_fx(__uint_as_float(t)) : 1ull;")
		w.If("unit == 0ull || above >= need", func() { w.Line("return VOCAB;") })
		w.Line("const u64 keep = (need - above + unit - 1ull) / unit;")
		w.If("keep >= all", func() { w.Line("return VOCAB;") })
		w.Line("s.t = t;")
		w.Line("s.mode = mode;")
		w.Line("return find_rank(s, RANK_TIE, keep - 1ull, wties, red, found);")
	}})
	sampleSteps(w)
}

// emitSearch writes a search function (see sampleSearch): pro its first
// lines, loop the pass over its elements (v in scope in body).
func emitSearch(w *Writer, name string, params []Param, pro func(), loop func(body func())) {
	w.Emit(Func{Name: name, Return: "u32", Params: params, Body: func(w *Writer) {
		pro()
		w.Line("u32 lo = 0;")
		w.Block("while (lo < hi)", func() {
			w.Line("const u64 size = (u64)(hi - lo) + 1ull;")
			w.Line("u32 p[PIV];")
			w.Line("u64 c[PIV];")
			w.For("j", "0", "PIV", "1", -1, func() {
				w.Line("p[j] = lo + (u32)(size * (u64)(j + 1) / (PIV + 1));")
				w.Line("c[j] = 0;")
			})
			loop(func() {
				w.Line("u64 q;")
				w.Line("const u32 k = sample_key(s, mode, v, q);")
				w.For("j", "0", "PIV", "1", -1, func() { w.Line("c[j] += k >= p[j] ? q : 0ull;") })
			})
			w.Line("block_sum_piv(c, red);")
			w.Comment("the last pivot that still holds need is the new low end, the first that does not bounds the high end")
			w.Line("u32 nlo = lo, nhi = hi;")
			w.For("j", "0", "PIV", "1", -1, func() {
				w.IfElse("c[j] >= need", func() { w.Line("nlo = p[j] > nlo ? p[j] : nlo;") }, func() { w.Line("nhi = p[j] - 1u < nhi ? p[j] - 1u : nhi;") })
			})
			w.Line("lo = nlo;")
			w.Line("hi = nhi;")
		})
		w.Line("return lo;")
	}})
}

// sampleSteps writes the greedy choice, the draw and the logprobs.
func sampleSteps(w *Writer) {
	w.Comment("Step 5: the argmax of the working logits, lowest id on ties; -1 when")
	w.Comment("every one is -Inf or NaN.")
	w.Emit(Func{Name: "sample_greedy", Return: "int", Params: []Param{{"const sample_state&", "s"}, {"float*", "redf"}, {"int*", "redi"}}, Body: func(w *Writer) {
		w.Line("const int lane = threadIdx.x & 31, base = (threadIdx.x >> 5) * CHUNK;")
		w.Line("float best = NEG_INF;")
		w.Line("int bi = -1;")
		sampleLoop(w, "s.src", func() {
			w.If("v > best", func() { w.Line("best = v;"); w.Line("bi = i;") })
		})
		w.Line("return block_argmax(best, bi, redf, redi);")
	}})
	w.Comment("Steps 6-10: temperature, top-k, top-p, min-p and the draw; -1 when no")
	w.Comment("candidate is left.")
	w.Comment("known: the working logits are the raw ones and 1/temperature is finite and")
	w.Comment("positive, so step 1's candidates (n1) and largest logit (rmax) give the")
	w.Comment("candidates and their largest scaled logit (rounding is monotonic) without")
	w.Comment("a pass of their own.")
	w.Emit(Func{Name: "sample_draw", Return: "int", Params: []Param{{"sample_state&", "s"}, {"const u32*", "r"}, {"u64*", "red"},
		{"float*", "redf"}, {"int*", "redi"}, {"int*", "found"}, {"bool", "known"}, {"u64", "n1"}, {"float", "rmax"},
		{"float*", "cvals"}, {"int*", "ccount"}}, Body: func(w *Writer) {
		w.Line("const int lane = threadIdx.x & 31, base = (threadIdx.x >> 5) * CHUNK;")
		w.Comment("the candidates (neither -Inf nor NaN) and their largest scaled logit")
		w.Line("u64 n = n1;")
		w.Line("s.ymax = n1 > 0ull ? __fmul_rn(rmax, s.inv_t) : NEG_INF;")
		w.If("!known", func() {
			w.Line("n = 0;")
			w.Line("float ymax = NEG_INF;")
			sampleLoop(w, "s.src", func() {
				w.If("v > NEG_INF", func() {
					w.Line("++n;")
					w.Line("ymax = fmaxf(ymax, __fmul_rn(v, s.inv_t));")
				})
			})
			w.Line("n = block_sum_u64(n, red);")
			w.Line("s.ymax = block_max_f(ymax, redf);")
		})
		w.If("n == 0ull", func() { w.Line("return -1;") })
		w.Comment("top-k: the TopK largest keys, ties by id")
		w.Line("const int k = (int)r[R_TOP_K];")
		w.If("k > 0 && (u64)k < n", func() {
			w.Line("s.tk = compact_search(s, KEY_Y, (u64)k, ord_key(s.ymax), ord_key(__fsub_rn(s.ymax, COMPACT_SPAN)), 0ull, cvals, ccount, red);")
			w.Line("s.ck = tie_cut(s, KEY_Y, s.tk, (u64)k, red, found);")
		})
		w.Comment("the top-k survivors' weights e = exp(y - ymax) into w (0 elsewhere), and their sum")
		w.Line("u64 total = 0;")
		sampleLoop(w, "s.src", func() {
			w.Line("float e = 0.f;")
			w.If("v > NEG_INF", func() {
				w.Line("const float y = __fmul_rn(v, s.inv_t);")
				w.Line("const u32 key = ord_key(y);")
				w.If("key > s.tk || (key == s.tk && i <= s.ck)", func() { w.Line("e = expf(__fsub_rn(y, s.ymax));") })
			})
			w.Line("s.w[i] = e;")
			w.Line("total += weight_fx(e);")
		})
		w.Line("const u64 own = total;")
		w.Line("total = block_sum_u64(total, red);")
		w.Comment("top-p: the weight level where the weight from the top reaches TopP of the total")
		w.Line("const float top_p = __uint_as_float(r[R_TOP_P]);")
		w.If("top_p > 0.f && top_p < 1.f && total > 0ull", func() {
			w.Line("const u64 need = ceil_frac(top_p, total);")
			w.Comment("weights below (total - need) / VOCAB hold less than total - need together")
			w.Line("s.tp = compact_search(s, KEY_W, need, __float_as_uint(1.f), 0u, (total - need) / (u64)VOCAB, cvals, ccount, red);")
			w.Line("s.cp = tie_cut(s, KEY_W, s.tp, need, red, found);")
		})
		w.Comment("min-p, then a point of [0, the survivors' weight) from the sequence's stream;")
		w.Comment("when neither top-p nor min-p cut, every weight is drawn: the mass is the total")
		w.Line("u64 mass = own;")
		w.Line("const bool cut = s.tp != 0u || s.cp < VOCAB - 1 || !(s.min_p <= 0.f);")
		w.If("cut", func() {
			w.Line("mass = 0;")
			sampleLoop(w, "s.w", func() { w.Line("mass += drawn(s, v, i);") })
		})
		w.Line("const u64 wmass = warp_sum_u64(mass);")
		w.Line("mass = cut ? block_sum_u64(mass, red) : total;")
		w.If("mass == 0ull", func() {
			w.Comment("no weight survived (an infinite logit): the lowest-id largest candidate")
			w.Line("float best = NEG_INF;")
			w.Line("int bi = -1;")
			sampleLoop(w, "s.src", func() {
				w.If("v > NEG_INF && (bi < 0 || __fmul_rn(v, s.inv_t) > best)", func() { w.Line("best = __fmul_rn(v, s.inv_t);"); w.Line("bi = i;") })
			})
			w.Line("return block_argmax(best, bi, redf, redi);")
		})
		w.Line("u32 c[4] = {r[R_INDEX_LO], r[R_INDEX_HI], (u32)STREAM, 0u};")
		w.Line("philox(c, r[R_SEED_LO], r[R_SEED_HI]);")
		w.Line("const u64 x = ((u64)c[1] << 32) | (u64)c[0];")
		w.Line("return find_rank(s, RANK_DRAW, __umul64hi(mass, x), wmass, red, found);")
	}})
	w.Comment("The logprob of tok and the top logprobs (TopN, ties by id) under the")
	w.Comment("log-softmax of the raw logits.")
	w.Emit(Func{Name: "sample_logprobs", Params: []Param{{"sample_state&", "s"}, {"const u32*", "r"}, {"int", "tok"}, {"float", "rmax"}, {"int*", "o"},
		{"u64*", "red"}, {"float*", "redf"}, {"int*", "found"}, {"float*", "topv"}, {"int*", "topi"}, {"int*", "ntop"},
		{"float*", "cvals"}, {"int*", "ccount"}}, Body: func(w *Writer) {
		w.Line("const int lane = threadIdx.x & 31, base = (threadIdx.x >> 5) * CHUNK;")
		w.Line("float sum = 0.f;")
		sampleLoop(w, "s.x", func() { w.Line("sum = __fadd_rn(sum, expf(__fsub_rn(v, rmax)));") })
		w.Line("sum = block_sum_f(sum, redf);")
		w.Line("const float logz = __fadd_rn(rmax, logf(sum));")
		w.If("threadIdx.x == 0 && tok >= 0", func() { w.Line("o[O_LOGPROB] = __float_as_int(__fsub_rn(s.x[tok], logz));") })
		w.Line("const int n = (int)r[R_TOP_N] < MAX_TOP ? (int)r[R_TOP_N] : MAX_TOP;")
		w.If("n <= 0", func() { w.Line("return;") })
		w.Line("const int k = n < VOCAB ? n : VOCAB;")
		w.Line("u32 t = 0;")
		w.Line("int cut = VOCAB;")
		w.If("k < VOCAB", func() {
			w.Line("t = compact_search(s, KEY_RAW, (u64)k, ord_key(rmax), ord_key(__fsub_rn(rmax, COMPACT_SPAN)), 0ull, cvals, ccount, red);")
			w.Line("cut = tie_cut(s, KEY_RAW, t, (u64)k, red, found);")
		})
		w.If("threadIdx.x == 0", func() { w.Line("*ntop = 0;") })
		w.Line("__syncthreads();")
		sampleLoop(w, "s.x", func() {
			w.Line("const u32 key = ord_key(v);")
			w.If("key > t || (key == t && i <= cut)", func() {
				w.Line("const int slot = atomicAdd(ntop, 1);")
				w.If("slot < MAX_TOP", func() { w.Line("topv[slot] = v;"); w.Line("topi[slot] = i;") })
			})
		})
		w.Line("__syncthreads();")
		w.If("threadIdx.x == 0", func() {
			w.Line("const int m = *ntop < k ? *ntop : k;")
			w.Comment("most likely first, ties by id")
			w.For("a", "1", "m", "1", 0, func() {
				w.Line("const float v = topv[a];")
				w.Line("const int id = topi[a];")
				w.Line("int b = a;")
				w.Block("while (b > 0 && ranks_before(v, id, topv[b - 1], topi[b - 1]))", func() {
					w.Line("topv[b] = topv[b - 1];")
					w.Line("topi[b] = topi[b - 1];")
					w.Line("--b;")
				})
				w.Line("topv[b] = v;")
				w.Line("topi[b] = id;")
			})
			w.Line("o[O_TOP_N] = m;")
			w.For("a", "0", "m", "1", 0, func() {
				w.Line("o[O_TOP_IDS + a] = topi[a];")
				w.Line("o[O_TOP_LPS + a] = __float_as_int(__fsub_rn(topv[a], logz));")
			})
		})
	}})
}

// sampleBody writes the kernel: steps 1-4 of runtime.Sampler (mask,
// bias, penalties) on a working copy, then the greedy choice or the draw,
// then the logprobs.
func sampleBody(w *Writer) {
	lines(w, `
__shared__ u64 red[NW * PIV];
__shared__ float redf[NW];
__shared__ int redi[NW];
__shared__ int found, ntop, ccount;
__shared__ float cvals[COMPACT]; // a search's candidates (compact_search)
__shared__ float topv[MAX_TOP];
__shared__ int topi[MAX_TOP];
pdl_wait();
const u32* r = rec + (size_t)blockIdx.x * REC_WORDS;
const u32 flags = r[R_FLAGS];`)
	w.If("flags & F_ACTIVE", func() {
		lines(w, `
const int lane = threadIdx.x & 31, base = (threadIdx.x >> 5) * CHUNK;
int* o = out + (size_t)blockIdx.x * OUT_WORDS;
sample_state s;
s.x = logits + (size_t)blockIdx.x * VOCAB;
s.w = work + (size_t)blockIdx.x * VOCAB;
s.inv_t = __uint_as_float(r[R_INV_T]);
s.tk = 0u;
s.ck = VOCAB;
s.tp = 0u;
s.cp = VOCAB;
s.min_p = __uint_as_float(r[R_MIN_P]);
s.t = 0u;
s.mode = KEY_Y;
const bool masked = (flags & F_MASKED) != 0u;
const int nbias = (int)r[R_BIAS_N], npen = (int)r[R_PEN_N];
const u32* mrow = mask + r[R_MASK_OFF];
const int mwords = (int)r[R_MASK_WORDS];
// the working logits differ from the raw ones: they are written to w
const bool edit = masked || nbias > 0 || npen > 0;
if (threadIdx.x == 0) {
    o[O_LOGPROB] = 0;
    o[O_TOP_N] = 0;
}
// step 1: the raw row (a NaN? a finite logit? its largest) and the working copy, masked
// and, for a working row that is the raw one, the candidates and the argmax
int nan = 0, fin = 0;
float rmax = NEG_INF, best = NEG_INF;
int bi = -1;
u64 n1 = 0;`)
		sampleLoop(w, "s.x", func() {
			w.Line("nan |= v != v;")
			w.Line("fin |= fabsf(v) < __int_as_float(0x7f800000);")
			w.Line("rmax = fmaxf(rmax, v);")
			w.Line("n1 += v > NEG_INF ? 1ull : 0ull;")
			w.If("v > best", func() { w.Line("best = v;"); w.Line("bi = i;") })
			w.If("edit", func() { w.Line("s.w[i] = !masked || allowed(mrow, mwords, i) ? v : NEG_INF;") })
		})
		lines(w, `
nan = __syncthreads_or(nan);
fin = __syncthreads_or(fin);
rmax = block_max_f(rmax, redf);
int tok = SAMPLE_NAN;
if (!nan) {
    if (edit) {
        // steps 2-4: the logit bias, then the penalties, of allowed tokens
        const u32* b = bias + 2 * (size_t)r[R_BIAS_OFF];
        for (int j = threadIdx.x; j < nbias; j += NT) {
            const u32 id = b[2 * j];
            if (id < VOCAB && (!masked || allowed(mrow, mwords, (int)id))) s.w[id] = __fadd_rn(s.w[id], __uint_as_float(b[2 * j + 1]));
        }
        __syncthreads();
        const u32* p = pen + 2 * (size_t)r[R_PEN_OFF];
        const float rep = __uint_as_float(r[R_REPEAT]), pres = __uint_as_float(r[R_PRESENCE]), freq = __uint_as_float(r[R_FREQUENCY]);
        for (int j = threadIdx.x; j < npen; j += NT) {
            const u32 id = p[2 * j];
            if (id < VOCAB && (!masked || allowed(mrow, mwords, (int)id))) s.w[id] = penalize(s.w[id], p[2 * j + 1], rep, pres, freq);
        }
        __syncthreads();
    }
    s.src = edit ? s.w : s.x;
    if (flags & F_GREEDY) {
        // the argmax of step 1 when the working row is the raw one
        tok = edit ? sample_greedy(s, redf, redi) : block_argmax(best, bi, redf, redi);
    } else {
        const bool known = !edit && s.inv_t > 0.f && s.inv_t < __int_as_float(0x7f800000);
        if (known) n1 = block_sum_u64(n1, red);
        tok = sample_draw(s, r, red, redf, redi, &found, known, n1, rmax, cvals, &ccount);
    }
    if (tok < 0) tok = fin ? SAMPLE_NONE : SAMPLE_NO_FINITE;
    if ((flags & F_LOGPROBS) || r[R_TOP_N] > 0u) sample_logprobs(s, r, tok, rmax, o, red, redf, &found, topv, topi, &ntop, cvals, &ccount);
}
if (threadIdx.x == 0) o[O_TOKEN] = tok;`)
	})
	w.Line("pdl_launch();")
}
