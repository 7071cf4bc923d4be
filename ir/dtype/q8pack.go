package dtype

import (
	"encoding/binary"
	"fmt"
)

// PackRows is the number of weight rows of one packed tile.
const PackRows = 16

// Packed is a weight matrix of Rows rows of Cols elements in the tile layout
// of the int8 products: ceil(Rows/16) tiles of TileBytes, each the packed
// super-blocks of 16 rows (rows past Rows are zero). Data may be memory of
// its own (huge pages, allocPacked) that lives only as long as p.
type Packed struct {
	Type       Type
	Rows, Cols int
	Tiles      int
	TileBytes  int
	Data       []byte
	f          *q8Format
}

// Float reports whether p holds a float type (ProductFloat), not a
// quantised one (Product).
func (p *Packed) Float() bool { return p.f.elem != nil }

// Tile returns the bytes of tile i.
func (p *Packed) Tile(i int) []byte { return p.Data[i*p.TileBytes : (i+1)*p.TileBytes] }

// q8Format is one weight type's packed layout and reference product.
type q8Format struct {
	sb      int // elements per super-block
	sbBytes int // bytes of one packed super-block of 16 rows
	// pack writes the packed super-block of the 16 stored blocks src
	// (nil for a row past the matrix) to dst.
	pack func(dst []byte, src *[PackRows][]byte)
	// ref adds one token's products with one packed super-block to the 16
	// rows' accumulators: x holds the super-block's codes, g its groups.
	ref func(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32)
	// elem decodes element j of row r of a packed step of a float type
	// (nil for the quantised types).
	elem func(sb []byte, j, r int) float32
}

// q8Formats is the table of packed types, indexed by Type.
var q8Formats = map[Type]*q8Format{
	Q8_0:   {sb: 32, sbBytes: 16 * 34, pack: packQ8_0, ref: refQ8_0},
	Q4_0:   {sb: 32, sbBytes: 16 * 18, pack: packQ4_0, ref: refQ4_0},
	IQ4_NL: {sb: 32, sbBytes: 16 * 18, pack: packQ4_0, ref: refIQ4NL},
	Q4_K:   {sb: 256, sbBytes: 2368, pack: packQ4K, ref: refQ4K},
	Q5_K:   {sb: 256, sbBytes: 2880, pack: packQ5K, ref: refQ5K},
	Q6_K:   {sb: 256, sbBytes: 16 * 210, pack: packQ6K, ref: refQ6K},
	IQ4_XS: {sb: 256, sbBytes: 2208, pack: packIQ4XS, ref: refIQ4XS},
	// The float types: steps of 4 elements, element j of the 16 rows one
	// vector (floatref.go).
	F32:  {sb: 4, sbBytes: 4 * 64, pack: packFloat(4), elem: elemF32},
	F16:  {sb: 4, sbBytes: 4 * 32, pack: packFloat(2), elem: elemF16},
	BF16: {sb: 4, sbBytes: 4 * 32, pack: packFloat(2), elem: elemBF16},
}

// Packable reports whether rows of cols elements of type t have an int8
// product (or, for F32, F16 and BF16, a float product in the same tiles).
func Packable(t Type, cols int) bool {
	f, ok := q8Formats[t]
	return ok && cols > 0 && cols%f.sb == 0
}

// Pack returns the rows × cols matrix data of type t (rows of t.RowBytes(cols)
// bytes) in the tile layout. It copies: data may be released afterwards.
func Pack(t Type, data []byte, rows, cols int) (*Packed, error) {
	if !Packable(t, cols) {
		return nil, fmt.Errorf("%w: no int8 product for %v rows of %d elements", ErrType, t, cols)
	}
	rb, _ := t.RowBytes(cols)
	if len(data) != rows*rb {
		return nil, fmt.Errorf("%w: %d bytes for %d rows of %d %v elements", ErrLength, len(data), rows, cols, t)
	}
	p, err := NewPacked(t, rows, cols)
	if err != nil {
		return nil, err
	}
	for i := range p.Tiles {
		p.PackTile(i, data)
	}
	return p, nil
}

// PackTile packs tile i of the stored matrix data into p.Data; Pack calls
// it for every tile (a caller may split the tiles between workers instead:
// see NewPacked).
func (p *Packed) PackTile(i int, data []byte) {
	f := p.f
	rb, _ := p.Type.RowBytes(p.Cols)
	nsb := p.Cols / f.sb
	bb := rb / nsb
	tile := p.Tile(i)
	var src [PackRows][]byte
	for b := range nsb {
		for r := range PackRows {
			row := i*PackRows + r
			src[r] = nil
			if row < p.Rows {
				src[r] = data[row*rb+b*bb : row*rb+(b+1)*bb]
			}
		}
		f.pack(tile[b*f.sbBytes:(b+1)*f.sbBytes], &src)
	}
}

// NewPacked returns p's shape and memory without packing any tile: the
// caller packs them all with PackTile.
func NewPacked(t Type, rows, cols int) (*Packed, error) {
	f, ok := q8Formats[t]
	if !ok || cols <= 0 || cols%f.sb != 0 {
		return nil, fmt.Errorf("%w: no int8 product for %v rows of %d elements", ErrType, t, cols)
	}
	p := &Packed{Type: t, Rows: rows, Cols: cols, Tiles: (rows + PackRows - 1) / PackRows, TileBytes: cols / f.sb * f.sbBytes, f: f}
	p.Data = allocPacked(p, p.Tiles*p.TileBytes)
	return p, nil
}

// putScales16 writes the f16 field at offset off of each row's block as 16
// consecutive f16 (zero for a missing row).
func putScales16(dst []byte, src *[PackRows][]byte, off int) {
	for r, b := range src {
		var v uint16
		if b != nil {
			v = binary.LittleEndian.Uint16(b[off:])
		}
		binary.LittleEndian.PutUint16(dst[2*r:], v)
	}
}

// interleave writes n vectors of 64 bytes to dst: vector v holds, for each
// row r, the four bytes src[r][from+4v : from+4v+4] at 4r, each XORed
// with flip.
func interleave(dst []byte, src *[PackRows][]byte, from, n int, flip byte) {
	f := uint32(flip) * 0x01010101
	dst = dst[:64*n]
	for r, b := range src {
		if b == nil {
			for v := range n {
				binary.LittleEndian.PutUint32(dst[64*v+4*r:], f)
			}
			continue
		}
		b = b[from : from+4*n]
		for v := range n {
			binary.LittleEndian.PutUint32(dst[64*v+4*r:], binary.LittleEndian.Uint32(b[4*v:])^f)
		}
	}
}

// Q8_0, 544 bytes: 16 f16 scales, then 8 vectors of codes XOR 0x80 (the
// code plus 128, unsigned).
func packQ8_0(dst []byte, src *[PackRows][]byte) {
	putScales16(dst, src, 0)
	interleave(dst[32:], src, 2, 8, 0x80)
}

// Q4_0 and IQ4_NL, 288 bytes: 16 f16 scales, then 4 vectors of the
// stored code bytes: vector v's low nibbles are elements 4v..4v+3, its high
// nibbles elements 16+4v..16+4v+3.
func packQ4_0(dst []byte, src *[PackRows][]byte) {
	putScales16(dst, src, 0)
	interleave(dst[32:], src, 2, 4, 0)
}

// putKScales writes the scales and mins of the 16 rows' Q4_K or Q5_K blocks
// (scales at offset 4): d, dmin (16 f16 each), then the scales as 8 groups ×
// 16 rows bytes, then the mins likewise (320 bytes).
func putKScales(dst []byte, src *[PackRows][]byte) {
	putScales16(dst, src, 0)
	putScales16(dst[32:], src, 2)
	for r, b := range src {
		if b == nil {
			for g := range 8 {
				dst[64+16*g+r], dst[192+16*g+r] = 0, 0
			}
			continue
		}
		for g := range 8 {
			dst[64+16*g+r], dst[192+16*g+r] = scaleMinK4(g, b[4:16])
		}
	}
}

// Q4_K, 2368 bytes: putKScales, then for each 64-element chunk c 8 vectors
// of stored code bytes 32c+4s..: low nibbles group 2c, high nibbles group
// 2c+1, slab s (elements 4s..4s+3 of the group).
func packQ4K(dst []byte, src *[PackRows][]byte) {
	putKScales(dst, src)
	interleave(dst[320:], src, 16, 32, 0)
}

// Q5_K, 2880 bytes: putKScales, 8 vectors of the high-bit bytes (byte
// 4s+j: bit 2c is element 64c+4s+j's fifth bit, bit 2c+1 element
// 64c+32+4s+j's), then the code bytes as Q4_K's.
func packQ5K(dst []byte, src *[PackRows][]byte) {
	putKScales(dst, src)
	interleave(dst[320:], src, 16, 8, 0)
	interleave(dst[832:], src, 48, 32, 0)
}

// Q6_K, 3360 bytes: 16 f16 scales d, the 16 int8 scales of each 16
// elements as 16 × 16 rows bytes, then per half h of 128 elements 2 × 8
// vectors of low-bit bytes (vector (a, s): bytes 64h+32a+4s..: low nibbles
// group 4h+a, high nibbles group 4h+2+a, slab s), then per half 8 vectors of
// high-bit bytes (bits 2g..2g+1 of byte 32h+4s+j: group 4h+g, slab s).
func packQ6K(dst []byte, src *[PackRows][]byte) {
	putScales16(dst, src, 208)
	for r, b := range src {
		for i := range 16 {
			var v byte
			if b != nil {
				v = b[192+i]
			}
			dst[32+16*i+r] = v
		}
	}
	interleave(dst[288:], src, 0, 32, 0)
	interleave(dst[2336:], src, 128, 16, 0)
}

// IQ4_XS, 2208 bytes: 16 f16 scales d, the 8 group scales less 32 as 8 ×
// 16 rows int8, then per group g 4 vectors of code bytes 16g+4v.. (low
// nibbles elements 32g+4v.., high nibbles 32g+16+4v..).
func packIQ4XS(dst []byte, src *[PackRows][]byte) {
	putScales16(dst, src, 0)
	for r, b := range src {
		for g := range 8 {
			var v int8
			if b != nil {
				sh := binary.LittleEndian.Uint16(b[2:])
				v = int8(int((b[4+g/2]>>(4*(g%2)))&15)|int((sh>>(2*g))&3)<<4) - 32
			}
			dst[32+16*g+r] = byte(v)
		}
	}
	interleave(dst[160:], src, 8, 32, 0)
}
