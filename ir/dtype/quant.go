package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// quantizers holds, per type Quantize supports, the function that encodes
// whole blocks of src into dst (sized by the caller).
//
// The block encoders follow GGUF tools' reference quantisers (no importance
// matrix) operation for operation in float32, with every product rounded
// before it is added (no fused multiply-add), so the bytes match what those
// tools write. Q4_0 and Q5_0 evaluate x·(1/d)+offset in float64 before
// truncating, as gguf-py does to match llama.cpp's builds.
var quantizers = map[Type]func(src []float32, dst []byte){
	F32:    quantF32,
	F16:    quantF16,
	BF16:   quantBF16,
	Q4_0:   quantQ4_0,
	Q4_1:   quantQ4_1,
	Q5_0:   quantQ5_0,
	Q5_1:   quantQ5_1,
	Q8_0:   quantQ8_0,
	Q8_1:   quantQ8_1,
	Q2_K:   quantQ2K,
	Q3_K:   quantQ3K,
	Q4_K:   quantQ4K,
	Q5_K:   quantQ5K,
	Q6_K:   quantQ6K,
	Q8_K:   quantQ8K,
	IQ4_NL: quantIQ4NL,
	IQ4_XS: quantIQ4XS,
}

// Quantize encodes src as type t. len(src) must be a whole number of blocks
// (ErrLength otherwise); a type without an encoder gives ErrType.
func Quantize(t Type, src []float32) ([]byte, error) {
	f, ok := quantizers[t]
	if !ok {
		return nil, fmt.Errorf("%w: cannot quantize to %v", ErrType, t)
	}
	n, err := t.RowBytes(len(src))
	if err != nil {
		return nil, err
	}
	dst := make([]byte, n)
	f(src, dst)
	return dst, nil
}

// nearestInt rounds f to the nearest integer, ties to even, the way the
// reference quantisers do (valid for |f| < 2^22).
func nearestInt(f float32) int {
	v := f + 12582912
	return int(int32(math.Float32bits(v)&0x7fffff) - 0x400000)
}

// absMax returns the element of largest magnitude (the first one on ties)
// and that magnitude.
func absMax(x []float32) (mx, amax float32) {
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	return mx, amax
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func quantF32(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func quantF16(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
	}
}

func quantBF16(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
	}
}

func quantQ8_0(src []float32, dst []byte) {
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[34*b:34*b+34]
		_, amax := absMax(x)
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(blk, d)
		for j, v := range x {
			blk[2+j] = byte(int8(math.Round(float64(v * id))))
		}
	}
}

func quantQ8_1(src []float32, dst []byte) {
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[36*b:36*b+36]
		_, amax := absMax(x)
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(blk, d)
		sum := 0
		for j, v := range x {
			q := int(math.Round(float64(v * id)))
			blk[4+j] = byte(int8(q))
			sum += q
		}
		putF16(blk[2:], float32(sum)*d)
	}
}

// quantQ4_0 is the Q4_0 reference: the extreme element maps to 0 and d
// carries its sign.
func quantQ4_0(src []float32, dst []byte) {
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[18*b:18*b+18]
		mx, _ := absMax(x)
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(blk, d)
		for j := range 16 {
			q0 := min(15, truncInt(float64(x[j])*float64(id)+8.5))
			q1 := min(15, truncInt(float64(x[j+16])*float64(id)+8.5))
			blk[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func quantQ5_0(src []float32, dst []byte) {
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[22*b:22*b+22]
		mx, _ := absMax(x)
		d := mx / -16
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(blk, d)
		var qh uint32
		for j := range 16 {
			q0 := min(31, truncInt(float64(x[j])*float64(id)+16.5))
			q1 := min(31, truncInt(float64(x[j+16])*float64(id)+16.5))
			blk[6+j] = byte(q0&15) | byte(q1&15)<<4
			qh |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
		}
		binary.LittleEndian.PutUint32(blk[2:], qh)
	}
}

// minMax returns the smallest and largest element of x.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = float32(math.MaxFloat32), -float32(math.MaxFloat32)
	for _, v := range x {
		lo = min(lo, v)
		hi = max(hi, v)
	}
	return lo, hi
}

func quantQ4_1(src []float32, dst []byte) {
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[20*b:20*b+20]
		lo, hi := minMax(x)
		d := (hi - lo) / 15
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(blk, d)
		putF16(blk[2:], lo)
		for j := range 16 {
			q0 := min(15, truncInt(float64(float32((x[j]-lo)*id)+0.5)))
			q1 := min(15, truncInt(float64(float32((x[j+16]-lo)*id)+0.5)))
			blk[4+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func quantQ5_1(src []float32, dst []byte) {
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[24*b:24*b+24]
		lo, hi := minMax(x)
		d := (hi - lo) / 31
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(blk, d)
		putF16(blk[2:], lo)
		var qh uint32
		for j := range 16 {
			q0 := min(31, truncInt(float64(float32((x[j]-lo)*id)+0.5)))
			q1 := min(31, truncInt(float64(float32((x[j+16]-lo)*id)+0.5)))
			blk[8+j] = byte(q0&15) | byte(q1&15)<<4
			qh |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
		}
		binary.LittleEndian.PutUint32(blk[4:], qh)
	}
}

// truncInt truncates v toward zero, clamping to 0 below (including NaN), as
// the quantisers' conversions to small unsigned codes need.
func truncInt(v float64) int {
	if !(v > 0) {
		return 0
	}
	if v > 255 {
		return 255
	}
	return int(v)
}

func quantQ8K(src []float32, dst []byte) {
	for b := 0; b < len(src)/256; b++ {
		x, blk := src[256*b:256*b+256], dst[292*b:292*b+292]
		mx, amax := absMax(x)
		if amax == 0 {
			clear(blk)
			continue
		}
		iscale := -127 / mx
		for j, v := range x {
			blk[4+j] = byte(int8(min(127, nearestInt(iscale*v))))
		}
		for j := range 16 {
			sum := 0
			for _, q := range blk[4+16*j : 4+16*j+16] {
				sum += int(int8(q))
			}
			binary.LittleEndian.PutUint16(blk[260+2*j:], uint16(int16(sum)))
		}
		binary.LittleEndian.PutUint32(blk, math.Float32bits(1/iscale))
	}
}
