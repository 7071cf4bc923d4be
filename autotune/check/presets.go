package check

import (
	"slices"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// KernelCheckCases are the cases of `memra kernel-check` for shape s: the
// dtype-independent families (F16 cache), then per weight type embedding,
// the QKV product (GEMV and MMA at 64 rows) and the FFN-down GEMV, all with
// a residual add. A type a family cannot take at s (row length not a
// multiple of its block) is skipped.
func KernelCheckCases(s codegen.Shape, types []dtype.Type, seed uint64) []*Case {
	const tokens = 4
	cs := []*Case{
		RMSNorm(s.Name, s.Hidden, s.Eps, true, tokens, seed),
		RopeKV(s.Name, s.Rope(dtype.F16), tokens, seed),
		SwiGLU(s.Name, s.FFN, tokens, seed),
		Argmax(s.Name, s.Vocab, tokens, seed),
		Decode(s.Name, s.Attn(dtype.F16), []int32{1100, 333}, seed),
		DecodeXQ(s.Name, s.Attn(dtype.F16), []int32{1100, 333}, seed),
		Prefill(s.Name, s.Attn(dtype.F16), 48, 16, seed),
		withFusedArms(DecodeLive(s.Name, s.Attn(dtype.F16), []int32{1100, 333, 1}, 4096, seed)),
		withFusedArms(DecodeLiveXQ(s.Name, s.Attn(dtype.F16), []int32{1100, 333, 1, 20}, 4096, seed)),
		DecodePreload(s.Name, s.Attn(dtype.F16), []int32{1100, 333, 1, 20}, 4096, seed),
		DecodeLive2(s.Name, s.Attn(dtype.F16), []int32{1100, 333, 1, 20}, 4096, seed),
		DecodeLive4(s.Name, s.Attn(dtype.F16), []int32{1100, 333, 1, 20, 4096}, 4096, seed),
		HeadNorm(s, "q", tokens, seed),
		HeadNorm(s, "k", tokens, seed),
		HeadNorm(s, "qk", tokens, seed),
		RopeKVNorm(s, tokens, seed),
	}
	// tensor-core prefill attention: one block of keys, then several, the first warps done early
	for _, c := range []*Case{FlashPrefill(s.Name, s.Attn(dtype.F16), 48, 16, seed), FlashPrefill(s.Name, s.Attn(dtype.F16), 100, 150, seed),
		FlashMixed(s.Name, s.Attn(dtype.F16), servingSpans, seed)} {
		if c != nil {
			cs = append(cs, c)
		}
	}
	cs = append(cs, longContextCases(s, seed)...)
	cs = append(cs, cacheQ8Cases(s, tokens, seed)...)
	if s.Window > 0 {
		cs = append(cs, gemmaCases(s, tokens, seed)...)
	}
	qkv := (s.Heads + 2*s.HeadsKV) * s.HeadDim
	for _, t := range types {
		if rowOK(t, s.Hidden) {
			cs = append(cs, Embedding(s.Name, t, s.Hidden, seed),
				withQuantArms(Product(s.Name, "gemv", "qkv", t, qkv, s.Hidden, 1, true, seed), t, s.Hidden),
				withMMAArms(Product(s.Name, "mma", "qkv", t, qkv, s.Hidden, 64, true, seed), s.Hidden),
				GemmSmall(s.Name, "qkv", t, qkv, s.Hidden, 8, true, seed))
			if codegen.Repackable(t) {
				c := withQuantArms(Product(s.Name, "gemv", "qkv", t, qkv, s.Hidden, 12, true, seed), t, s.Hidden)
				c.Label += "×12"
				cs = append(cs, c)
				cs = append(cs, wideCheckCases(s, t, seed)...)
				cs = append(cs, smallCheckCases(s, t, seed)...)
				cs = append(cs, orderedCheckCases(s, t, seed)...)
			}
			if codegen.UntunedPrologues(t) {
				cs = append(cs, ProductNorm(s.Name, "qkv", t, qkv, s.Hidden, 1, s.Eps, seed))
				if codegen.Repackable(t) {
					c := ProductNorm(s.Name, "qkv", t, qkv, s.Hidden, 12, s.Eps, seed)
					c.Label += "×12"
					// the V part of a fused QKV row of mixed types (Q4_K_M's Q6_K V)
					v := ProductNormInto(s.Name, "v", t, s.HeadsKV*s.HeadDim, s.Hidden, 4, s.Eps, qkv, seed)
					cs = append(cs, c, v)
					// with RopeKV's work in the epilogue (adjacent RoPE pairs only): Q and K
					// one product, V another (LowerOptions.RopeInProduct)
					if rs := s.Rope(dtype.F16); !rs.Half {
						qk := (s.Heads + s.HeadsKV) * s.HeadDim
						cs = append(cs, ProductRope(s.Name, "q+k", t, rs, qk, 0, s.Hidden, 1, s.Eps, seed))
						v := ProductRope(s.Name, "v", t, rs, s.HeadsKV*s.HeadDim, qk, s.Hidden, 12, s.Eps, seed)
						v.Label += "×12"
						cs = append(cs, v)
					}
					// RopeKV's work (RopeKVNorm's with the q/k norms) by the block that
					// finishes a head last (XQEnds.HeadRope, one-sequence programs):
					// Q and K with the norms, V at three rows (a ticket each), the
					// whole row without norms
					rs, qk, kv := s.Rope(dtype.F16), (s.Heads+s.HeadsKV)*s.HeadDim, s.HeadsKV*s.HeadDim
					v = ProductHeadRope(s.Name, "v", t, rs, kv, qk, s.Hidden, 3, s.Eps, true, seed)
					v.Label += "×3"
					cs = append(cs, ProductHeadRope(s.Name, "q+k", t, rs, qk, 0, s.Hidden, 1, s.Eps, true, seed), v,
						ProductHeadRope(s.Name, "qkv", t, rs, qkv, 0, s.Hidden, 1, s.Eps, false, seed))
				}
			}
		}
		if codegen.Repackable(t) && rowOK(t, s.Hidden) && rowOK(t, s.Heads*s.HeadDim) && rowOK(t, s.FFN) {
			// a residual product quantising for the next norm's product (XQEnds.QuantOut)
			cs = append(cs, ProductNormAfter(s.Name, "attn_out→qkv", t, s.Hidden, s.Heads*s.HeadDim, t, qkv, 1, s.Eps, seed))
			c := ProductNormAfter(s.Name, "down→gate_up", t, s.Hidden, s.FFN, t, 2*s.FFN, 12, s.Eps, seed)
			c.Label += "×12"
			// a gate/up product computing the SwiGLU and quantising it for the down product
			// (SwiGLUOut: one-sequence programs only; Gemma's GeGLU where the shape has a window)
			cs = append(cs, c, ProductSwiGLUOut(s.Name, t, s.FFN, s.Hidden, t, 1, s.Eps, s.Window > 0, seed))
		}
		if rowOK(t, s.FFN) {
			cs = append(cs, withQuantArms(Product(s.Name, "gemv", "down", t, s.Hidden, s.FFN, 1, true, seed), t, s.FFN))
			if codegen.UntunedPrologues(t) {
				cs = append(cs, ProductSwiGLU(s.Name, "down", t, s.Hidden, s.FFN, 1, seed))
				if codegen.Repackable(t) {
					c := ProductSwiGLU(s.Name, "down", t, s.Hidden, s.FFN, 12, seed)
					c.Label += "×12"
					cs = append(cs, c)
				}
			}
		}
	}
	return append(cs, MoECases(s, types, seed)...)
}

// withQuantArms gives a GEMV case of a repacked weight type the extra arms
// kernel-check runs besides the case's default (the untuned one-row arm
// lowering uses, codegen.DefaultXQGlobalOneArm): the float GEMV on the file's
// layout (codegen.DefaultGEMVArm, what the exact configuration runs) and on
// the repacked one (codegen.DefaultRepackArm), the int8-activation GEMV
// with a row a warp (codegen.DefaultXQArm) and the untuned batch arm
// (codegen.DefaultXQBatchArm), fitted to the row length, the one-row arm
// of those that stage their own activations (codegen.DefaultXQOneArm) and
// the untuned batch arm (codegen.DefaultXQGlobalBatchArm, with its XQuant
// launch) and the int8 tensor-core batch arm (codegen.DefaultXQMMAArm) and
// its pipelined form (codegen.DefaultXQMMAPipeArm), and for the rows the
// f16 tensor-core arm covers (codegen.HalfProduct) that arm with its XHalf
// launch (codegen.DefaultXQHalfArm, within codegen.HalfTol).
func withQuantArms(c *Case, t dtype.Type, k int) *Case {
	if codegen.Repackable(t) {
		c.ExtraArms = []codegen.Point{codegen.DefaultGEMVArm.Point(), codegen.DefaultRepackArm.Point(),
			codegen.FitXQ(codegen.DefaultXQArm, k).Point(), codegen.FitXQ(codegen.DefaultXQBatchArm, k).Point(),
			codegen.FitXQ(codegen.DefaultXQOneArm, k).Point(), codegen.DefaultXQGlobalBatchArm.Point(), codegen.DefaultXQMMAArm.Point(), codegen.DefaultXQMMAPipeArm.Point()}
		if codegen.HalfProduct(t, k) {
			c.ExtraArms = append(c.ExtraArms, codegen.DefaultXQHalfArm.Point())
		}
		c.AnyGEMVArm = true
	}
	return c
}

// withMMAArms adds to an mma case, whose default arm is pipelined
// (codegen.DefaultMMAArm, Pipe 0 where k is not a multiple of 64), the
// unpipelined tiling of the same size (the earlier default) and, where rows
// of k elements allow them, two larger pipelined tilings: 128×128, and
// 64×128 (eight warps), the fastest pp512 arm of the H200 sweep.
func withMMAArms(c *Case, k int) *Case {
	c.ExtraArms = append(c.ExtraArms, codegen.MMAArm{BM: 64, BN: 64, WarpsM: 2, WarpsN: 2}.Point())
	for _, a := range []codegen.MMAArm{{BM: 128, BN: 128, WarpsM: 2, WarpsN: 4, Pipe: 1}, {BM: 64, BN: 128, WarpsM: 2, WarpsN: 4, Pipe: 1}} {
		if a.ForK(k) == a {
			c.ExtraArms = append(c.ExtraArms, a.Point())
		}
	}
	return c
}

// rowOK reports whether rows of k elements of t are whole blocks.
func rowOK(t dtype.Type, k int) bool {
	_, err := t.RowBytes(k)
	return err == nil && k%32 == 0
}

// Weights are the weight types of a model's products.
type Weights struct {
	Attn, AttnOut, FFNUp, FFNDown, Output, Embed dtype.Type
	// QKV are the (Q, K, V) type triples of the model's layers when they
	// are not all Attn (Q4_K_M keeps V in Q6_K in some layers): a triple of
	// one type is one fused product, another one product per part.
	QKV [][3]dtype.Type
	// Downs are the FFN down types of the layers when not all FFNDown.
	Downs []dtype.Type
}

// UniformWeights uses t for every product.
func UniformWeights(t dtype.Type) Weights {
	return Weights{Attn: t, AttnOut: t, FFNUp: t, FFNDown: t, Output: t, Embed: t}
}

// Sizes are the launch sizes autotune measures at.
type Sizes struct {
	DecodeTokens  int     // rows of the decode-step families (norm, RoPE, SwiGLU, GEMV): batch size
	PrefillTokens int     // rows of the MMA products and prefill attention
	DecodeKV      []int32 // key counts of the decode-attention sequences
	SmallTokens   int     // rows of the gemm_small products (0: SmallBatchTokens)
	BatchTokens   int     // rows of the batch arms of repacked products (0: BatchTuneTokens)
	// Invariant times the live decode attention's arms as a
	// batch-invariant class lowers them (codegen.DecodeArm.Invariant: a
	// Live 3 point runs Live 4's kernels), the default class's.
	Invariant bool
}

// BatchTuneTokens is the batch the batch arms of repacked decode products
// are tuned and confirmed at: inside the steps they serve (2 to
// codegen.GEMVLargeRows-1 rows; larger steps run the tensor-core kernel).
const BatchTuneTokens = 8

// DefaultSizes: batch-1 decode at a 4096-token context, 256-token prefill chunks.
var DefaultSizes = Sizes{DecodeTokens: 1, PrefillTokens: 256, DecodeKV: []int32{4096}}

// TuneCases are the cases a model of shape s with weights w needs tuned:
// one per (family, shape class), the fused QKV and gate+up products as the
// lowering emits them, the output projection as a GEMV only (prefill needs
// logits for one row).
func TuneCases(s codegen.Shape, w Weights, z Sizes, seed uint64) []*Case {
	cs := []*Case{
		Embedding(s.Name, w.Embed, s.Hidden, seed),
		RMSNorm(s.Name, s.Hidden, s.Eps, false, z.DecodeTokens, seed), // the product prologue, as lowered
		RopeKV(s.Name, s.Rope(dtype.F16), z.DecodeTokens, seed),
		SwiGLU(s.Name, s.FFN, z.DecodeTokens, seed),
		Argmax(s.Name, s.Vocab, z.DecodeTokens, seed),
		Decode(s.Name, s.Attn(dtype.F16), z.DecodeKV, seed),
		decodeLiveAs(s.Name, s.Attn(dtype.F16), z.DecodeKV, 4*int(slices.Max(z.DecodeKV)), z.Invariant, seed),
	}
	// prefill attention: the tensor-core kernel where it has one for the
	// shape, else the CUDA-core one (the f16 cache: lowering's choice)
	if c := FlashMixed(s.Name, s.Attn(dtype.F16), flashTuneSpans(z.PrefillTokens), seed); c != nil {
		cs = append(cs, c)
	} else {
		cs = append(cs, Prefill(s.Name, s.Attn(dtype.F16), z.PrefillTokens, 0, seed))
	}
	small := z.SmallTokens
	if small <= 0 {
		small = SmallBatchTokens
	}
	qd, kvd := s.Heads*s.HeadDim, s.HeadsKV*s.HeadDim
	type product struct {
		use      string
		t        dtype.Type
		n, k     int
		residual bool
		prefill  bool
	}
	var products []product
	qkv := w.QKV
	if len(qkv) == 0 {
		qkv = [][3]dtype.Type{{w.Attn, w.Attn, w.Attn}}
	}
	for _, p := range qkv {
		if p[0] == p[1] && p[1] == p[2] {
			products = append(products, product{"qkv", p[0], qd + 2*kvd, s.Hidden, false, true})
			continue
		}
		// one product per part, as lowering runs them when the types differ
		products = append(products, product{"q", p[0], qd, s.Hidden, false, true}, product{"k", p[1], kvd, s.Hidden, false, true},
			product{"v", p[2], kvd, s.Hidden, false, true})
	}
	// the output and down products add into the residual stream, or feed a
	// post-norm (Gemma) and write their rows: the class lowering looks up
	residual := !s.PostNorms
	products = append(products, product{"attn_out", w.AttnOut, s.Hidden, qd, residual, true}, product{"gate_up", w.FFNUp, 2 * s.FFN, s.Hidden, false, true})
	downs := w.Downs
	if len(downs) == 0 {
		downs = []dtype.Type{w.FFNDown}
	}
	for _, t := range downs {
		products = append(products, product{"down", t, s.Hidden, s.FFN, residual, true})
	}
	products = append(products, product{"output", w.Output, s.Vocab, s.Hidden, false, false})
	cs = append(cs, moeTuneCases(s, w, z, seed)...)
	seen := map[string]bool{}
	for _, p := range products {
		if !rowOK(p.t, p.k) {
			continue
		}
		g := Product(s.Name, "gemv", p.use, p.t, p.n, p.k, z.DecodeTokens, p.residual, seed)
		if !seen[g.ID()] {
			seen[g.ID()] = true
			cs = append(cs, g)
		}
		if codegen.Repackable(p.t) {
			bt := z.BatchTokens
			if bt <= 0 {
				bt = BatchTuneTokens
			}
			if b := ProductBatch(s.Name, p.use, p.t, p.n, p.k, bt, p.residual, seed); !seen[b.ID()] {
				seen[b.ID()] = true
				cs = append(cs, b)
			}
			if lg := ProductLarge(s.Name, p.use, p.t, p.n, p.k, LargeTuneTokens, p.residual, seed); !seen[lg.ID()] {
				seen[lg.ID()] = true
				cs = append(cs, lg)
			}
			if wd := ProductWide(s.Name, p.use, p.t, p.n, p.k, WideTuneTokens, p.residual, seed); wd != nil && !seen[wd.ID()] {
				seen[wd.ID()] = true
				cs = append(cs, wd)
			}
			if sm := ProductSmall(s.Name, p.use, p.t, p.n, p.k, SmallTuneTokens, p.residual, seed); sm != nil && !seen[sm.ID()] {
				seen[sm.ID()] = true
				cs = append(cs, sm)
			}
		}
		if gs := GemmSmall(s.Name, p.use, p.t, p.n, p.k, small, p.residual, seed); !seen[gs.ID()] {
			seen[gs.ID()] = true
			cs = append(cs, gs)
		}
		if p.prefill {
			m := Product(s.Name, "mma", p.use, p.t, p.n, p.k, z.PrefillTokens, p.residual, seed)
			if !seen[m.ID()] {
				seen[m.ID()] = true
				cs = append(cs, m)
			}
		}
	}
	return cs
}

// cacheQ8Cases are the cases of the kernels that write or read an 8-bit
// KV cache (codegen.CacheQ8) at s, none where s's rows cannot be held so:
// the RoPE + KV write, split-KV decode attention plain, over the live
// length, with its first keys read before the dependency wait, and prefill attention
// on CUDA cores and on tensor cores.
func cacheQ8Cases(s codegen.Shape, tokens int, seed uint64) []*Case {
	if codegen.CheckCacheRow(codegen.CacheQ8, s.HeadsKV, s.HeadDim) != nil {
		return nil
	}
	as := s.Attn(codegen.CacheQ8)
	cs := []*Case{
		RopeKV(s.Name, s.Rope(codegen.CacheQ8), tokens, seed),
		Decode(s.Name, as, []int32{1100, 333}, seed),
		withFusedArms(DecodeLive(s.Name, as, []int32{1100, 333, 1}, 4096, seed)),
		DecodePreload(s.Name, as, []int32{1100, 333, 1, 20}, 4096, seed),
		Prefill(s.Name, as, 48, 16, seed),
	}
	for _, c := range []*Case{FlashPrefill(s.Name, as, 48, 16, seed), FlashPrefill(s.Name, as, 100, 150, seed), FlashMixed(s.Name, as, servingSpans, seed)} {
		if c != nil {
			cs = append(cs, c)
		}
	}
	return cs
}

// servingSpans is a serving step's prefill attention: decodes at several
// positions between prompt chunks of one and two tiles, the first from a
// sequence's start and the second after its cached prefix.
var servingSpans = []Span{{1, 511}, {100, 150}, {1, 37}, {1, 1100}, {70, 0}, {1, 5}, {1, 64}}

// flashTuneSpans is the step the tensor-core prefill attention is tuned
// on, as a server runs it while admitting requests: a prompt chunk of n
// tokens beside 32 decodes at 512 to 1,039 keys, one tile each.
func flashTuneSpans(n int) []Span {
	spans := []Span{{n, 0}}
	for i := range 32 {
		spans = append(spans, Span{1, 512 + 17*i})
	}
	return spans
}

// longContextCases check attention through the page tables of a 32k
// context: decode as lowered by default (live splits with the first keys
// preloaded) over a sequence of 30,000 keys beside short ones, and the
// last prefill chunk of a 30,000-token prompt, on tensor cores where the
// shape has them and one warp a query where not.
func longContextCases(s codegen.Shape, seed uint64) []*Case {
	as := s.Attn(dtype.F16)
	const capacity, long = 32768, 30000
	d := DecodePreload(s.Name, as, []int32{long, 1100, 1}, capacity, seed)
	p := Prefill(s.Name, as, 16, long-16, seed)
	cs := []*Case{d, p}
	if f := FlashPrefill(s.Name, as, 16, long-16, seed); f != nil {
		cs = append(cs, f)
	}
	for _, c := range cs {
		c.Label += "@32k"
	}
	return cs
}
