package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// RopeShape is the constant shape of the RoPE + KV-cache-write kernel.
type RopeShape struct {
	Heads, HeadsKV, HeadDim int
	RopeDim                 int        // rotated dimensions per head (≤ HeadDim, even)
	Half                    bool       // rotate (x[i], x[i+RopeDim/2]) (NeoX); else adjacent pairs
	Cache                   dtype.Type // KV cache type: F32, F16, BF16 or CacheQ8
}

// defines writes the shape's head counts, head size and rotated
// dimensions (HQ, HKV, HD, RD), as RopeKV and XQEnds.Rope use them.
func (s RopeShape) defines(w *Writer) {
	w.Linef("#define HQ %d", s.Heads)
	w.Linef("#define HKV %d", s.HeadsKV)
	w.Linef("#define HD %d", s.HeadDim)
	w.Linef("#define RD %d", s.RopeDim)
	cacheRowDefine(w, s.Cache)
}

// QKVStride is the floats per token of the fused QKV activation row:
// [q (Heads·HeadDim) | k (HeadsKV·HeadDim) | v (HeadsKV·HeadDim)].
func (s RopeShape) QKVStride() int { return (s.Heads + 2*s.HeadsKV) * s.HeadDim }

func (s RopeShape) validate() error {
	switch {
	case s.Heads <= 0 || s.HeadsKV <= 0 || s.Heads%s.HeadsKV != 0:
		return fmt.Errorf("%w: heads %d/%d", ErrUnsupported, s.Heads, s.HeadsKV)
	case s.HeadDim <= 0 || s.HeadDim%2 != 0 || s.RopeDim <= 0 || s.RopeDim%2 != 0 || s.RopeDim > s.HeadDim:
		return fmt.Errorf("%w: head dim %d, rope dim %d", ErrUnsupported, s.HeadDim, s.RopeDim)
	}
	return CheckCacheRow(s.Cache, s.HeadsKV, s.HeadDim)
}

// cacheStore returns the C expression storing float expression v into the
// cache array element dst (typed per cacheCType).
func cacheStore(t dtype.Type, dst, v string) string {
	switch t {
	case dtype.F16:
		return fmt.Sprintf("%s = f32_to_f16(%s);", dst, v)
	case dtype.BF16:
		return fmt.Sprintf("%s = f32_to_bf16(%s);", dst, v)
	}
	return fmt.Sprintf("%s = %s;", dst, v)
}

// cacheLoad returns the C expression reading cache element src as float.
func cacheLoad(t dtype.Type, src string) string {
	switch t {
	case dtype.F16:
		return "f16_to_f32(" + src + ")"
	case dtype.BF16:
		return "bf16_to_f32(" + src + ")"
	}
	return src
}

// cacheCType is the C element type of a cache of type t (bytes for the
// 8-bit cache, whose rows are int8 elements and then their scales).
func cacheCType(t dtype.Type) string {
	switch t {
	case dtype.F32:
		return "float"
	case CacheQ8:
		return "u8"
	}
	return "u16"
}

func cacheHelpers(t dtype.Type) []string {
	switch t {
	case dtype.F16:
		return []string{"f16"}
	case dtype.BF16:
		return []string{"bf16"}
	}
	return []string{"types"}
}
