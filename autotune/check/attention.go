package check

import (
	"math"
	"math/rand/v2"
	"strings"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// scatterPages lays out caches of lens[i] positions in pages of size rows
// scattered over a pool as a long-running server's are (a sequence's pages
// neither consecutive nor in order, free pages between them): the page
// tables one after another in pages, sequence i's at base[i], and the
// pool's rows.
func scatterPages(r *rand.Rand, lens []int32, size int) (pages, base []int32, rows int) {
	n := 0
	for _, l := range lens {
		n += max(1, (int(l)+size-1)/size)
	}
	pool := n + n/4 + 3
	perm := r.Perm(pool)
	for _, l := range lens {
		base = append(base, int32(len(pages)))
		for range max(1, (int(l)+size-1)/size) {
			pages = append(pages, int32(perm[0]))
			perm = perm[1:]
		}
	}
	return pages, base, pool * size
}

// pageSize is the page of the attention cases: the lowering's default
// unless the shape names one.
func pageSize(as codegen.AttnShape) int {
	if as.PageSize > 0 {
		return as.PageSize
	}
	return codegen.DefaultPageSize
}

// Decode is split-KV decode attention for one query per sequence; lens are
// the sequences' key counts (their caches in pages scattered over a pool,
// scatterPages).
func Decode(shape string, as codegen.AttnShape, lens []int32, seed uint64) *Case {
	return decodeCase(shape, as, lens, false, seed)
}

// DecodeXQ is Decode with the combine that writes its rows quantised for
// the output projection (codegen.DecodeAttentionXQ), checked by
// dequantising them (within codegen.XQTol; each group's int8 sums exact).
func DecodeXQ(shape string, as codegen.AttnShape, lens []int32, seed uint64) *Case {
	return decodeCase(shape, as, lens, true, seed)
}

// decodeKernels is the decode attention of arm a at as: the partial and
// combine kernels, or for an arm with Fuse the one kernel that does both.
func decodeKernels(as codegen.AttnShape, a codegen.DecodeArm, xq bool) ([]*codegen.Kernel, error) {
	if a.Fuse {
		k, err := codegen.DecodeAttentionFused(as, a, xq)
		if err != nil {
			return nil, err
		}
		return []*codegen.Kernel{k}, nil
	}
	attn := codegen.DecodeAttention
	if xq {
		attn = codegen.DecodeAttentionXQ
	}
	p, cb, err := attn(as, a)
	if err != nil {
		return nil, err
	}
	return []*codegen.Kernel{p, cb}, nil
}

func decodeCase(shape string, as codegen.AttnShape, lens []int32, xq bool, seed uint64) *Case {
	c := &Case{Family: "attn_decode", Label: "attn_decode", Shape: shape, DType: strings.ToLower(as.Cache.String()) + " cache",
		Class: codegen.AttnClass(as), Tol: 1e-4, seed: seed}
	if xq {
		c.Label, c.Class, c.Tol = c.Label+"+xq", c.Class+"_xq", codegen.XQTol
	}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		// a tunedb point of Live 3 leaves the card's multiprocessors to
		// lowering; H100 and H200 SXM cards have the default's 132
		return decodeKernels(as, codegen.DecodeArmOf(arm).OnCard(0), xq)
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		kvw := as.HeadsKV * as.HeadDim
		pages, base, rows := scatterPages(r, lens, pageSize(as))
		maxLen := 0
		for _, l := range lens {
			maxLen = max(maxLen, int(l))
		}
		kcb, kc, err := cacheValues(as.Cache, kvw, randn(r, rows*kvw))
		if err != nil {
			return nil, err
		}
		vcb, vc, err := cacheValues(as.Cache, kvw, randn(r, rows*kvw))
		if err != nil {
			return nil, err
		}
		seqs := len(lens)
		q := randn(r, seqs*as.QStride)
		ref := lazy(func() ([]float32, error) { return codegen.RefAttention(as, q, base, lens, pages, kc, vc), nil })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				splits := codegen.DecodeArmOf(arm).Splits(as.KeySpan(max(maxLen, c.capacity)))
				po := fbuf(make([]float32, seqs*as.Heads*splits*as.HeadDim))
				pml := fbuf(make([]float32, seqs*as.Heads*splits*2))
				lb, out := ibuf(lens), fbuf(make([]float32, seqs*as.Heads*as.HeadDim))
				if xq {
					out = &Buf{Data: make([]byte, seqs*codegen.XQRowBytes(as.Heads*as.HeadDim))}
				}
				partial := []Arg{b(fbuf(q)), b(&Buf{Data: kcb}), b(&Buf{Data: vcb}), b(ibuf(pages)), b(ibuf(base)), b(lb), b(po), b(pml), s(splits)}
				args := [][]Arg{partial, {b(po), b(pml), b(lb), b(out), s(splits)}}
				if len(ks) == 1 { // the combine in the partial kernel: a zero ticket a (sequence, kv head)
					args = [][]Arg{append(partial, b(ibuf(make([]int32, seqs*as.HeadsKV))), b(out))}
				}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Seqs: seqs, KVLen: max(maxLen, c.capacity)}, Args: args, Outs: []*Buf{out}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, _ := ref()
				if xq {
					return xqRowsErr(outs[0], as.Heads*as.HeadDim, want), nil
				}
				return codegen.RelErr(bytesF32(outs[0]), want), nil
			},
		}, nil
	}
	return c
}

// xqRowsErr dequantises rows of k quantised as XQuant writes them (int8
// values, then per group of 32 the float4 dx, int8 sums of elements 0-15
// and 16-31, float sum) and returns their error against want; +Inf when a
// group's int8 sums are not those of its values.
func xqRowsErr(data []byte, k int, want []float32) float64 {
	rb := codegen.XQRowBytes(k)
	got := make([]float32, 0, len(want))
	for r := 0; r+rb <= len(data); r += rb {
		row := data[r : r+rb]
		for g := range k / 32 {
			m := bytesF32(row[k+16*g : k+16*g+16])
			var s [2]float32
			for i := range 32 {
				v := float32(int8(row[32*g+i]))
				s[i/16] += v
				got = append(got, v*m[0])
			}
			if s[0] != m[1] || s[1] != m[2] {
				return math.Inf(1)
			}
		}
	}
	return codegen.RelErr(got, want)
}

// Prefill is causal prefill attention for ntok tokens of one sequence
// starting at position p0, its cache in scattered pages (scatterPages).
func Prefill(shape string, as codegen.AttnShape, ntok, p0 int, seed uint64) *Case {
	return prefillCase(shape, as, []Span{{ntok, p0}}, false, seed)
}

// FlashPrefill is Prefill's case for the tensor-core prefill attention
// (codegen.FlashPrefillAttention, the arm lowering runs), within
// codegen.FlashTol; nil where it has no kernel for the shape.
func FlashPrefill(shape string, as codegen.AttnShape, ntok, p0 int, seed uint64) *Case {
	return FlashMixed(shape, as, []Span{{ntok, p0}}, seed)
}

// Span is one sequence's tokens in a step of prefill attention: N tokens
// from position P0 (a decode is one token).
type Span struct{ N, P0 int }

// FlashMixed is the tensor-core prefill attention over a step of several
// sequences, as the server's steps mix prompt chunks with decodes: each
// span a sequence, its tokens after the previous span's, cut into the
// kernel's tiles as the runtime cuts them (codegen.FlashTiles); nil where
// it has no kernel for the shape. Its label is attn_flash for one span
// and attn_flash_mixed for more.
func FlashMixed(shape string, as codegen.AttnShape, spans []Span, seed uint64) *Case {
	if !codegen.FlashSupported(as) {
		return nil
	}
	return prefillCase(shape, as, spans, true, seed)
}

// prefillCase is causal prefill attention over spans, their caches in
// scattered pages (scatterPages): on tensor cores (flash, within
// codegen.FlashTol) or on CUDA cores (the arm's PrefillAttention).
func prefillCase(shape string, as codegen.AttnShape, spans []Span, flash bool, seed uint64) *Case {
	c := &Case{Family: "attn_prefill", Label: "attn_prefill", Shape: shape, DType: strings.ToLower(as.Cache.String()) + " cache",
		Class: codegen.AttnClass(as), Tol: 1e-4, seed: seed}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.PrefillAttention(as, codegen.PrefillArmOf(arm)))
	}
	if flash {
		c.Family, c.Label, c.Tol = "attn_flash", "attn_flash", codegen.FlashTol
		if len(spans) > 1 {
			c.Label = "attn_flash_mixed"
		}
		c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
			return one(codegen.FlashPrefillAttention(as, codegen.FlashArmOf(arm)))
		}
		if as.Cache == dtype.F16 {
			// kernel-check runs the arm staged through registers beside the default ring
			c.ExtraArms = []codegen.Point{codegen.FlashArm{Warps: codegen.DefaultFlashArm.Warps, Stages: 1}.Point()}
		} else {
			// the 8-bit cache has no ring: its default stages through registers
			sp := c.Space()
			sp.Default = codegen.FlashArmFor(as, codegen.DefaultFlashArm).Point()
			c.space = &sp
		}
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		kvw := as.HeadsKV * as.HeadDim
		lens := make([]int32, len(spans))
		kvLen := 0
		for i, sp := range spans {
			lens[i] = int32(sp.P0 + sp.N)
			kvLen = max(kvLen, sp.P0+sp.N)
		}
		pages, base, rows := scatterPages(r, lens, pageSize(as))
		kcb, kc, err := cacheValues(as.Cache, kvw, randn(r, rows*kvw))
		if err != nil {
			return nil, err
		}
		vcb, vc, err := cacheValues(as.Cache, kvw, randn(r, rows*kvw))
		if err != nil {
			return nil, err
		}
		var tb, tp, n []int32
		for i, sp := range spans {
			for j := range sp.N {
				tb, tp, n = append(tb, base[i]), append(tp, int32(sp.P0+j)), append(n, int32(sp.P0+j+1))
			}
		}
		ntok := len(tb)
		q := randn(r, ntok*as.QStride)
		ref := lazy(func() ([]float32, error) { return codegen.RefAttention(as, q, tb, n, pages, kc, vc), nil })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				out := fbuf(make([]float32, ntok*as.Heads*as.HeadDim))
				args := []Arg{b(fbuf(q)), b(&Buf{Data: kcb}), b(&Buf{Data: vcb}), b(ibuf(pages)), b(ibuf(tb)), b(ibuf(tp))}
				if flash {
					tiles := make([]int32, ntok)
					codegen.FlashTiles(tiles, tb, codegen.FlashArmOf(arm).Rows())
					args = append(args, b(ibuf(tiles)))
				}
				args = append(args, b(out), s(ntok))
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: ntok, Seqs: len(spans), KVLen: kvLen}, Args: [][]Arg{args}, Outs: []*Buf{out}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				want, _ := ref()
				return codegen.RelErr(bytesF32(outs[0]), want), nil
			},
		}, nil
	}
	return c
}
