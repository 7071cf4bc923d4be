package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dot returns the dot product of row, one stored row of type t holding
// len(x) elements, with x. It decodes each block's scales once, accumulates
// in float32 and allocates nothing; it is the CPU reference executor's inner
// loop.
//
// The caller guarantees that t is one Dequantize supports and that row holds
// exactly len(x) elements (check once with RowBytes when loading); Dot
// panics otherwise, as that is a broken invariant of the caller.
func Dot(t Type, row []byte, x []float32) float32 {
	if want, err := t.RowBytes(len(x)); err != nil || want != len(row) {
		panic(fmt.Sprintf("BUG: dtype.Dot: %d bytes of %v for %d elements", len(row), t, len(x)))
	}
	switch t {
	case F32:
		return dotF32(row, x)
	case F16:
		return dotF16(row, x)
	case BF16:
		return dotBF16(row, x)
	case F8E4M3:
		return dotF8E4M3(row, x)
	case Q4_0:
		return dotQ4_0(row, x)
	case Q4_1:
		return dotQ4_1(row, x)
	case Q5_0:
		return dotQ5_0Fast(row, x)
	case Q5_1:
		return dotQ5_1(row, x)
	case Q8_0:
		return dotQ8_0Fast(row, x)
	case Q8_1:
		return dotQ8_1(row, x)
	case Q2_K:
		return dotQ2K(row, x)
	case Q3_K:
		return dotQ3K(row, x)
	case Q4_K:
		return dotQ4KFast(row, x)
	case Q5_K:
		return dotQ5K(row, x)
	case Q6_K:
		return dotQ6KFast(row, x)
	case Q8_K:
		return dotQ8K(row, x)
	case IQ4_NL:
		return dotIQ4NL(row, x)
	case IQ4_XS:
		return dotIQ4XS(row, x)
	}
	panic("BUG: dtype.Dot: no dot product for " + t.String())
}

func dotF32(row []byte, x []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(x); i += 8 {
		b := row[4*i : 4*i+32]
		xs := x[i : i+8]
		s0 += math.Float32frombits(binary.LittleEndian.Uint32(b[0:])) * xs[0]
		s1 += math.Float32frombits(binary.LittleEndian.Uint32(b[4:])) * xs[1]
		s2 += math.Float32frombits(binary.LittleEndian.Uint32(b[8:])) * xs[2]
		s3 += math.Float32frombits(binary.LittleEndian.Uint32(b[12:])) * xs[3]
		s4 += math.Float32frombits(binary.LittleEndian.Uint32(b[16:])) * xs[4]
		s5 += math.Float32frombits(binary.LittleEndian.Uint32(b[20:])) * xs[5]
		s6 += math.Float32frombits(binary.LittleEndian.Uint32(b[24:])) * xs[6]
		s7 += math.Float32frombits(binary.LittleEndian.Uint32(b[28:])) * xs[7]
	}
	for ; i < len(x); i++ {
		s0 += math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:])) * x[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func dotF16(row []byte, x []float32) float32 {
	tab := f16Table
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(x); i += 8 {
		b := row[2*i : 2*i+16]
		xs := x[i : i+8]
		s0 += tab[binary.LittleEndian.Uint16(b[0:])] * xs[0]
		s1 += tab[binary.LittleEndian.Uint16(b[2:])] * xs[1]
		s2 += tab[binary.LittleEndian.Uint16(b[4:])] * xs[2]
		s3 += tab[binary.LittleEndian.Uint16(b[6:])] * xs[3]
		s4 += tab[binary.LittleEndian.Uint16(b[8:])] * xs[4]
		s5 += tab[binary.LittleEndian.Uint16(b[10:])] * xs[5]
		s6 += tab[binary.LittleEndian.Uint16(b[12:])] * xs[6]
		s7 += tab[binary.LittleEndian.Uint16(b[14:])] * xs[7]
	}
	for ; i < len(x); i++ {
		s0 += tab[binary.LittleEndian.Uint16(row[2*i:])] * x[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// bf16At reads the little-endian bfloat16 at b[0:2] as float32.
func bf16At(b []byte) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16)
}

func dotBF16(row []byte, x []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(x); i += 8 {
		b := row[2*i : 2*i+16]
		xs := x[i : i+8]
		s0 += bf16At(b[0:]) * xs[0]
		s1 += bf16At(b[2:]) * xs[1]
		s2 += bf16At(b[4:]) * xs[2]
		s3 += bf16At(b[6:]) * xs[3]
		s4 += bf16At(b[8:]) * xs[4]
		s5 += bf16At(b[10:]) * xs[5]
		s6 += bf16At(b[12:]) * xs[6]
		s7 += bf16At(b[14:]) * xs[7]
	}
	for ; i < len(x); i++ {
		s0 += bf16At(row[2*i:]) * x[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func dotF8E4M3(row []byte, x []float32) float32 {
	tab := f8Table
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		s0 += tab[row[i]] * x[i]
		s1 += tab[row[i+1]] * x[i+1]
	}
	for ; i < len(x); i++ {
		s0 += tab[row[i]] * x[i]
	}
	return s0 + s1
}

func dotQ8_0(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/32; b++ {
		blk := row[34*b : 34*b+34]
		q := blk[2:34]
		xs := x[32*b : 32*b+32]
		var s0, s1, s2, s3, s4, s5, s6, s7 float32
		for j := 0; j < 32; j += 8 {
			s0 += i8f[q[j]] * xs[j]
			s1 += i8f[q[j+1]] * xs[j+1]
			s2 += i8f[q[j+2]] * xs[j+2]
			s3 += i8f[q[j+3]] * xs[j+3]
			s4 += i8f[q[j+4]] * xs[j+4]
			s5 += i8f[q[j+5]] * xs[j+5]
			s6 += i8f[q[j+6]] * xs[j+6]
			s7 += i8f[q[j+7]] * xs[j+7]
		}
		acc += f16At(blk) * (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))
	}
	return acc
}

func dotQ8_1(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/32; b++ {
		blk := row[36*b : 36*b+36]
		q := blk[4:36]
		xs := x[32*b : 32*b+32]
		var s0, s1 float32
		for j := 0; j < 32; j += 2 {
			s0 += float32(int8(q[j])) * xs[j]
			s1 += float32(int8(q[j+1])) * xs[j+1]
		}
		acc += f16At(blk) * (s0 + s1)
	}
	return acc
}

func dotQ4_0(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/32; b++ {
		blk := row[18*b : 18*b+18]
		q := blk[2:18]
		lo := x[32*b : 32*b+16]
		hi := x[32*b+16 : 32*b+32]
		var s0, s1, s2, s3 float32
		for j := 0; j < 16; j += 2 {
			p0, p1 := &nibS8[q[j]], &nibS8[q[j+1]]
			s0 += p0[0] * lo[j]
			s1 += p0[1] * hi[j]
			s2 += p1[0] * lo[j+1]
			s3 += p1[1] * hi[j+1]
		}
		acc += f16At(blk) * ((s0 + s1) + (s2 + s3))
	}
	return acc
}

func dotQ4_1(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/32; b++ {
		blk := row[20*b : 20*b+20]
		q := blk[4:20]
		lo := x[32*b : 32*b+16]
		hi := x[32*b+16 : 32*b+32]
		var sq0, sq1, sx0, sx1 float32
		for j := range 16 {
			sq0 += float32(q[j]&15) * lo[j]
			sq1 += float32(q[j]>>4) * hi[j]
			sx0 += lo[j]
			sx1 += hi[j]
		}
		acc += f16At(blk)*(sq0+sq1) + f16At(blk[2:])*(sx0+sx1)
	}
	return acc
}

func dotQ5_0(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/32; b++ {
		blk := row[22*b : 22*b+22]
		qh := binary.LittleEndian.Uint32(blk[2:])
		q := blk[6:22]
		lo := x[32*b : 32*b+16]
		hi := x[32*b+16 : 32*b+32]
		var s0, s1 float32
		for j := range 16 {
			s0 += float32(int(q[j]&15)|int(qh>>j&1)<<4-16) * lo[j]
			s1 += float32(int(q[j]>>4)|int(qh>>(j+16)&1)<<4-16) * hi[j]
		}
		acc += f16At(blk) * (s0 + s1)
	}
	return acc
}

func dotQ5_1(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/32; b++ {
		blk := row[24*b : 24*b+24]
		qh := binary.LittleEndian.Uint32(blk[4:])
		q := blk[8:24]
		lo := x[32*b : 32*b+16]
		hi := x[32*b+16 : 32*b+32]
		var sq0, sq1, sx0, sx1 float32
		for j := range 16 {
			sq0 += float32(uint32(q[j]&15)|(qh>>j&1)<<4) * lo[j]
			sq1 += float32(uint32(q[j]>>4)|(qh>>(j+16)&1)<<4) * hi[j]
			sx0 += lo[j]
			sx1 += hi[j]
		}
		acc += f16At(blk)*(sq0+sq1) + f16At(blk[2:])*(sx0+sx1)
	}
	return acc
}

func dotIQ4NL(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/32; b++ {
		blk := row[18*b : 18*b+18]
		q := blk[2:18]
		lo := x[32*b : 32*b+16]
		hi := x[32*b+16 : 32*b+32]
		var s0, s1 float32
		for j := range 16 {
			s0 += float32(iq4Values[q[j]&15]) * lo[j]
			s1 += float32(iq4Values[q[j]>>4]) * hi[j]
		}
		acc += f16At(blk) * (s0 + s1)
	}
	return acc
}

func dotQ8K(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/256; b++ {
		blk := row[292*b : 292*b+292]
		q := blk[4:260]
		xs := x[256*b : 256*b+256]
		var s0, s1, s2, s3 float32
		for j := 0; j < 256; j += 4 {
			s0 += float32(int8(q[j])) * xs[j]
			s1 += float32(int8(q[j+1])) * xs[j+1]
			s2 += float32(int8(q[j+2])) * xs[j+2]
			s3 += float32(int8(q[j+3])) * xs[j+3]
		}
		acc += math.Float32frombits(binary.LittleEndian.Uint32(blk)) * ((s0 + s1) + (s2 + s3))
	}
	return acc
}
