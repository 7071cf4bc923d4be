package dtype

import "encoding/binary"

func dotQ4K(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/256; b++ {
		blk := row[144*b : 144*b+144]
		d, dmin := f16At(blk), f16At(blk[2:])
		s := blk[4:16]
		qs := blk[16:144]
		xb := x[256*b : 256*b+256]
		// Unpack the eight 6-bit scales and mins once.
		var sc, mn [8]float32
		for j := range 4 {
			sc[j] = float32(s[j] & 63)
			mn[j] = float32(s[j+4] & 63)
			sc[j+4] = float32(s[j+8]&15 | (s[j]>>6)<<4)
			mn[j+4] = float32(s[j+8]>>4 | (s[j+4]>>6)<<4)
		}
		var sumQ, sumM float32
		for c := range 4 {
			q := qs[32*c : 32*c+32]
			xl := xb[64*c : 64*c+32]
			xh := xb[64*c+32 : 64*c+64]
			var a0, a1, a2, a3, m0, m1 float32
			for l := 0; l < 32; l += 2 {
				p0, p1 := &nibU[q[l]], &nibU[q[l+1]]
				a0 += p0[0] * xl[l]
				a1 += p1[0] * xl[l+1]
				a2 += p0[1] * xh[l]
				a3 += p1[1] * xh[l+1]
				m0 += xl[l] + xl[l+1]
				m1 += xh[l] + xh[l+1]
			}
			sumQ += sc[2*c]*(a0+a1) + sc[2*c+1]*(a2+a3)
			sumM += mn[2*c]*m0 + mn[2*c+1]*m1
		}
		acc += d*sumQ - dmin*sumM
	}
	return acc
}

func dotQ5K(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/256; b++ {
		blk := row[176*b : 176*b+176]
		d, dmin := f16At(blk), f16At(blk[2:])
		s := blk[4:16]
		qh := blk[16:48]
		qs := blk[48:176]
		xb := x[256*b : 256*b+256]
		var sc, mn [8]float32
		for j := range 4 {
			sc[j] = float32(s[j] & 63)
			mn[j] = float32(s[j+4] & 63)
			sc[j+4] = float32(s[j+8]&15 | (s[j]>>6)<<4)
			mn[j+4] = float32(s[j+8]>>4 | (s[j+4]>>6)<<4)
		}
		var sumQ, sumM float32
		for c := range 4 {
			q := qs[32*c : 32*c+32]
			xl := xb[64*c : 64*c+32]
			xh := xb[64*c+32 : 64*c+64]
			sh := uint(2*c) & 7
			var a0, a1, a2, a3, m0, m1 float32
			for l := 0; l < 32; l += 2 {
				p0 := &nibH[int(qh[l]>>sh&3)<<8|int(q[l])]
				p1 := &nibH[int(qh[l+1]>>sh&3)<<8|int(q[l+1])]
				a0 += p0[0] * xl[l]
				a1 += p1[0] * xl[l+1]
				a2 += p0[1] * xh[l]
				a3 += p1[1] * xh[l+1]
				m0 += xl[l] + xl[l+1]
				m1 += xh[l] + xh[l+1]
			}
			sumQ += sc[2*c]*(a0+a1) + sc[2*c+1]*(a2+a3)
			sumM += mn[2*c]*m0 + mn[2*c+1]*m1
		}
		acc += d*sumQ - dmin*sumM
	}
	return acc
}

func dotQ6K(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/256; b++ {
		blk := row[210*b : 210*b+210]
		sc := blk[192:208]
		d := f16At(blk[208:])
		var sum float32
		for h := range 2 {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			xb := x[256*b+128*h : 256*b+128*h+128]
			x0, x1, x2, x3 := xb[0:32], xb[32:64], xb[64:96], xb[96:128]
			// Each 16-element group has its own scale: two groups per
			// 32-wide lane, so run the lanes in halves.
			for half := range 2 {
				o := 16 * half
				var a0, a1, a2, a3 float32
				for l := o; l < o+16; l++ {
					lo, hi, hb := ql[l], ql[l+32], qh[l]
					a0 += q6f[lo&15|(hb&3)<<4] * x0[l]
					a1 += q6f[hi&15|(hb>>2&3)<<4] * x1[l]
					a2 += q6f[lo>>4|(hb>>4&3)<<4] * x2[l]
					a3 += q6f[hi>>4|(hb>>6)<<4] * x3[l]
				}
				g := 8*h + half
				sum += float32(int8(sc[g]))*a0 + float32(int8(sc[g+2]))*a1 +
					float32(int8(sc[g+4]))*a2 + float32(int8(sc[g+6]))*a3
			}
		}
		acc += d * sum
	}
	return acc
}

func dotQ2K(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/256; b++ {
		blk := row[84*b : 84*b+84]
		scales, qs := blk[0:16], blk[16:80]
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		xb := x[256*b : 256*b+256]
		var sumQ, sumM float32
		for g := range 16 {
			h, r := g/8, (g%8)*16 // group g covers elements 16g..16g+15
			shift := uint(2 * (r / 32))
			q := qs[32*h+r%32 : 32*h+r%32+16]
			xs := xb[16*g : 16*g+16]
			var a, m float32
			for l := range 16 {
				a += float32(q[l]>>shift&3) * xs[l]
				m += xs[l]
			}
			sc := scales[g]
			sumQ += float32(sc&15) * a
			sumM += float32(sc>>4) * m
		}
		acc += d*sumQ - dmin*sumM
	}
	return acc
}

func dotQ3K(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/256; b++ {
		blk := row[110*b : 110*b+110]
		hmask, qs, s := blk[0:32], blk[32:96], blk[96:108]
		d := f16At(blk[108:])
		xb := x[256*b : 256*b+256]
		var sum float32
		for g := range 16 {
			e0 := 16 * g
			h, r := e0/128, e0%128
			shift := uint(2 * (r / 32))
			hbit := uint(e0 / 32)
			q := qs[32*h+r%32 : 32*h+r%32+16]
			hm := hmask[e0%32 : e0%32+16]
			xs := xb[e0 : e0+16]
			var a float32
			for l := range 16 {
				v := int(q[l]>>shift&3) - 4 + 4*int(hm[l]>>hbit&1)
				a += float32(v) * xs[l]
			}
			sum += float32(scaleQ3K(g, s)) * a
		}
		acc += d * sum
	}
	return acc
}

func dotIQ4XS(row []byte, x []float32) float32 {
	var acc float32
	for b := 0; b < len(x)/256; b++ {
		blk := row[136*b : 136*b+136]
		d := f16At(blk)
		sh := binary.LittleEndian.Uint16(blk[2:])
		sl := blk[4:8]
		var sum float32
		for ib := range 8 {
			ls := int((sl[ib/2]>>(4*(ib%2)))&15) | int((sh>>(2*ib))&3)<<4
			q := blk[8+16*ib : 8+16*ib+16]
			lo := x[256*b+32*ib : 256*b+32*ib+16]
			hi := x[256*b+32*ib+16 : 256*b+32*ib+32]
			var s0, s1 float32
			for j := range 16 {
				s0 += float32(iq4Values[q[j]&15]) * lo[j]
				s1 += float32(iq4Values[q[j]>>4]) * hi[j]
			}
			sum += float32(ls-32) * (s0 + s1)
		}
		acc += d * sum
	}
	return acc
}
