//go:build goexperiment.simd && amd64

package dtype

import "simd/archsimd"

// With vector instructions, Dequantize uses the kernels below for the
// common block types. They perform the same float32 operations in the same
// order as the scalar decoders (no fused multiply-add), so their output is
// bit-identical (TestDequantizeTwins).
func init() {
	if !simdDot {
		return
	}
	dequantizers[Q8_0] = dequantQ8_0Fast
	dequantizers[Q4_K] = dequantQ4KFast
	dequantizers[Q6_K] = dequantQ6KFast
	dequantizers[Q5_0] = dequantQ5_0Fast
}

// store8 stores v to y[0:8].
func store8(v archsimd.Float32x8, y []float32) {
	v.Store((*[8]float32)(y[:8]))
}

func dequantQ8_0Fast(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[34*b:34*b+34], dst[32*b:32*b+32]
		d := archsimd.BroadcastFloat32x8(f16At(blk))
		v0 := archsimd.LoadUint8x16((*[16]uint8)(blk[2:18]))
		v1 := archsimd.LoadUint8x16((*[16]uint8)(blk[18:34]))
		store8(d.Mul(s8f(v0)), y[0:])
		store8(d.Mul(s8f(hiHalf(v0))), y[8:])
		store8(d.Mul(s8f(v1)), y[16:])
		store8(d.Mul(s8f(hiHalf(v1))), y[24:])
	}
	archsimd.ClearAVXUpperBits()
}

func dequantQ4KFast(src []byte, dst []float32) {
	mask := archsimd.BroadcastUint8x16(15)
	four := archsimd.BroadcastUint32x4(4)
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[144*b:144*b+144], dst[256*b:256*b+256]
		d := archsimd.BroadcastFloat32x8(f16At(blk))
		dmin := archsimd.BroadcastFloat32x8(f16At(blk[2:]))
		scales, qs := blk[4:16], blk[16:144]
		for c := range 4 {
			sc0, m0 := scaleMinK4(2*c, scales)
			sc1, m1 := scaleMinK4(2*c+1, scales)
			d0 := d.Mul(archsimd.BroadcastFloat32x8(u6f[sc0&63]))
			mm0 := dmin.Mul(archsimd.BroadcastFloat32x8(u6f[m0&63]))
			d1 := d.Mul(archsimd.BroadcastFloat32x8(u6f[sc1&63]))
			mm1 := dmin.Mul(archsimd.BroadcastFloat32x8(u6f[m1&63]))
			q := qs[32*c : 32*c+32]
			o := y[64*c : 64*c+64]
			for h := 0; h < 32; h += 16 {
				v := archsimd.LoadUint8x16((*[16]uint8)(q[h : h+16]))
				lo := v.And(mask)
				hi := v.AsUint32x4().ShiftRight(four).AsUint8x16().And(mask)
				store8(d0.Mul(u8f(lo)).Sub(mm0), o[h:])
				store8(d0.Mul(u8f(hiHalf(lo))).Sub(mm0), o[h+8:])
				store8(d1.Mul(u8f(hi)).Sub(mm1), o[32+h:])
				store8(d1.Mul(u8f(hiHalf(hi))).Sub(mm1), o[40+h:])
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

func dequantQ6KFast(src []byte, dst []float32) {
	low := archsimd.BroadcastUint8x16(0x0f)
	high := archsimd.BroadcastUint8x16(0x30)
	two := archsimd.BroadcastUint32x4(2)
	four := archsimd.BroadcastUint32x4(4)
	c32 := archsimd.BroadcastFloat32x8(32)
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[210*b:210*b+210], dst[256*b:256*b+256]
		sc := blk[192:208]
		d := archsimd.BroadcastFloat32x8(f16At(blk[208:]))
		for h := range 2 {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			yh := y[128*h : 128*h+128]
			for j := 0; j < 32; j += 16 {
				a := archsimd.LoadUint8x16((*[16]uint8)(ql[j : j+16]))
				c := archsimd.LoadUint8x16((*[16]uint8)(ql[32+j : 48+j]))
				hb := archsimd.LoadUint8x16((*[16]uint8)(qh[j : j+16]))
				hb32 := hb.AsUint32x4()
				q := [4]archsimd.Uint8x16{
					a.And(low).Or(hb32.ShiftLeft(four).AsUint8x16().And(high)),
					c.And(low).Or(hb32.ShiftLeft(two).AsUint8x16().And(high)),
					a.AsUint32x4().ShiftRight(four).AsUint8x16().And(low).Or(hb.And(high)),
					c.AsUint32x4().ShiftRight(four).AsUint8x16().And(low).Or(hb32.ShiftRight(two).AsUint8x16().And(high)),
				}
				g := 8*h + j/16
				for i := range 4 {
					ds := d.Mul(archsimd.BroadcastFloat32x8(i8f[sc[g+2*i]]))
					o := yh[32*i+j : 32*i+j+16]
					store8(ds.Mul(u8f(q[i]).Sub(c32)), o)
					store8(ds.Mul(u8f(hiHalf(q[i])).Sub(c32)), o[8:])
				}
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

func dequantQ5_0Fast(src []byte, dst []float32) {
	mask := archsimd.BroadcastUint8x16(15)
	four := archsimd.BroadcastUint32x4(4)
	c16 := archsimd.BroadcastFloat32x8(16)
	for b := 0; b < len(dst)/32; b++ {
		blk, y := src[22*b:22*b+22], dst[32*b:32*b+32]
		d := archsimd.BroadcastFloat32x8(f16At(blk))
		lo, hi := q5Codes((*[22]byte)(blk), mask, four)
		store8(d.Mul(u8f(lo).Sub(c16)), y[0:])
		store8(d.Mul(u8f(hiHalf(lo)).Sub(c16)), y[8:])
		store8(d.Mul(u8f(hi).Sub(c16)), y[16:])
		store8(d.Mul(u8f(hiHalf(hi)).Sub(c16)), y[24:])
	}
	archsimd.ClearAVXUpperBits()
}
