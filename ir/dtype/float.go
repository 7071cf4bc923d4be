package dtype

import "math"

// F16ToF32 converts an IEEE 754 binary16 value (given as its bits) to
// float32. The conversion is exact: subnormals, infinities and NaN payloads
// carry over.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise the mantissa into an f32 normal number.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 converts f to IEEE 754 binary16 bits, rounding to nearest with
// ties to even. Values beyond the f16 range become infinities, tiny values
// become subnormals or zero, and a NaN stays a quiet NaN that keeps the top
// of its payload.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased f16 exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below half the smallest subnormal: ±0
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++ // may carry into the smallest normal, which is the right encoding
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is correct, up to infinity
	}
	return sign | uint16(r)
}

// BF16ToF32 converts a bfloat16 value (the top half of an f32) to float32.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts f to bfloat16 bits, rounding to nearest with ties to
// even. A NaN keeps its top half with the quiet bit (0x40) set.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F8E4M3ToF32 converts an FP8 E4M3 value (OCP "fn" variant, as in
// safetensors F8_E4M3) to float32. The format has exponent bias 7, no
// infinities, and S.1111.111 as its only NaN; the largest finite value is 448.
func F8E4M3ToF32(v uint8) float32 {
	sign := uint32(v&0x80) << 24
	exp := uint32(v>>3) & 0xf
	mant := uint32(v) & 7
	switch {
	case exp == 0xf && mant == 7:
		return math.Float32frombits(sign | 0x7fc00000)
	case exp == 0:
		// Subnormal: mant/8 · 2^-6, exact in float32.
		f := float32(mant) * (1.0 / 512)
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-7)<<23 | mant<<20)
}

// f16Table maps every f16 bit pattern to its float32 value; the hot loops use
// it instead of the branchy conversion.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return &t
}()

// f8Table maps every FP8 E4M3 bit pattern to its float32 value.
var f8Table = func() *[256]float32 {
	var t [256]float32
	for i := range t {
		t[i] = F8E4M3ToF32(uint8(i))
	}
	return &t
}()

// f16At reads the little-endian f16 at b[0:2] as float32.
func f16At(b []byte) float32 { return f16Table[uint16(b[0])|uint16(b[1])<<8] }

// putF16 stores f as a little-endian f16 at b[0:2].
func putF16(b []byte, f float32) {
	h := F32ToF16(f)
	b[0], b[1] = byte(h), byte(h>>8)
}
