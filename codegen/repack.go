package codegen

import (
	"encoding/binary"
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// Repacked weight layout (GEMV layout 1). A matrix of rows × k elements is
// stored as planes, one after another, each plane holding every row in
// order. The quant plane comes first; its per-row bytes and every plane's
// size are multiples of 16, so each plane and each row inside the quant
// plane is 16-byte aligned when the matrix is. A 16-byte "unit" of the
// quant plane holds the quants of 32 consecutive elements (Q8_0: 16), so
// thread t of a row reads unit t with one 16-byte load and consecutive
// threads read consecutive 16 bytes. Scales are read once per unit from
// the scale planes. The repacked matrix has exactly the size of the file's.
//
//	Q4_0: Q[rows][k/32][16]  byte i: low nibble element i, high element 16+i (the file's qs)
//	      D[rows][k/32] f16   the block's d
//	Q8_0: Q[rows][k] int8     the file's qs, block after block
//	      D[rows][k/32] f16   the block's d
//	Q4_K: Q[rows][k/32][16]  unit j of a block = sub-block j: byte i low nibble element 32j+i, high 32j+16+i
//	      H[rows][k/256][16]  the block's d, dmin and 12 scale bytes, as in the file
//	Q6_K: L[rows][k/32][16]  unit j: byte i low nibble = low 4 bits of element 32j+i, high of 32j+16+i
//	      H[rows][k/32][8]   unit j: the high 2 bits of its 32 elements; for element o = 16h + 4c + b
//	                          (h: low or high nibble of L, c: L's 32-bit word, b: byte in it) byte
//	                          4(c/2) + b, bits 2(2(c%2) + h); so (H word c/2 << 4, << 2, >> 0, >> 2) &
//	                          0x30303030 puts them beside L word c's nibbles as 6-bit bytes
//	      S[rows][k/256][16]  the block's int8 scales, as in the file (scale e/16 for element e)
//	      D[rows][k/256] f16  the block's d

// RepackTypes are the weight types with a repacked layout.
var RepackTypes = []dtype.Type{dtype.Q4_0, dtype.Q8_0, dtype.Q4_K, dtype.Q6_K}

// Repackable reports whether t has a repacked layout.
func Repackable(t dtype.Type) bool {
	for _, r := range RepackTypes {
		if r == t {
			return true
		}
	}
	return false
}

// checkRepack validates a repack request and returns the row bytes.
func checkRepack(t dtype.Type, rows, k, n int) (int, error) {
	if !Repackable(t) {
		return 0, fmt.Errorf("%w: no repacked layout for %v", ErrUnsupported, t)
	}
	if rows <= 0 || k <= 0 || k%t.BlockElems() != 0 {
		return 0, fmt.Errorf("%w: repack %v of %d rows × %d", ErrUnsupported, t, rows, k)
	}
	rb, err := t.RowBytes(k)
	if err != nil {
		return 0, fmt.Errorf("%w: repack %v: %w", ErrUnsupported, t, err)
	}
	if n != rows*rb {
		return 0, fmt.Errorf("%w: repack %v of %d rows × %d: %d bytes, want %d", ErrUnsupported, t, rows, k, n, rows*rb)
	}
	return rb, nil
}

// Repack returns the repacked layout of rows × k elements of type t stored
// in the file's layout in data (see the layout table above). The result
// has len(data) bytes.
func Repack(t dtype.Type, rows, k int, data []byte) ([]byte, error) {
	rb, err := checkRepack(t, rows, k, len(data))
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(data))
	bs, bb := t.BlockElems(), t.BlockBytes()
	nb := k / bs
	for r := range rows {
		row := data[r*rb : (r+1)*rb]
		for b := range nb {
			blk := row[b*bb : (b+1)*bb]
			i := r*nb + b // block index over the matrix
			switch t {
			case dtype.Q4_0:
				copy(out[16*i:], blk[2:18])
				copy(out[rows*nb*16+2*i:], blk[0:2])
			case dtype.Q8_0:
				copy(out[32*i:], blk[2:34])
				copy(out[rows*k+2*i:], blk[0:2])
			case dtype.Q4_K:
				q := out[128*i : 128*i+128]
				for j := range 8 {
					for e := range 32 {
						// file: element 32j+e is byte 32(j/2)+e, nibble j&1
						n := blk[16+32*(j/2)+e] >> (4 * (j & 1)) & 15
						q[16*j+e%16] |= n << (4 * (e / 16))
					}
				}
				copy(out[rows*nb*128+16*i:], blk[0:16])
			case dtype.Q6_K:
				l := out[128*i : 128*i+128]
				h := out[rows*nb*128+64*i : rows*nb*128+64*i+64]
				for e := range 256 {
					v := q6At(blk, e)
					j, o := e/32, e%32
					l[16*j+o%16] |= (v & 15) << (4 * (o / 16))
					c, b := (o%16)/4, o%4
					h[8*j+4*(c/2)+b] |= (v >> 4) << (2 * (2*(c%2) + o/16))
				}
				copy(out[rows*nb*192+16*i:], blk[192:208])
				copy(out[rows*nb*208+2*i:], blk[208:210])
			}
		}
	}
	return out, nil
}

// q6At returns the unsigned 6-bit quant of element e of a Q6_K block.
func q6At(blk []byte, e int) byte {
	h, r := e/128, e%128
	g, l := r/32, r%32
	lo := blk[64*h+32*(g&1)+l]
	if g >= 2 {
		lo >>= 4
	}
	hi := (blk[128+32*h+l] >> (2 * g)) & 3
	return lo&15 | hi<<4
}

// DequantizeRepacked dequantises rows × k elements of type t in the
// repacked layout into dst (rows × k floats), with the same float
// arithmetic as dtype.Dequantize on the file's layout.
func DequantizeRepacked(t dtype.Type, rows, k int, data []byte, dst []float32) error {
	if _, err := checkRepack(t, rows, k, len(data)); err != nil {
		return err
	}
	if len(dst) != rows*k {
		return fmt.Errorf("%w: dequantise %d rows × %d into %d floats", ErrUnsupported, rows, k, len(dst))
	}
	nb := k / t.BlockElems()
	f16 := func(b []byte) float32 { return dtype.F16ToF32(binary.LittleEndian.Uint16(b)) }
	for i := range rows * nb { // block i of the matrix
		switch t {
		case dtype.Q4_0:
			d := f16(data[rows*nb*16+2*i:])
			q, y := data[16*i:16*i+16], dst[32*i:32*i+32]
			for e := range 16 {
				y[e] = d * float32(int(q[e]&15)-8)
				y[e+16] = d * float32(int(q[e]>>4)-8)
			}
		case dtype.Q8_0:
			d := f16(data[rows*k+2*i:])
			for e := range 32 {
				dst[32*i+e] = d * float32(int8(data[32*i+e]))
			}
		case dtype.Q4_K:
			hd := data[rows*nb*128+16*i:]
			d, dmin := f16(hd), f16(hd[2:])
			for j := range 8 {
				sc, mn := kScaleMin(j, hd[4:16])
				dj, mj := d*float32(sc), dmin*float32(mn)
				q, y := data[128*i+16*j:], dst[256*i+32*j:]
				for e := range 16 {
					y[e] = dj*float32(q[e]&15) - mj
					y[e+16] = dj*float32(q[e]>>4) - mj
				}
			}
		case dtype.Q6_K:
			d := f16(data[rows*nb*208+2*i:])
			sc := data[rows*nb*192+16*i:]
			for j := range 8 {
				l, h := data[128*i+16*j:], data[rows*nb*128+64*i+8*j:]
				for o := range 32 {
					lo := l[o%16] >> (4 * (o / 16)) & 15
					c, b := (o%16)/4, o%4
					hi := h[4*(c/2)+b] >> (2 * (2*(c%2) + o/16)) & 3
					q := int(lo|hi<<4) - 32
					e := 32*j + o
					dst[256*i+e] = d * float32(int8(sc[e/16])) * float32(q)
				}
			}
		}
	}
	return nil
}

// kScaleMin unpacks sub-block j's 6-bit scale and min of a Q4_K block's
// 12 scale bytes s.
func kScaleMin(j int, s []byte) (sc, mn uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&15 | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}
