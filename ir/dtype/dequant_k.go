package dtype

import "encoding/binary"

// scaleMinK4 unpacks sub-block j's 6-bit scale and min from the 12 packed
// scale bytes of a Q4_K or Q5_K block.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&15 | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// scaleQ3K unpacks sub-block j's signed 6-bit scale (already less 32) from
// the 12 packed scale bytes of a Q3_K block.
func scaleQ3K(j int, s []byte) int {
	var lo byte
	if j < 8 {
		lo = s[j] & 15
	} else {
		lo = s[j-8] >> 4
	}
	hi := (s[8+j%4] >> (2 * (j / 4))) & 3
	return int(lo|hi<<4) - 32
}

func dequantQ2K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[84*b:84*b+84], dst[256*b:256*b+256]
		scales, qs := blk[0:16], blk[16:80]
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		for e := range 256 {
			h, r := e/128, e%128
			q := (qs[32*h+r%32] >> (2 * (r / 32))) & 3
			sc := scales[e/16]
			y[e] = d*float32(sc&15)*float32(q) - dmin*float32(sc>>4)
		}
	}
}

func dequantQ3K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[110*b:110*b+110], dst[256*b:256*b+256]
		hmask, qs, scales := blk[0:32], blk[32:96], blk[96:108]
		d := f16At(blk[108:])
		var ds [16]float32
		for j := range ds {
			ds[j] = d * float32(scaleQ3K(j, scales))
		}
		for e := range 256 {
			h, r := e/128, e%128
			q := int((qs[32*h+r%32] >> (2 * (r / 32))) & 3)
			if (hmask[e%32]>>(e/32))&1 == 0 {
				q -= 4
			}
			y[e] = ds[e/16] * float32(q)
		}
	}
}

func dequantQ4K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[144*b:144*b+144], dst[256*b:256*b+256]
		d, dmin := f16At(blk), f16At(blk[2:])
		scales, qs := blk[4:16], blk[16:144]
		for c := range 4 {
			sc0, m0 := scaleMinK4(2*c, scales)
			sc1, m1 := scaleMinK4(2*c+1, scales)
			d0, mm0 := d*float32(sc0), dmin*float32(m0)
			d1, mm1 := d*float32(sc1), dmin*float32(m1)
			q := qs[32*c : 32*c+32]
			o := y[64*c : 64*c+64]
			for l := range 32 {
				o[l] = d0*float32(q[l]&15) - mm0
				o[l+32] = d1*float32(q[l]>>4) - mm1
			}
		}
	}
}

func dequantQ5K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[176*b:176*b+176], dst[256*b:256*b+256]
		d, dmin := f16At(blk), f16At(blk[2:])
		scales, qh, qs := blk[4:16], blk[16:48], blk[48:176]
		for c := range 4 {
			sc0, m0 := scaleMinK4(2*c, scales)
			sc1, m1 := scaleMinK4(2*c+1, scales)
			d0, mm0 := d*float32(sc0), dmin*float32(m0)
			d1, mm1 := d*float32(sc1), dmin*float32(m1)
			q := qs[32*c : 32*c+32]
			o := y[64*c : 64*c+64]
			for l := range 32 {
				h0 := (qh[l] >> (2 * c)) & 1
				h1 := (qh[l] >> (2*c + 1)) & 1
				o[l] = d0*float32(q[l]&15|h0<<4) - mm0
				o[l+32] = d1*float32(q[l]>>4|h1<<4) - mm1
			}
		}
	}
}

func dequantQ6K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[210*b:210*b+210], dst[256*b:256*b+256]
		ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
		d := f16At(blk[208:])
		for e := range 256 {
			h, r := e/128, e%128
			g, l := r/32, r%32
			lo := ql[64*h+32*(g&1)+l]
			if g >= 2 {
				lo >>= 4
			}
			hi := (qh[32*h+l] >> (2 * g)) & 3
			q := int(lo&15|hi<<4) - 32
			y[e] = d * float32(int8(sc[e/16])) * float32(q)
		}
	}
}

func dequantIQ4XS(src []byte, dst []float32) {
	for b := 0; b < len(dst)/256; b++ {
		blk, y := src[136*b:136*b+136], dst[256*b:256*b+256]
		d := f16At(blk)
		sh := binary.LittleEndian.Uint16(blk[2:])
		sl, qs := blk[4:8], blk[8:136]
		for ib := range 8 {
			ls := int((sl[ib/2]>>(4*(ib%2)))&15) | int((sh>>(2*ib))&3)<<4
			dl := d * float32(ls-32)
			q := qs[16*ib : 16*ib+16]
			o := y[32*ib : 32*ib+32]
			for j := range 16 {
				o[j] = dl * float32(iq4Values[q[j]&15])
				o[j+16] = dl * float32(iq4Values[q[j]>>4])
			}
		}
	}
}
