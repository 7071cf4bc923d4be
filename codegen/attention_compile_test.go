package codegen_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestCompileDecodeAttentionTilings compiles the decode attention kernels
// for shapes covering every tiling of the partial kernel (load widths 16, 8
// and 4 bytes, 4 to 32 lanes per key, several loads per lane, one or several
// passes over the query heads of a group) and every live mode, in the
// partial/combine pair and the fused kernel, and each with its combine
// in the partial kernel (DecodeAttentionFused).
func TestCompileDecodeAttentionTilings(t *testing.T) {
	nv := nvrtcOrSkip(t)
	var ks []*codegen.Kernel
	for _, c := range []struct {
		heads, kv, hd int
		cache         dtype.Type
		arm           codegen.DecodeArm
	}{
		{32, 32, 128, dtype.F16, codegen.DecodeArm{Threads: 128, Chunk: 64}},
		{32, 8, 128, dtype.F16, codegen.DecodeArm{Threads: 128, Chunk: 64, Live: 2}},
		{32, 4, 128, dtype.BF16, codegen.DecodeArm{Threads: 256, Chunk: 512, Live: 1}},
		{32, 2, 128, dtype.F16, codegen.DecodeArm{Threads: 64, Chunk: 64}},
		{28, 4, 128, dtype.F32, codegen.DecodeArm{Threads: 128, Chunk: 128}},
		{32, 32, 96, dtype.F16, codegen.DecodeArm{Threads: 128, Chunk: 256, Live: 2}},
		{16, 16, 256, dtype.F32, codegen.DecodeArm{Threads: 256, Chunk: 64}},
		{16, 2, 256, dtype.BF16, codegen.DecodeArm{Threads: 1024, Chunk: 1024}},
		{8, 8, 32, dtype.F32, codegen.DecodeArm{Threads: 32, Chunk: 32}},
		{12, 2, 224, dtype.F16, codegen.DecodeArm{Threads: 128, Chunk: 64}},
		// the first step read before the dependency wait: 16, 8 and 4-byte loads, several passes
		{32, 32, 128, dtype.F16, codegen.DecodeArm{Threads: 256, Chunk: 128, Live: 2, Preload: true}},
		{32, 8, 128, dtype.BF16, codegen.DecodeArm{Threads: 128, Chunk: 64, Live: 2, Preload: true}},
		{16, 2, 256, dtype.F32, codegen.DecodeArm{Threads: 256, Chunk: 64, Preload: true}},
		{12, 2, 224, dtype.F16, codegen.DecodeArm{Threads: 128, Chunk: 64, Live: 1, Preload: true}},
		// splits sized by the card's multiprocessors
		{32, 32, 128, dtype.F16, codegen.DecodeArm{Threads: 256, Chunk: 128, Live: 3, SMs: 132}},
		{32, 8, 64, dtype.BF16, codegen.DecodeArm{Threads: 128, Chunk: 256, Live: 3, SMs: 170, Preload: true}},
		// the 8-bit cache: 16-byte loads of 8 (64-element heads) to 16 lanes a key, three loads a lane
		// (96), several passes over a group, the first step before the wait
		{32, 32, 128, codegen.CacheQ8, codegen.DecodeArm{Threads: 128, Chunk: 64}},
		{32, 8, 128, codegen.CacheQ8, codegen.DecodeArm{Threads: 128, Chunk: 64, Live: 2, Preload: true}},
		{32, 8, 64, codegen.CacheQ8, codegen.DecodeArm{Threads: 128, Chunk: 256, Live: 3, SMs: 132, Preload: true}},
		// Live 4: a block's loop over the live splits, f16 and 8-bit caches, one and several passes
		{32, 32, 128, dtype.F16, codegen.DecodeArm{Threads: 256, Chunk: 128, Live: 4, SMs: 132}},
		{32, 32, 128, dtype.F16, codegen.DecodeArm{Threads: 256, Chunk: 128, Live: 4, SMs: 132, Preload: true}},
		{32, 8, 128, codegen.CacheQ8, codegen.DecodeArm{Threads: 128, Chunk: 64, Live: 4, SMs: 132, Preload: true}},
		{32, 8, 128, codegen.CacheQ8, codegen.DecodeArm{Threads: 128, Chunk: 64, Live: 4, SMs: 132}},
		{40, 8, 128, dtype.BF16, codegen.DecodeArm{Threads: 64, Chunk: 256, Live: 4, SMs: 16}},
		// 32-key splits of a MoE model's 4 kv heads: more warps than a split's key steps
		{32, 4, 128, dtype.F16, codegen.DecodeArm{Threads: 256, Chunk: 32, Live: 4, SMs: 132, Preload: true}},
		{32, 32, 96, codegen.CacheQ8, codegen.DecodeArm{Threads: 128, Chunk: 256, Live: 2}},
		{16, 2, 256, codegen.CacheQ8, codegen.DecodeArm{Threads: 256, Chunk: 64, Preload: true}},
	} {
		s := codegen.AttnShape{Heads: c.heads, HeadsKV: c.kv, HeadDim: c.hd, QStride: (c.heads + 2*c.kv) * c.hd, Cache: c.cache}
		p, cb, err := codegen.DecodeAttention(s, c.arm)
		require.NoError(t, err)
		ks = append(ks, p, cb)
		// the combine in the partial kernel: float rows, and int8 ones where heads hold groups of 32
		f := c.arm
		f.Fuse = true
		k, err := codegen.DecodeAttentionFused(s, f, false)
		require.NoError(t, err)
		ks = append(ks, k)
		if c.hd%32 == 0 {
			k, err := codegen.DecodeAttentionFused(s, f, true)
			require.NoError(t, err)
			ks = append(ks, k)
		}
	}
	compileAll(t, nv, "compute_90", ks)
}
