package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// iq4Values is the non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
var iq4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// dequantizers holds, per type Dequantize supports, the function that
// decodes whole blocks. Each one assumes len(src) and len(dst) agree.
var dequantizers = map[Type]func(src []byte, dst []float32){
	F32:    dequantF32,
	F16:    dequantF16,
	BF16:   dequantBF16,
	F8E4M3: dequantF8E4M3,
	Q4_0:   dequantQ4_0,
	Q4_1:   dequantQ4_1,
	Q5_0:   dequantQ5_0,
	Q5_1:   dequantQ5_1,
	Q8_0:   dequantQ8_0,
	Q8_1:   dequantQ8_1,
	Q2_K:   dequantQ2K,
	Q3_K:   dequantQ3K,
	Q4_K:   dequantQ4K,
	Q5_K:   dequantQ5K,
	Q6_K:   dequantQ6K,
	Q8_K:   dequantQ8K,
	IQ4_NL: dequantIQ4NL,
	IQ4_XS: dequantIQ4XS,
}

// Dequantize decodes src, a run of whole blocks of type t, into dst, whose
// length is the element count. It returns an error wrapping ErrType for a
// type it cannot decode and ErrLength when the lengths disagree.
func Dequantize(t Type, src []byte, dst []float32) error {
	f, ok := dequantizers[t]
	if !ok {
		return fmt.Errorf("%w: cannot dequantize %v", ErrType, t)
	}
	if err := checkLengths(t, len(src), len(dst)); err != nil {
		return err
	}
	f(src, dst)
	return nil
}

// checkLengths reports whether n elements of t take exactly nbytes.
func checkLengths(t Type, nbytes, n int) error {
	want, err := t.RowBytes(n)
	if err != nil {
		return err
	}
	if want != nbytes {
		return fmt.Errorf("%w: %d elements of %v take %d bytes, got %d", ErrLength, n, t, want, nbytes)
	}
	return nil
}

// Elements returns the number of elements stored in nbytes of type t, or an
// error when t is unknown or nbytes is not a whole number of blocks.
func Elements(t Type, nbytes int) (int, error) {
	i, ok := table[t]
	if !ok {
		return 0, fmt.Errorf("%w: %v", ErrType, t)
	}
	if nbytes < 0 || nbytes%i.blockBytes != 0 {
		return 0, fmt.Errorf("%w: %d bytes is not a whole number of %v blocks (%d bytes)", ErrLength, nbytes, t, i.blockBytes)
	}
	return nbytes / i.blockBytes * i.blockElems, nil
}

func dequantF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = f16Table[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

func dequantBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func dequantF8E4M3(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = f8Table[src[i]]
	}
}

func dequantQ4_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[18*b:18*b+18], dst[32*b:32*b+32]
		d := f16At(blk)
		qs := blk[2:18]
		for j := 0; j < 16; j++ {
			y[j] = d * float32(int(qs[j]&15)-8)
			y[j+16] = d * float32(int(qs[j]>>4)-8)
		}
	}
}

func dequantQ4_1(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[20*b:20*b+20], dst[32*b:32*b+32]
		d, m := f16At(blk), f16At(blk[2:])
		qs := blk[4:20]
		for j := 0; j < 16; j++ {
			y[j] = d*float32(qs[j]&15) + m
			y[j+16] = d*float32(qs[j]>>4) + m
		}
	}
}

func dequantQ5_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[22*b:22*b+22], dst[32*b:32*b+32]
		d := f16At(blk)
		qh := binary.LittleEndian.Uint32(blk[2:])
		qs := blk[6:22]
		for j := 0; j < 16; j++ {
			lo := int(qs[j]&15) | int(qh>>j&1)<<4
			hi := int(qs[j]>>4) | int(qh>>(j+16)&1)<<4
			y[j] = d * float32(lo-16)
			y[j+16] = d * float32(hi-16)
		}
	}
}

func dequantQ5_1(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[24*b:24*b+24], dst[32*b:32*b+32]
		d, m := f16At(blk), f16At(blk[2:])
		qh := binary.LittleEndian.Uint32(blk[4:])
		qs := blk[8:24]
		for j := 0; j < 16; j++ {
			lo := uint32(qs[j]&15) | (qh>>j&1)<<4
			hi := uint32(qs[j]>>4) | (qh>>(j+16)&1)<<4
			y[j] = d*float32(lo) + m
			y[j+16] = d*float32(hi) + m
		}
	}
}

func dequantQ8_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[34*b:34*b+34], dst[32*b:32*b+32]
		d := f16At(blk)
		for j := range 32 {
			y[j] = d * float32(int8(blk[2+j]))
		}
	}
}

func dequantQ8_1(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[36*b:36*b+36], dst[32*b:32*b+32]
		d := f16At(blk)
		for j := range 32 {
			y[j] = d * float32(int8(blk[4+j]))
		}
	}
}

func dequantIQ4NL(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[18*b:18*b+18], dst[32*b:32*b+32]
		d := f16At(blk)
		qs := blk[2:18]
		for j := 0; j < 16; j++ {
			y[j] = d * float32(iq4Values[qs[j]&15])
			y[j+16] = d * float32(iq4Values[qs[j]>>4])
		}
	}
}

func dequantQ8K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[292*b:292*b+292], dst[256*b:256*b+256]
		d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		for j := range 256 {
			y[j] = d * float32(int8(blk[4+j]))
		}
	}
}
