package codegen

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// The KV cache holds, per layer, one row per (sequence slot, position):
// the HeadsKV·HeadDim keys (or values) of one token. Float caches (F32,
// F16, BF16) store the row's elements one after another. The 8-bit cache
// (CacheQ8) stores the row's elements as int8, then one float32 scale per
// 32 elements (a block, never straddling two heads): element e of the row
// is int8[e]·scale[e/32]. A row is KVW·9/8 bytes, so it stays 16-byte
// aligned where KVW is a multiple of 128. Each block is quantised on its
// own: scale = max|x|/127, q = round(x/scale) (ties to even), the
// rounding of llama.cpp's q8_0 with a float32 scale.

// CacheQ8 is the 8-bit KV cache type: int8 elements and a float32 scale
// for each block of 32 (its layout is memra's own, not GGUF's Q8_0
// blocks, whose type names it).
const CacheQ8 = dtype.Q8_0

// CacheBlock is the elements a scale of the 8-bit cache covers.
const CacheBlock = 32

// checkCache reports whether t is a KV cache type.
func checkCache(t dtype.Type) error {
	if t != dtype.F32 && t != dtype.F16 && t != dtype.BF16 && t != CacheQ8 {
		return fmt.Errorf("%w: KV cache type %v", ErrUnsupported, t)
	}
	return nil
}

// CheckCacheRow reports whether a cache of type t can hold rows of
// headsKV heads of headDim elements: the 8-bit cache needs whole blocks
// per head and 16-byte aligned rows.
func CheckCacheRow(t dtype.Type, headsKV, headDim int) error {
	if err := checkCache(t); err != nil {
		return err
	}
	if t == CacheQ8 && (headDim%CacheBlock != 0 || headsKV*headDim%128 != 0) {
		return fmt.Errorf("%w: an 8-bit KV cache needs heads of a multiple of 32 elements and rows of a multiple of 128 (%d heads of %d)",
			ErrUnsupported, headsKV, headDim)
	}
	return nil
}

// CacheRowBytes is the bytes of one cache row of kvw elements of type t.
func CacheRowBytes(t dtype.Type, kvw int) int {
	switch t {
	case dtype.F32:
		return 4 * kvw
	case CacheQ8:
		return kvw + 4*(kvw/CacheBlock)
	}
	return 2 * kvw
}

// cacheRowDefine writes CROW, the cache row stride in elements of the
// kernel's cache pointer type (bytes for the 8-bit cache).
func cacheRowDefine(w *Writer, t dtype.Type) {
	if t == CacheQ8 {
		w.Line("#define CROW (HKV * HD + HKV * HD / 8) // bytes of a cache row: int8 elements, then an f32 scale per 32")
		return
	}
	w.Line("#define CROW (HKV * HD) // cache elements of a row")
}

// quantBlock quantises one block of the 8-bit cache as the kernels do
// (the Go mirror of emitCacheQuant): scale max|x|/127, q = x·(127/max)
// rounded to the nearest even integer, all in float32.
func quantBlock(x []float32, q []int8) (scale float32) {
	amax := absMax(x)
	inv := float32(0)
	if amax > 0 {
		inv = 127 / amax
	}
	for i, v := range x {
		q[i] = int8(max(-127, min(127, math.RoundToEven(float64(v*inv)))))
	}
	return amax / 127
}

// absMax is max|x| (0 for no values).
func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

// EncodeCache returns rows of kvw values stored as a cache of type t.
func EncodeCache(t dtype.Type, kvw int, v []float32) ([]byte, error) {
	if err := checkCache(t); err != nil {
		return nil, err
	}
	if kvw <= 0 || len(v)%kvw != 0 {
		return nil, fmt.Errorf("%w: %d cache values in rows of %d", ErrUnsupported, len(v), kvw)
	}
	if t != CacheQ8 {
		return dtype.Quantize(t, v)
	}
	if kvw%CacheBlock != 0 {
		return nil, fmt.Errorf("%w: 8-bit cache rows of %d elements", ErrUnsupported, kvw)
	}
	rb := CacheRowBytes(t, kvw)
	out := make([]byte, len(v)/kvw*rb)
	q := make([]int8, CacheBlock)
	for r := range len(v) / kvw {
		row, dst := v[r*kvw:(r+1)*kvw], out[r*rb:(r+1)*rb]
		for b := range kvw / CacheBlock {
			s := quantBlock(row[b*CacheBlock:(b+1)*CacheBlock], q)
			for i, x := range q {
				dst[b*CacheBlock+i] = byte(x)
			}
			binary.LittleEndian.PutUint32(dst[kvw+4*b:], math.Float32bits(s))
		}
	}
	return out, nil
}

// DecodeCache returns the values of cache rows of kvw elements of type t.
func DecodeCache(t dtype.Type, kvw int, data []byte) ([]float32, error) {
	if err := checkCache(t); err != nil {
		return nil, err
	}
	rb := CacheRowBytes(t, kvw)
	if kvw <= 0 || len(data)%rb != 0 {
		return nil, fmt.Errorf("%w: %d cache bytes in rows of %d", ErrUnsupported, len(data), rb)
	}
	out := make([]float32, len(data)/rb*kvw)
	if t != CacheQ8 {
		if err := dtype.Dequantize(t, data, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	for r := range len(data) / rb {
		row := data[r*rb : (r+1)*rb]
		for e := range kvw {
			s := math.Float32frombits(binary.LittleEndian.Uint32(row[kvw+4*(e/CacheBlock):]))
			out[r*kvw+e] = float32(int8(row[e])) * s
		}
	}
	return out, nil
}

// roundCacheRow rounds a cache row's values (whole blocks for the 8-bit
// cache: a head's row) to what a cache of type t stores, in place.
func roundCacheRow(t dtype.Type, row []float32) {
	if t != CacheQ8 {
		for i, v := range row {
			row[i] = roundCache(t, v)
		}
		return
	}
	q := make([]int8, CacheBlock)
	for b := 0; b+CacheBlock <= len(row); b += CacheBlock {
		s := quantBlock(row[b:b+CacheBlock], q)
		for i, x := range q {
			row[b+i] = float32(x) * s
		}
	}
}

// emitCacheQuant writes the quantisation of one block of the 8-bit cache
// by a whole warp: lane l holds element l of the block in float x; it
// stores int8 q at u8 pointer expression dst + l and, from lane 0, the
// block's scale at float pointer expression sdst. quantBlock mirrors it.
func emitCacheQuant(w *Writer, x, dst, sdst string) {
	w.Linef("float amax = fabsf(%s);", x)
	w.Line("#pragma unroll")
	w.Block("for (int o = 16; o > 0; o >>= 1)", func() { w.Line("amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));") })
	w.Line("const float inv = amax > 0.f ? 127.f / amax : 0.f;")
	w.Linef("const int qv = max(-127, min(127, __float2int_rn(%s * inv)));", x)
	w.Linef("(%s)[threadIdx.x & 31] = (u8)(signed char)qv;", dst)
	w.If("(threadIdx.x & 31) == 0", func() { w.Linef("*(%s) = amax / 127.f;", sdst) })
}

// emitQ8Vec writes ld_vec for the 8-bit cache: the vec int8 elements of
// one raw load as floats (the integer value; the caller applies the
// block's scale). Each byte becomes 2^23 + 128 + x by a byte permute
// into the bits of 2^23 and one subtraction: no int-to-float conversion.
func emitQ8Vec(w *Writer, vec int) string {
	raw, words := map[int]string{16: "uint4", 8: "uint2", 4: "u32"}[vec], map[int][]string{16: {"r.x", "r.y", "r.z", "r.w"}, 8: {"r.x", "r.y"}, 4: {"r"}}[vec]
	w.Comment("The %d int8 cache elements of one %d-byte load as floats (without their scale).", vec, vec)
	w.Emit(Func{Name: "ld_vec", Params: []Param{{raw, "r"}, {"float*", "v"}}, Body: func(w *Writer) {
		for i, x := range words {
			w.Linef("const u32 w%d = %s ^ 0x80808080u; // x + 128 in each byte", i, x)
			for k := range 4 {
				w.Linef("v[%d] = __int_as_float(__byte_perm(w%d, 0x4b000000u, 0x%x)) - 8388736.f;", 4*i+k, i, 0x7440+k)
			}
		}
	}})
	return raw
}
