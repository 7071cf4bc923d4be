package codegen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// Shape is a model-like set of constant dimensions to generate kernels for.
type Shape struct {
	Name                    string
	Hidden, FFN, Vocab      int
	Heads, HeadsKV, HeadDim int
	RopeHalf                bool
	Eps                     float32
	// Window is the sliding-window layers' window (Gemma); 0: none. Attn
	// is the global layers' shape; GemmaKernels and kernel-check's Gemma
	// cases take the window.
	Window int
	// PostNorms: the attention output and FFN down products feed norms
	// before their residual adds (Gemma 2 and 3), so they write their rows
	// rather than add into the residual stream (their product classes have
	// no "_res").
	PostNorms bool
	// Experts, ExpertsUsed and ExpertFFN describe a mixture-of-experts
	// feed-forward (Experts 0: dense); ExpertNorm renormalises the
	// router's weights over the chosen experts.
	Experts, ExpertsUsed, ExpertFFN int
	ExpertNorm                      bool
}

// Shapes are the preset shapes of kernel-check and the compile gate.
var Shapes = []Shape{
	{Name: "llama3-8b", Hidden: 4096, FFN: 14336, Vocab: 128256, Heads: 32, HeadsKV: 8, HeadDim: 128, Eps: 1e-5},
	{Name: "qwen2.5-7b", Hidden: 3584, FFN: 18944, Vocab: 152064, Heads: 28, HeadsKV: 4, HeadDim: 128, RopeHalf: true, Eps: 1e-6},
	{Name: "qwen3-8b", Hidden: 4096, FFN: 12288, Vocab: 151936, Heads: 32, HeadsKV: 8, HeadDim: 128, RopeHalf: true, Eps: 1e-6},
	{Name: "tiny", Hidden: 256, FFN: 512, Vocab: 1000, Heads: 4, HeadsKV: 2, HeadDim: 64, Eps: 1e-5},
	{Name: "gemma3-12b", Hidden: 3840, FFN: 15360, Vocab: 262208, Heads: 16, HeadsKV: 8, HeadDim: 256, RopeHalf: true, Eps: 1e-6, Window: 1024, PostNorms: true},
	// mixtures of experts (FFN: the experts')
	{Name: "qwen3-30b-a3b", Hidden: 2048, FFN: 768, Vocab: 151936, Heads: 32, HeadsKV: 4, HeadDim: 128, RopeHalf: true, Eps: 1e-6,
		Experts: 128, ExpertsUsed: 8, ExpertFFN: 768, ExpertNorm: true},
	{Name: "mixtral-8x7b", Hidden: 4096, FFN: 14336, Vocab: 32000, Heads: 32, HeadsKV: 8, HeadDim: 128, Eps: 1e-5,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 14336, ExpertNorm: true},
	{Name: "tiny-moe", Hidden: 256, FFN: 256, Vocab: 1000, Heads: 4, HeadsKV: 2, HeadDim: 64, Eps: 1e-5,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 256, ExpertNorm: true},
}

// ShapeByName returns the preset shape called name.
func ShapeByName(name string) (Shape, error) {
	for _, s := range Shapes {
		if strings.EqualFold(s.Name, name) {
			return s, nil
		}
	}
	return Shape{}, fmt.Errorf("%w: shape %q", ErrUnsupported, name)
}

// Rope returns the RoPE shape of s with a cache of type cache.
func (s Shape) Rope(cache dtype.Type) RopeShape {
	return RopeShape{Heads: s.Heads, HeadsKV: s.HeadsKV, HeadDim: s.HeadDim, RopeDim: s.HeadDim, Half: s.RopeHalf, Cache: cache}
}

// Attn returns the attention shape of s reading q from fused QKV rows.
func (s Shape) Attn(cache dtype.Type) AttnShape {
	return AttnShape{Heads: s.Heads, HeadsKV: s.HeadsKV, HeadDim: s.HeadDim, QStride: s.Rope(cache).QKVStride(), Cache: cache}
}

// DefaultKernels returns every family's kernels with default arms for shape
// s: the dtype-independent ones (norm, RoPE, SwiGLU, attention with an F16
// cache, argmax, sampling, step inputs) and, for each weight type in types, embedding, GEMV (the
// QKV product, N = (Heads+2·HeadsKV)·HeadDim, K = Hidden) and the MMA
// product. A type a family cannot take for the shape is skipped.
func DefaultKernels(s Shape, types []dtype.Type) ([]*Kernel, error) {
	var ks []*Kernel
	add := func(k *Kernel, err error) error {
		if err != nil {
			return err
		}
		ks = append(ks, k)
		return nil
	}
	cache := dtype.F16
	if err := add(RMSNormAdd(s.Hidden, s.Eps, true, DefaultBlockArm)); err != nil {
		return nil, err
	}
	if err := add(RopeKV(s.Rope(cache), DefaultBlockArm)); err != nil {
		return nil, err
	}
	if err := add(SwiGLU(s.FFN, DefaultBlockArm)); err != nil {
		return nil, err
	}
	if err := add(Argmax(s.Vocab, DefaultBlockArm)); err != nil {
		return nil, err
	}
	if err := add(Sample(s.Vocab, DefaultSampleArm)); err != nil {
		return nil, err
	}
	if err := add(StepInputs(DefaultBlockArm)); err != nil {
		return nil, err
	}
	// the per-head q/k norms (qwen3, Gemma 3) inside the fused QKV row: one
	// part's, and both in one launch
	stride := (s.Heads + 2*s.HeadsKV) * s.HeadDim
	for _, two := range []int{0, s.HeadsKV} {
		if err := add(HeadRMSNorm(HeadNormShape{Heads: s.Heads, Heads2: two, HeadDim: s.HeadDim, Stride: stride, Eps: s.Eps}, DefaultBlockArm)); err != nil {
			return nil, err
		}
	}
	p, c, err := DecodeAttention(s.Attn(cache), DefaultDecodeArm)
	if err != nil {
		return nil, err
	}
	ks = append(ks, p, c)
	// the runtime's default decode attention (Live 3 at the default card's
	// multiprocessors) and Live 2, its tuned alternative
	for _, live := range []int{3, 2} {
		arm := DefaultDecodeLiveArm
		arm.Live = live
		if p, c, err = DecodeAttention(s.Attn(cache), arm.OnCard(0)); err != nil {
			return nil, err
		}
		ks = append(ks, p, c)
	}
	if err := add(PrefillAttention(s.Attn(cache), DefaultPrefillArm)); err != nil {
		return nil, err
	}
	if FlashSupported(s.Attn(cache)) {
		if err := add(FlashPrefillAttention(s.Attn(cache), FlashArmFor(s.Attn(cache), DefaultFlashArm))); err != nil {
			return nil, err
		}
	}
	nqkv := (s.Heads + 2*s.HeadsKV) * s.HeadDim
	// the quantisers of the XQ 2 products: after the norm, of the SwiGLU, plain
	for _, q := range []struct {
		k   int
		pro Prologue
	}{{s.Hidden, Prologue{Kind: ProNorm, Eps: s.Eps}}, {s.FFN, Prologue{Kind: ProSwiGLU}}, {s.Hidden, Prologue{}}} {
		if q.k%32 == 0 {
			if err := add(XQuant(q.k, q.pro)); err != nil {
				return nil, err
			}
			// and XHalf's f16 rows for the f16 tensor-core products (Arms.GEMVLarge, GEMVLargeClass)
			if err := add(XHalf(q.k, q.pro)); err != nil {
				return nil, err
			}
		}
	}
	// the activations of a prefill product run by cuBLASLt, rounded to bf16 or f16
	for _, t := range []dtype.Type{dtype.BF16, dtype.F16} {
		if err := add(RoundHalf(t, s.Hidden)); err != nil {
			return nil, err
		}
	}
	for _, t := range types {
		if checkRow(t, s.Hidden) != nil {
			continue
		}
		if err := add(Embedding(t, s.Hidden, DefaultBlockArm)); err != nil {
			return nil, err
		}
		if err := add(GEMV(t, nqkv, s.Hidden, false, DefaultGEMVArm)); err != nil {
			return nil, err
		}
		// the default prefill product and its unpipelined form (products
		// whose K is not a multiple of 64)
		mma := DefaultMMAArm.ForK(s.Hidden)
		unpiped := mma
		unpiped.Pipe = 0
		for _, a := range slices.Compact([]MMAArm{mma, unpiped}) {
			if err := add(MatMulMMA(t, nqkv, s.Hidden, false, a)); err != nil {
				return nil, err
			}
		}
		// its weights as bf16 rows, for a prefill product run by cuBLASLt
		if _, dequant := BLASOperands(t); dequant {
			if err := add(DequantBF16(t, nqkv, s.Hidden)); err != nil {
				return nil, err
			}
		}
		// the decode products lowering runs untuned: repacked arms and fused prologues
		var plain, fused []GEMVArm
		switch {
		case Repackable(t):
			plain = []GEMVArm{DefaultRepackArm, DefaultXQOneArm, DefaultXQBatchArm, DefaultXQGlobalOneArm, DefaultXQGlobalBatchArm, DefaultXQMMAPipeArm}
			if HalfProduct(t, s.Hidden) {
				plain = append(plain, DefaultXQHalfArm) // the f16 large arm
			}
			fused = []GEMVArm{DefaultXQOneArm, DefaultXQBatchArm}
			// V of a fused QKV row whose parts differ in type, after XQuant
			if err := add(GEMVInto(t, s.HeadsKV*s.HeadDim, s.Hidden, false, DefaultXQGlobalBatchArm, Prologue{}, nqkv)); err != nil {
				return nil, err
			}
		case UntunedPrologues(t):
			fused = []GEMVArm{DefaultGEMVArm}
		}
		for _, a := range plain {
			if err := add(GEMV(t, nqkv, s.Hidden, false, FitXQ(a, s.Hidden))); err != nil {
				return nil, err
			}
		}
		for _, a := range fused {
			if err := add(GEMVNorm(t, nqkv, s.Hidden, false, FitXQ(a, s.Hidden), s.Eps)); err != nil {
				return nil, err
			}
			// V of a fused QKV row whose parts differ in type
			if err := add(GEMVInto(t, s.HeadsKV*s.HeadDim, s.Hidden, false, FitXQ(a, s.Hidden), Prologue{Kind: ProNorm, Eps: s.Eps}, nqkv)); err != nil {
				return nil, err
			}
			if checkRow(t, s.FFN) == nil && s.FFN%8 == 0 {
				if err := add(GEMVSwiGLU(t, s.Hidden, s.FFN, true, FitXQ(a, s.FFN))); err != nil {
					return nil, err
				}
			}
		}
	}
	if s.Window > 0 {
		gk, err := GemmaKernels(s)
		if err != nil {
			return nil, err
		}
		ks = append(ks, gk...)
	}
	if s.Experts > 0 {
		moe, err := MoEKernels(s, types)
		if err != nil {
			return nil, err
		}
		ks = append(ks, moe...)
	}
	return ks, nil
}
