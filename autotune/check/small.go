package check

import (
	"strings"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// SmallBatchTokens is the batch gemm_small cases run at when Sizes leaves
// SmallTokens zero.
const SmallBatchTokens = 16

// GemmSmall is the small-batch tensor-core product (family "gemm_small")
// of m tokens with n weight rows of k elements of type t, checked against
// RefMatMul with bf16 rounding (the kernel rounds weights and activations
// to bf16). use names the product for display.
func GemmSmall(shape, use string, t dtype.Type, n, k, m int, residual bool, seed uint64) *Case {
	c := Product(shape, "mma", use, t, n, k, m, residual, seed) // same inputs and bf16 reference
	c.Family, c.Label, c.Class = "gemm_small", "gemm_small/"+use, codegen.GemmSmallClass(t, n, k, residual)
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.GemmSmall(t, n, k, residual, codegen.GemmSmallArmOf(arm)))
	}
	return c
}

// DecodeLive is split-KV decode attention with a live-length arm (family
// "attn_decode_live"): splits cover capacity keys, as lowering launches
// them, while the sequences hold lens keys.
func DecodeLive(shape string, as codegen.AttnShape, lens []int32, capacity int, seed uint64) *Case {
	c := Decode(shape, as, lens, seed)
	c.Family, c.Label = "attn_decode_live", "attn_decode_live"
	c.DType = strings.ToLower(as.Cache.String()) + " cache"
	c.capacity = capacity
	return c
}

// DecodeLiveXQ is DecodeLive with the combine that writes int8 rows for
// the output projection (DecodeXQ's), in the live arms' space.
func DecodeLiveXQ(shape string, as codegen.AttnShape, lens []int32, capacity int, seed uint64) *Case {
	c := DecodeXQ(shape, as, lens, seed)
	c.Family, c.Label = "attn_decode_live", "attn_decode_live+xq"
	c.capacity = capacity
	return c
}

// withFusedArms adds to decode case c the arms that run the combine in
// the partial kernel (codegen.DecodeArm.Fuse): the default's and Live 4's
// 32-key splits, each with its last blocks combining.
func withFusedArms(c *Case) *Case {
	for _, a := range []codegen.DecodeArm{codegen.DefaultDecodeLiveArm, {Threads: 256, Chunk: 32, Live: 4}} {
		a.Fuse = true
		c.ExtraArms = append(c.ExtraArms, a.Point())
	}
	return c
}

// decodeLiveAs is DecodeLive with each arm mapped as a class that is
// batch invariant (invariant true) or not lowers it.
func decodeLiveAs(shape string, as codegen.AttnShape, lens []int32, capacity int, invariant bool, seed uint64) *Case {
	c := DecodeLive(shape, as, lens, capacity, seed)
	if !invariant {
		return c
	}
	return withDecodeArm(c, as, func(a *codegen.DecodeArm) { *a = a.Invariant(true) })
}

// DecodePreload is DecodeLive with codegen.DecodeArm.Preload: the partial
// kernel reads its first step's keys and values before its dependency
// wait and the newest row again after it. With no kernel before it here,
// this checks the arithmetic of the preloaded step and of the reload (a
// one-key sequence and one of 20 keys hold the newest row in their first
// step); gpu-parity checks it under a kernel that writes that row.
func DecodePreload(shape string, as codegen.AttnShape, lens []int32, capacity int, seed uint64) *Case {
	c := DecodeLive(shape, as, lens, capacity, seed)
	c.Label, c.Class = "attn_decode_live+preload", c.Class+"_preload"
	return withDecodeArm(c, as, func(a *codegen.DecodeArm) { a.Preload = a.Live != 4 }) // as lowering: Live 4 never preloads
}

// DecodeLive2 is DecodeLive with codegen.DecodeArm Live 2, the decode
// attention of the batch-invariant configuration (its splits depend on the
// capacity and a sequence's own length, never on the step's width; the
// default's Live 3 sizes them by the card and the batch): sequences of
// 1100, 333, 1 and 20 keys against the capacity's splits.
func DecodeLive2(shape string, as codegen.AttnShape, lens []int32, capacity int, seed uint64) *Case {
	c := DecodeLive(shape, as, lens, capacity, seed)
	c.Label, c.Class = "attn_decode_live2", c.Class+"_live2"
	return withDecodeArm(c, as, func(a *codegen.DecodeArm) { a.Live = 2 })
}

// DecodeLive4 is DecodeLive with codegen.DecodeArm Live 4 (no Preload):
// splits of a sequence's own length launched as Live 3 launches them, a
// block taking several in turn (five sequences from 1 to 4,096 keys: up to
// 32 live splits for the launched few).
func DecodeLive4(shape string, as codegen.AttnShape, lens []int32, capacity int, seed uint64) *Case {
	c := DecodeLive(shape, as, lens, capacity, seed)
	c.Label, c.Class = "attn_decode_live4", c.Class+"_live4"
	return withDecodeArm(c, as, func(a *codegen.DecodeArm) { a.Live, a.Preload, a.SMs = 4, false, 0 })
}

// withDecodeArm makes decode case c run the partial and combine pair of
// each arm as set changes it (the options lowering sets, not knobs).
func withDecodeArm(c *Case, as codegen.AttnShape, set func(*codegen.DecodeArm)) *Case {
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		a := codegen.DecodeArmOf(arm)
		set(&a)
		if a.SMs == 0 {
			a = a.OnCard(0) // as decodeCase: lowering sets the card's
		}
		return decodeKernels(as, a, false)
	}
	return c
}
