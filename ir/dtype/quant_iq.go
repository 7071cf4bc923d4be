package dtype

import "encoding/binary"

// iq4Index returns the index of the codebook entry nearest to v (the upper
// one on a tie), as the reference best_index_int8 does.
func iq4Index(v float32) uint8 {
	if v <= float32(iq4Values[0]) {
		return 0
	}
	if v >= float32(iq4Values[15]) {
		return 15
	}
	lo, hi := 0, 15
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if v < float32(iq4Values[mid]) {
			hi = mid
		} else {
			lo = mid
		}
	}
	if v-float32(iq4Values[hi-1]) < float32(iq4Values[hi])-v {
		return uint8(hi - 1)
	}
	return uint8(hi)
}

// iq4Tries is the half-width of the scale search of llama-quantize's IQ4
// encoders (ntry = 7).
const iq4Tries = 7

// iq4Scale finds the best scale for one 32-element group with weights x²,
// filling L with the codes of the first guess (the IQ4 reference search).
func iq4Scale(x []float32, L []uint8) float32 {
	mx, amax := absMax(x)
	if amax < groupMaxEps {
		return 0
	}
	sums := func(id float32, keep bool) (sqx, sq2 float32) {
		for j, v := range x {
			l := iq4Index(float32(id * v))
			if keep {
				L[j] = l
			}
			q := float32(iq4Values[l])
			wq := float32(float32(v*v) * q)
			sqx += float32(wq * v)
			sq2 += float32(wq * q)
		}
		return sqx, sq2
	}
	d := -mx / float32(iq4Values[0])
	sqx, sq2 := sums(1/d, true)
	d = sqx / sq2
	best := float32(d * sqx)
	for itry := -iq4Tries; itry <= iq4Tries; itry++ {
		id := float32(itry+int(iq4Values[0])) / mx
		sqx, sq2 = sums(id, false)
		if sq2 > 0 && float32(sqx*sqx) > float32(best*sq2) {
			d = sqx / sq2
			best = float32(d * sqx)
		}
	}
	return d
}

// packIQ4 stores 32 codes as 16 bytes, elements 0–15 in the low nibbles.
func packIQ4(L []uint8, q []byte) {
	for j := range 16 {
		q[j] = L[j] | L[j+16]<<4
	}
}

func quantIQ4NL(src []float32, dst []byte) {
	var L [32]uint8
	for b := 0; b < len(src)/32; b++ {
		x, blk := src[32*b:32*b+32], dst[18*b:18*b+18]
		d := iq4Scale(x, L[:])
		putF16(blk, d)
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for j, v := range x {
			L[j] = iq4Index(float32(id * v))
		}
		packIQ4(L[:], blk[2:18])
	}
}

func quantIQ4XS(src []float32, dst []byte) {
	var L [32]uint8
	var scales [8]float32
	for b := 0; b < len(src)/256; b++ {
		x, blk := src[256*b:256*b+256], dst[136*b:136*b+136]
		var maxScale, amaxScale float32
		for ib := range 8 {
			scales[ib] = iq4Scale(x[32*ib:32*ib+32], L[:])
			if a := abs32(scales[ib]); a > amaxScale {
				amaxScale, maxScale = a, scales[ib]
			}
		}
		d := -maxScale / 32
		putF16(blk, d)
		var id float32
		if d != 0 {
			id = 1 / d
		}
		var sh uint16
		sl := blk[4:8]
		for ib := range 8 {
			l := max(-32, min(31, nearestInt(float32(id*scales[ib]))))
			dl := d * float32(l)
			var idl float32
			if dl != 0 {
				idl = 1 / dl
			}
			for j, v := range x[32*ib : 32*ib+32] {
				L[j] = iq4Index(float32(idl * v))
			}
			packIQ4(L[:], blk[8+16*ib:8+16*ib+16])
			u := uint8(l + 32)
			if ib%2 == 0 {
				sl[ib/2] = u & 15
			} else {
				sl[ib/2] |= (u & 15) << 4
			}
			sh |= uint16(u>>4) << (2 * ib)
		}
		binary.LittleEndian.PutUint16(blk[2:], sh)
	}
}
