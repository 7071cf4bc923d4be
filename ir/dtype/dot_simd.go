//go:build goexperiment.simd && amd64

package dtype

import "simd/archsimd"

// simdDot reports whether Dot uses the AVX2/FMA kernels of this file for
// the types they cover; without those instructions it keeps the scalar ones.
var simdDot = archsimd.X86.AVX2() && archsimd.X86.FMA()

// load8 loads x[0:8].
func load8(x []float32) archsimd.Float32x8 {
	return archsimd.LoadFloat32x8((*[8]float32)(x[:8]))
}

// hsum8 adds the eight lanes of v and clears the upper halves of the
// vector registers: every kernel ends with it, as scalar SSE code that
// follows dirty AVX state pays a large penalty on some CPUs.
func hsum8(v archsimd.Float32x8) float32 {
	h := v.GetLo().Add(v.GetHi())
	h = h.AddPairs(h)
	h = h.AddPairs(h)
	s := h.GetElem(0)
	archsimd.ClearAVXUpperBits()
	return s
}

// u6f maps a 6-bit scale or min to float32, so that kernels convert it
// with a load rather than a scalar SSE conversion.
var u6f = func() (t [64]float32) {
	for i := range t {
		t[i] = float32(i)
	}
	return t
}()

// hiHalf moves bytes 8..15 of v to 0..7.
func hiHalf(v archsimd.Uint8x16) archsimd.Uint8x16 {
	return v.AsInt32x4().PermuteScalars(2, 3, 2, 3).AsUint8x16()
}

// s8f widens the low eight bytes of v, read as int8, to float32.
func s8f(v archsimd.Uint8x16) archsimd.Float32x8 {
	return v.AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32()
}

// u8f widens the low eight bytes of v to float32.
func u8f(v archsimd.Uint8x16) archsimd.Float32x8 {
	return v.ExtendLo8ToUint32().AsInt32x8().ConvertToFloat32()
}

func dotQ8_0Fast(row []byte, x []float32) float32 {
	if !simdDot {
		return dotQ8_0(row, x)
	}
	var acc0, acc1 archsimd.Float32x8
	// Blocks through array pointers: one bounds check per block.
	for len(row) >= 68 && len(x) >= 64 {
		b0, b1 := (*[34]byte)(row[0:34]), (*[34]byte)(row[34:68])
		xs := (*[64]float32)(x[:64])
		acc0 = q8Block(b0, (*[32]float32)(xs[0:32]), acc0)
		acc1 = q8Block(b1, (*[32]float32)(xs[32:64]), acc1)
		row, x = row[68:], x[64:]
	}
	if len(row) >= 34 && len(x) >= 32 {
		acc0 = q8Block((*[34]byte)(row[0:34]), (*[32]float32)(x[:32]), acc0)
	}
	return hsum8(acc0.Add(acc1))
}

// q8Block returns acc + d·Σ q·x over one Q8_0 block.
func q8Block(blk *[34]byte, xs *[32]float32, acc archsimd.Float32x8) archsimd.Float32x8 {
	v0 := archsimd.LoadUint8x16((*[16]uint8)(blk[2:18]))
	v1 := archsimd.LoadUint8x16((*[16]uint8)(blk[18:34]))
	p := s8f(v0).Mul(archsimd.LoadFloat32x8((*[8]float32)(xs[0:8])))
	q := s8f(hiHalf(v0)).Mul(archsimd.LoadFloat32x8((*[8]float32)(xs[8:16])))
	p = s8f(v1).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(xs[16:24])), p)
	q = s8f(hiHalf(v1)).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(xs[24:32])), q)
	d := archsimd.BroadcastFloat32x8(f16Table[uint16(blk[0])|uint16(blk[1])<<8])
	return p.Add(q).MulAdd(d, acc)
}

func dotQ4KFast(row []byte, x []float32) float32 {
	if !simdDot {
		return dotQ4K(row, x)
	}
	mask := archsimd.BroadcastUint8x16(15)
	four := archsimd.BroadcastUint32x4(4)
	var zero, acc0, acc1 archsimd.Float32x8
	// Blocks through array pointers: one bounds check per block.
	for len(row) >= 144 && len(x) >= 256 {
		blk, xb := (*[144]byte)(row[:144]), (*[256]float32)(x[:256])
		row, x = row[144:], x[256:]
		d := archsimd.BroadcastFloat32x8(f16Table[uint16(blk[0])|uint16(blk[1])<<8])
		nmin := zero.Sub(archsimd.BroadcastFloat32x8(f16Table[uint16(blk[2])|uint16(blk[3])<<8]))
		s := blk[4:16]
		for c := range 4 {
			// Weights of the chunk's two groups: d·sc·q − dmin·m.
			sc0, m0 := scaleMinK4(2*c, s)
			sc1, m1 := scaleMinK4(2*c+1, s)
			d0 := archsimd.BroadcastFloat32x8(u6f[sc0&63]).Mul(d)
			o0 := archsimd.BroadcastFloat32x8(u6f[m0&63]).Mul(nmin)
			d1 := archsimd.BroadcastFloat32x8(u6f[sc1&63]).Mul(d)
			o1 := archsimd.BroadcastFloat32x8(u6f[m1&63]).Mul(nmin)
			q := (*[32]byte)(blk[16+32*c : 48+32*c])
			xl := (*[32]float32)(xb[64*c : 64*c+32])
			xh := (*[32]float32)(xb[64*c+32 : 64*c+64])
			for h := 0; h < 32; h += 16 {
				v := archsimd.LoadUint8x16((*[16]uint8)(q[h : h+16]))
				lo := v.And(mask)
				hi := v.AsUint32x4().ShiftRight(four).AsUint8x16().And(mask)
				acc0 = u8f(lo).MulAdd(d0, o0).MulAdd(load8(xl[h:]), acc0)
				acc1 = u8f(hiHalf(lo)).MulAdd(d0, o0).MulAdd(load8(xl[h+8:]), acc1)
				acc0 = u8f(hi).MulAdd(d1, o1).MulAdd(load8(xh[h:]), acc0)
				acc1 = u8f(hiHalf(hi)).MulAdd(d1, o1).MulAdd(load8(xh[h+8:]), acc1)
			}
		}
	}
	return hsum8(acc0.Add(acc1))
}

func dotQ6KFast(row []byte, x []float32) float32 {
	if !simdDot {
		return dotQ6K(row, x)
	}
	low := archsimd.BroadcastUint8x16(0x0f)
	high := archsimd.BroadcastUint8x16(0x30)
	two := archsimd.BroadcastUint32x4(2)
	four := archsimd.BroadcastUint32x4(4)
	minus32 := archsimd.BroadcastFloat32x8(-32)
	var acc0, acc1 archsimd.Float32x8
	// Blocks through array pointers: one bounds check per block.
	for len(row) >= 210 && len(x) >= 256 {
		blk, xb := (*[210]byte)(row[:210]), (*[256]float32)(x[:256])
		row, x = row[210:], x[256:]
		sc := (*[16]byte)(blk[192:208])
		d := archsimd.BroadcastFloat32x8(f16Table[uint16(blk[208])|uint16(blk[209])<<8])
		for h := range 2 {
			ql := (*[64]byte)(blk[64*h : 64*h+64])
			qh := (*[32]byte)(blk[128+32*h : 128+32*h+32])
			xh := (*[128]float32)(xb[128*h : 128*h+128])
			for j := 0; j < 32; j += 16 {
				a := archsimd.LoadUint8x16((*[16]uint8)(ql[j : j+16]))
				c := archsimd.LoadUint8x16((*[16]uint8)(ql[32+j : 48+j]))
				hb := archsimd.LoadUint8x16((*[16]uint8)(qh[j : j+16]))
				hb32 := hb.AsUint32x4()
				// The four 6-bit codes of positions j..j+15 of the four
				// 32-element quarters (layout as in dequantQ6K).
				q := [4]archsimd.Uint8x16{
					a.And(low).Or(hb32.ShiftLeft(four).AsUint8x16().And(high)),
					c.And(low).Or(hb32.ShiftLeft(two).AsUint8x16().And(high)),
					a.AsUint32x4().ShiftRight(four).AsUint8x16().And(low).Or(hb.And(high)),
					c.AsUint32x4().ShiftRight(four).AsUint8x16().And(low).Or(hb32.ShiftRight(two).AsUint8x16().And(high)),
				}
				g := 8*h + j/16
				for i := range 4 {
					ds := archsimd.BroadcastFloat32x8(i8f[sc[g+2*i]]).Mul(d)
					off := ds.Mul(minus32)
					xs := (*[16]float32)(xh[32*i+j : 32*i+j+16])
					acc0 = u8f(q[i]).MulAdd(ds, off).MulAdd(load8(xs[0:8]), acc0)
					acc1 = u8f(hiHalf(q[i])).MulAdd(ds, off).MulAdd(load8(xs[8:16]), acc1)
				}
			}
		}
	}
	return hsum8(acc0.Add(acc1))
}

// q5High maps a byte of Q5_0's high-bit word to eight bytes holding 16 where
// the bit is set, little-endian: bit i of the byte becomes byte i.
var q5High = func() (t [256]uint64) {
	for i := range t {
		for j := range 8 {
			if i>>j&1 != 0 {
				t[i] |= 16 << (8 * j)
			}
		}
	}
	return t
}()

// q5Codes returns the 5-bit codes of Q5_0 block blk: elements 0..15 and
// 16..31.
func q5Codes(blk *[22]byte, mask archsimd.Uint8x16, four archsimd.Uint32x4) (lo, hi archsimd.Uint8x16) {
	qh := uint32(blk[2]) | uint32(blk[3])<<8 | uint32(blk[4])<<16 | uint32(blk[5])<<24
	// Inserted lane by lane: storing to memory and loading back would
	// stall on store forwarding.
	var z archsimd.Uint64x2
	hlo := z.SetElem(0, q5High[qh&255]).SetElem(1, q5High[qh>>8&255]).AsUint8x16()
	hhi := z.SetElem(0, q5High[qh>>16&255]).SetElem(1, q5High[qh>>24]).AsUint8x16()
	v := archsimd.LoadUint8x16((*[16]uint8)(blk[6:22]))
	lo = v.And(mask).Or(hlo)
	hi = v.AsUint32x4().ShiftRight(four).AsUint8x16().And(mask).Or(hhi)
	return lo, hi
}

func dotQ5_0Fast(row []byte, x []float32) float32 {
	if !simdDot {
		return dotQ5_0(row, x)
	}
	mask := archsimd.BroadcastUint8x16(15)
	four := archsimd.BroadcastUint32x4(4)
	c16 := archsimd.BroadcastFloat32x8(16)
	var acc0, acc1 archsimd.Float32x8
	// Blocks through array pointers: one bounds check per block.
	for b := 0; len(row) >= 22 && len(x) >= 32; b++ {
		blk, xs := (*[22]byte)(row[:22]), (*[32]float32)(x[:32])
		row, x = row[22:], x[32:]
		lo, hi := q5Codes(blk, mask, four)
		p := u8f(lo).Sub(c16).Mul(load8(xs[0:8]))
		q := u8f(hiHalf(lo)).Sub(c16).Mul(load8(xs[8:16]))
		p = u8f(hi).Sub(c16).MulAdd(load8(xs[16:24]), p)
		q = u8f(hiHalf(hi)).Sub(c16).MulAdd(load8(xs[24:32]), q)
		d := archsimd.BroadcastFloat32x8(f16Table[uint16(blk[0])|uint16(blk[1])<<8])
		if b&1 == 0 {
			acc0 = p.Add(q).MulAdd(d, acc0)
		} else {
			acc1 = p.Add(q).MulAdd(d, acc1)
		}
	}
	return hsum8(acc0.Add(acc1))
}
