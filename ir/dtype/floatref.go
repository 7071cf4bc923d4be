package dtype

import (
	"encoding/binary"
	"math"
)

// The float products: F32, F16 and BF16 weights in tiles of 16 rows times
// float32 activations. Element k of a row is added to the token's sum k
// mod 4 by a fused multiply-add; the product is (s0 + s1) + (s2 + s3). The
// portable kernel below defines the result; the assembly kernels equal it
// bit for bit.

// floatKernel computes the products of one packed tile (steps of 4
// elements) with the T tokens whose float32 rows start at x, stride bytes
// apart, and stores token t's 16 results at out + t·ldo bytes.
type floatKernel func(tile *byte, steps int, x *float32, stride int, out *float32, ldo int)

// packFloat returns the packer of a float type of es bytes an element:
// element j of the step, row r, at es·(16j + r).
func packFloat(es int) func(dst []byte, src *[PackRows][]byte) {
	return func(dst []byte, src *[PackRows][]byte) {
		for j := range 4 {
			for r, b := range src {
				o := dst[es*(PackRows*j+r) : es*(PackRows*j+r+1)]
				if b == nil {
					clear(o)
					continue
				}
				copy(o, b[es*j:es*(j+1)])
			}
		}
	}
}

func elemF32(sb []byte, j, r int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(sb[4*(PackRows*j+r):]))
}

func elemF16(sb []byte, j, r int) float32 { return f16s(sb[2*PackRows*j:], r) }

func elemBF16(sb []byte, j, r int) float32 { return bf16At(sb[2*(PackRows*j+r):]) }

// productFloatRef sets out[16·t + r] to the product of row r of tile with
// the float32 row x[(m0+t)·K:], for t < T.
func productFloatRef(p *Packed, tile []byte, x []float32, m0, T int, out []float32) {
	f, K := p.f, p.Cols
	for t := range T {
		xr := x[(m0+t)*K : (m0+t+1)*K]
		for r := range PackRows {
			var s [4]float32
			for b := range K / 4 {
				sb := tile[b*f.sbBytes : (b+1)*f.sbBytes]
				for j := range 4 {
					s[j] = fma32(f.elem(sb, j, r), xr[4*b+j], s[j])
				}
			}
			out[PackRows*t+r] = (s[0] + s[1]) + (s[2] + s[3])
		}
	}
}

// ProductFloat is Product for a float type: x holds float32 rows of p.Cols
// elements (token m at x[m·p.Cols:]).
func (p *Packed) ProductFloat(x []float32, tile0, tile1, m0, m1, block int, y []float32, ldy int) {
	if !p.Float() {
		panic("BUG: dtype.Packed.ProductFloat on " + p.Type.String())
	}
	K := p.Cols
	if m0 < 0 || m1*K > len(x) || tile1 > p.Tiles {
		panic("BUG: dtype.Packed.ProductFloat: tokens or tiles out of range")
	}
	var ks []floatKernel
	if s := q8Active.Load(); s != nil {
		ks = s.floats[p.Type]
	}
	maxT := 8
	if len(ks) > 0 {
		maxT = len(ks)
	}
	if block <= 0 || block > maxT {
		block = maxT
	}
	var out [PackRows * 8]float32
	steps := K / 4
	for i := tile0; i < tile1; i++ {
		tile := p.Tile(i)
		rows := min(PackRows, p.Rows-i*PackRows)
		for m := m0; m < m1; {
			T := min(block, m1-m)
			switch {
			case ks == nil:
				productFloatRef(p, tile, x, m, T, out[:])
			case rows == PackRows:
				_ = y[(m+T-1)*ldy+i*PackRows+PackRows-1]
				ks[T-1](&tile[0], steps, &x[m*K], 4*K, &y[m*ldy+i*PackRows], 4*ldy)
				m += T
				continue
			default:
				ks[T-1](&tile[0], steps, &x[m*K], 4*K, &out[0], 4*PackRows)
			}
			for t := range T {
				copy(y[(m+t)*ldy+i*PackRows:(m+t)*ldy+i*PackRows+rows], out[PackRows*t:PackRows*t+rows])
			}
			m += T
		}
	}
}
