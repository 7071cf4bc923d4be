package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// Shape classes name a kernel's identity without its arm: the constants a
// family specialises on. The autotuner records one tunedb entry per
// (family, class) and lowering looks the same pair up, so both compute the
// class through these functions and nowhere else.

// EmbeddingClass is the class of an embedding lookup of rows of dim
// elements of type t, e.g. "q4_k_d4096".
func EmbeddingClass(t dtype.Type, dim int) string { return fmt.Sprintf("%s_d%d", typeTag(t), dim) }

// RMSNormClass is the class of RMSNormAdd over rows of dim, e.g. "d4096"
// or, with the fused residual add, "d4096_add".
func RMSNormClass(dim int, add bool) string {
	if add {
		return fmt.Sprintf("d%d_add", dim)
	}
	return fmt.Sprintf("d%d", dim)
}

// RopeKVClass is the class of RopeKV at s, e.g. "inter_h32_8_d128_r128_f16".
func RopeKVClass(s RopeShape) string {
	style := "inter"
	if s.Half {
		style = "half"
	}
	return fmt.Sprintf("%s_h%d_%d_d%d_r%d_%s", style, s.Heads, s.HeadsKV, s.HeadDim, s.RopeDim, typeTag(s.Cache))
}

// SwiGLUClass is the class of SwiGLU over ffn columns, e.g. "f14336".
func SwiGLUClass(ffn int) string { return fmt.Sprintf("f%d", ffn) }

// ArgmaxClass is the class of Argmax over vocab logits, e.g. "v128256".
func ArgmaxClass(vocab int) string { return fmt.Sprintf("v%d", vocab) }

// AttnClass is the class of the decode and prefill attention families at
// s, e.g. "h32_8_d128_f16". The query stride and the score scale are not
// part of it: they change no tuning decision.
func AttnClass(s AttnShape) string {
	return fmt.Sprintf("h%d_%d_d%d_%s", s.Heads, s.HeadsKV, s.HeadDim, typeTag(s.Cache))
}

// ProductClass is the class of the GEMV and MMA products of n weight rows
// of k elements of type t, e.g. "q4_k_n6144_k4096", with "_res" when the
// product adds into its output.
func ProductClass(t dtype.Type, n, k int, residual bool) string {
	c := fmt.Sprintf("%s_n%d_k%d", typeTag(t), n, k)
	if residual {
		c += "_res"
	}
	return c
}

// GemmSmallClass is the class of the small-batch product GemmSmall: the
// same identity as ProductClass (e.g. "q4_k_n6144_k4096_res"), recorded
// under its own family "gemm_small".
func GemmSmallClass(t dtype.Type, n, k int, residual bool) string {
	return ProductClass(t, n, k, residual)
}

// ArmPicker chooses the arm of one kernel from its family and shape class
// (a tunedb lookup, typically). ok false leaves the kernel on the arm of
// LowerOptions.Arms (the family default when that is zero).
type ArmPicker func(family, class string) (arm Point, ok bool)

// picked returns the point pick chooses for (family, class) when it is a
// valid arm of the family's space.
func (l *lowerer) picked(family, class string) (Point, bool) {
	if l.o.Pick == nil {
		return nil, false
	}
	p, ok := l.o.Pick(family, class)
	if !ok {
		return nil, false
	}
	sp, err := SpaceByName(family)
	if err != nil || sp.Valid(p) != nil {
		return nil, false
	}
	return p, true
}

// blockArm is the BlockArm of a tunable block family's kernel of class.
func (l *lowerer) blockArm(family, class string) BlockArm {
	if p, ok := l.picked(family, class); ok {
		return BlockArmOf(p)
	}
	return l.arms.Block
}

// gemvArm, mmaArm, decodeArm and prefillArm return the arm of their
// family's kernel of class.
// gemvArm is the GEMV arm of a product with weights of type t: the tunedb's
// pick, else Arms.GEMVQuant for repacked types and Arms.GEMV for others.
// A type without a repacked layout (Q4_1, Q5_0, Q5_1, Q5_K, and the
// low-bit Q2_K, Q3_K, IQ4_NL and IQ4_XS) always gets the float GEMV on the
// file's layout: a repacked arm is replaced by its geometry on layout 0.
// The exact configuration (PrefillGEMV) never takes an int8-activation arm.
func (l *lowerer) gemvArm(class string, t dtype.Type, k int) GEMVArm {
	arm := l.arms.GEMV
	if p, ok := l.picked("gemv", class); ok {
		arm = GEMVArmOf(p)
	} else if Repackable(t) {
		arm = l.arms.GEMVQuant
	}
	if arm.XQ != 0 && l.o.PrefillGEMV {
		arm = l.arms.GEMV
		if arm.XQ != 0 {
			arm = DefaultGEMVArm
		}
	}
	if arm.Layout == 1 && !Repackable(t) {
		arm = GEMVArm{Threads: arm.Threads, RowsPerBlock: arm.RowsPerBlock, Unroll: arm.Unroll, SharedX: arm.SharedX}
	}
	return FitXQ(arm, k)
}

func (l *lowerer) mmaArm(class string, k int) MMAArm {
	if p, ok := l.picked("mma", class); ok {
		return MMAArmOf(p).ForK(k)
	}
	return l.arms.MMA.ForK(k)
}

// decodeArm looks a live-length arm (Arms.Decode.Live ≠ 0) up in the
// "attn_decode_live" space, so a tuned fixed-split arm never replaces it.
func (l *lowerer) decodeArm(class string) DecodeArm {
	family := "attn_decode"
	if l.arms.Decode.Live != 0 {
		family = "attn_decode_live"
	}
	arm := l.arms.Decode
	if p, ok := l.picked(family, class); ok {
		arm = DecodeArmOf(p)
	}
	if arm.Live == 1 && ceilDiv(l.o.Context, arm.Chunk) > MaxLiveSplits {
		// fixed chunks over a long capacity launch blocks that find no key
		// by the thousand: spread the live keys instead (DecodeArm.Splits)
		arm.Live = 2
	}
	arm = arm.Invariant(l.o.BatchInvariant).OnCard(l.o.Multiprocessors)
	arm.Preload = l.o.DecodePreload
	if arm.Preload {
		arm.Newest = min(max(1, l.o.MaxSeqs), MaxSharedRows)
	}
	return arm
}

// gemmSmallArm returns the arm of the small-batch product of class.
func (l *lowerer) gemmSmallArm(class string) GemmSmallArm {
	if p, ok := l.picked("gemm_small", class); ok {
		return GemmSmallArmOf(p)
	}
	return l.arms.GemmSmall
}

// flashArm is the tensor-core prefill attention's arm for s: the tunedb's
// pick of its class where that arm has a kernel for s, else
// DefaultFlashArm (FlashArmFor s).
func (l *lowerer) flashArm(s AttnShape) FlashArm {
	if p, ok := l.picked("attn_flash", AttnClass(s)); ok {
		if a := FlashArmOf(p); FlashArmFor(s, a) == a {
			return a
		}
	}
	return FlashArmFor(s, DefaultFlashArm)
}

func (l *lowerer) prefillArm(class string) PrefillArm {
	if p, ok := l.picked("attn_prefill", class); ok {
		return PrefillArmOf(p)
	}
	return l.arms.Prefill
}
