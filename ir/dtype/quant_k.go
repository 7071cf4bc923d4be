package dtype

import "math"

// groupMaxEps is the magnitude below which a group counts as all zero.
const groupMaxEps = 1e-15

func sqrt32(v float32) float32 { return float32(math.Sqrt(float64(v))) }

// makeQKX2 fits x ≈ scale·L − min with L in 0..nmax by weighted least
// squares, trying nstep+1 candidate grids (the reference make_qkx2_quants).
// L receives the chosen codes; laux is scratch of the same length. The
// returned scale and min are both ≥ 0.
func makeQKX2(nmax int, x, w []float32, L, laux []uint8, rmin, rdelta float32, nstep int, useMAD bool) (scale, theMin float32) {
	lo, hi := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < len(x); i++ {
		lo = min(lo, x[i])
		hi = max(hi, x[i])
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	lo = min(lo, 0)
	if hi == lo {
		clear(L)
		return 0, -lo
	}
	fmax := float32(nmax)
	iscale := fmax / (hi - lo)
	scale = 1 / iscale
	errOf := func(s, m float32, q []uint8) float32 {
		var e float32
		for i, v := range x {
			diff := float32(s*float32(q[i])) + m - v
			if useMAD {
				diff = abs32(diff)
			} else {
				diff = float32(diff * diff)
			}
			e += float32(w[i] * diff)
		}
		return e
	}
	for i, v := range x {
		L[i] = uint8(max(0, min(nmax, nearestInt(float32(iscale*(v-lo))))))
	}
	best := errOf(scale, lo, L)
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + fmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := max(0, min(nmax, nearestInt(float32(iscale*(v-lo)))))
			laux[i] = uint8(l)
			fl := float32(l)
			wl := float32(w[i] * fl)
			sumL += wl
			sumL2 += float32(wl * fl)
			sumXL += float32(wl * v)
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			if cur := errOf(thisScale, thisMin, laux); cur < best {
				copy(L, laux)
				best, scale, lo = cur, thisScale, thisMin
			}
		}
	}
	return scale, -lo
}

// makeQX fits x ≈ scale·(L−nmax) with L−nmax in −nmax..nmax−1, weights x²,
// trying 19 candidate grids (the reference make_qx_quants, rmse_type 1).
func makeQX(nmax int, x []float32, L []int8) float32 {
	mx, amax := absMax(x)
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	fn := float32(nmax)
	code := func(iscale, v float32) int { return max(-nmax, min(nmax-1, nearestInt(float32(iscale*v)))) }
	sums := func(iscale float32) (sumLX, sumL2 float32) {
		for _, v := range x {
			fl := float32(code(iscale, v))
			w := float32(v * v)
			sumLX += float32(float32(w*v) * fl)
			sumL2 += float32(float32(w*fl) * fl)
		}
		return sumLX, sumL2
	}
	iscale := -fn / mx
	for i, v := range x {
		L[i] = int8(code(iscale, v) + nmax)
	}
	sumLX, sumL2 := sums(iscale)
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := float32(scale * sumLX)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fn + float32(0.1*float32(is))) / mx
		lx, l2 := sums(iscale)
		if l2 > 0 && float32(lx*lx) > float32(best*l2) {
			for i, v := range x {
				L[i] = int8(code(iscale, v) + nmax)
			}
			scale = lx / l2
			best = float32(scale * lx)
		}
	}
	return scale
}

// kWeights sets w to the Q4_K/Q5_K weights of one 32-element sub-block:
// rms(x) + |x|.
func kWeights(x, w []float32) {
	var sumX2 float32
	for _, v := range x {
		sumX2 += float32(v * v)
	}
	av := sqrt32(sumX2 / 32)
	for i, v := range x {
		w[i] = av + abs32(v)
	}
}

// quantK45 encodes one Q4_K (nmax 15) or Q5_K (nmax 31) super-block's
// header: d, dmin and the 12 packed scale bytes into hdr[0:16], and the
// codes into L.
func quantK45(x []float32, hdr []byte, L *[256]uint8, nmax int, rmin float32, nstep int) {
	var scales, mins [8]float32
	var w [32]float32
	var laux [32]uint8
	var maxScale, maxMin float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		kWeights(xs, w[:])
		scales[j], mins[j] = makeQKX2(nmax, xs, w[:], L[32*j:32*j+32], laux[:], rmin, 0.1, nstep, false)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	s := hdr[4:16]
	for j := range 8 {
		ls := uint8(min(63, uint8(nearestInt(float32(invScale*scales[j])))))
		lm := uint8(min(63, uint8(nearestInt(float32(invMin*mins[j])))))
		if j < 4 {
			s[j] = ls
			s[j+4] = lm
		} else {
			s[j+4] = ls&15 | lm<<4
			s[j-4] |= (ls >> 4) << 6
			s[j] |= (lm >> 4) << 6
		}
	}
	putF16(hdr, maxScale/63)
	putF16(hdr[2:], maxMin/63)
	d, dmin := f16At(hdr), f16At(hdr[2:])
	for j := range 8 {
		sc, m := scaleMinK4(j, s)
		dj := d * float32(sc)
		if dj == 0 {
			continue
		}
		dm := dmin * float32(m)
		for i := 32 * j; i < 32*j+32; i++ {
			L[i] = uint8(max(0, min(nmax, nearestInt((x[i]+dm)/dj))))
		}
	}
}

func quantQ4K(src []float32, dst []byte) {
	var L [256]uint8
	for b := 0; b < len(src)/256; b++ {
		x, blk := src[256*b:256*b+256], dst[144*b:144*b+144]
		quantK45(x, blk, &L, 15, -1, 20)
		q := blk[16:144]
		for c := range 4 {
			for l := range 32 {
				q[32*c+l] = L[64*c+l] | L[64*c+l+32]<<4
			}
		}
	}
}

func quantQ5K(src []float32, dst []byte) {
	var L [256]uint8
	for b := 0; b < len(src)/256; b++ {
		x, blk := src[256*b:256*b+256], dst[176*b:176*b+176]
		quantK45(x, blk, &L, 31, -0.5, 15)
		qh, ql := blk[16:48], blk[48:176]
		clear(qh)
		for c := range 4 {
			for l := range 32 {
				l1, l2 := L[64*c+l], L[64*c+l+32]
				qh[l] |= (l1>>4)<<(2*c) | (l2>>4)<<(2*c+1)
				ql[32*c+l] = l1&15 | (l2&15)<<4
			}
		}
	}
}

func quantQ6K(src []float32, dst []byte) {
	var L [256]int8
	var scales [16]float32
	for b := 0; b < len(src)/256; b++ {
		x, blk := src[256*b:256*b+256], dst[210*b:210*b+210]
		var maxScale, maxAbs float32
		for ib := range 16 {
			scales[ib] = makeQX(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
			if a := abs32(scales[ib]); a > maxAbs {
				maxAbs, maxScale = a, scales[ib]
			}
		}
		if maxAbs < groupMaxEps {
			clear(blk)
			continue
		}
		iscale := -128 / maxScale
		putF16(blk[208:], 1/iscale)
		sc := blk[192:208]
		for ib := range 16 {
			sc[ib] = byte(int8(min(127, nearestInt(float32(iscale*scales[ib])))))
		}
		d := f16At(blk[208:])
		for j := range 16 {
			dj := d * float32(int8(sc[j]))
			if dj == 0 {
				continue
			}
			for i := 16 * j; i < 16*j+16; i++ {
				L[i] = int8(max(-32, min(31, nearestInt(x[i]/dj))) + 32)
			}
		}
		ql, qh := blk[0:128], blk[128:192]
		for h := range 2 {
			o := 128 * h
			for l := range 32 {
				q1, q2, q3, q4 := uint8(L[o+l]), uint8(L[o+l+32]), uint8(L[o+l+64]), uint8(L[o+l+96])
				ql[64*h+l] = q1&15 | (q3&15)<<4
				ql[64*h+l+32] = q2&15 | (q4&15)<<4
				qh[32*h+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
	}
}

// makeQ3 fits x ≈ scale·(L−nmax) for Q3_K's 16-element groups, refining the
// first guess element by element (the reference make_q3_quants with rmse).
func makeQ3(nmax int, x []float32, L []int8) float32 {
	mx, amax := absMax(x)
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	iscale := -float32(nmax) / mx
	var sumLX, sumL2 float32
	for i, v := range x {
		l := max(-nmax, min(nmax-1, nearestInt(float32(iscale*v))))
		L[i] = int8(l)
		w := float32(v * v)
		sumLX += float32(float32(w*v) * float32(l))
		sumL2 += float32(float32(w*float32(l)) * float32(l))
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := float32(v * v)
			li := float32(L[i])
			slx := sumLX - float32(float32(w*v)*li)
			if slx <= 0 {
				continue
			}
			sl2 := sumL2 - float32(float32(w*li)*li)
			nl := max(-nmax, min(nmax-1, nearestInt(float32(v*sl2)/slx)))
			if nl == int(L[i]) {
				continue
			}
			fnl := float32(nl)
			slx += float32(float32(w*v) * fnl)
			sl2 += float32(float32(w*fnl) * fnl)
			if sl2 > 0 && float32(float32(slx*slx)*sumL2) > float32(float32(sumLX*sumLX)*sl2) {
				L[i] = int8(nl)
				sumLX, sumL2 = slx, sl2
				changed++
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range L {
		L[i] += int8(nmax)
	}
	return sumLX / sumL2
}

func quantQ3K(src []float32, dst []byte) {
	var L [256]int8
	var scales [16]float32
	for b := 0; b < len(src)/256; b++ {
		x, blk := src[256*b:256*b+256], dst[110*b:110*b+110]
		clear(blk)
		var maxScale, amax float32
		for j := range 16 {
			scales[j] = makeQ3(4, x[16*j:16*j+16], L[16*j:16*j+16])
			if a := abs32(scales[j]); a > amax {
				amax, maxScale = a, scales[j]
			}
		}
		hmask, qs, sc := blk[0:32], blk[32:96], blk[96:108]
		if maxScale != 0 {
			iscale := -32 / maxScale
			for j := range 16 {
				l := uint8(max(-32, min(31, int(int8(nearestInt(float32(iscale*scales[j])))))) + 32)
				if j < 8 {
					sc[j] = l & 15
				} else {
					sc[j-8] |= (l & 15) << 4
				}
				sc[8+j%4] |= (l >> 4) << (2 * (j / 4))
			}
			putF16(blk[108:], 1/iscale)
		}
		d := f16At(blk[108:])
		for j := range 16 {
			dj := d * float32(scaleQ3K(j, sc))
			if dj == 0 {
				continue
			}
			for i := 16 * j; i < 16*j+16; i++ {
				L[i] = int8(max(-4, min(3, nearestInt(x[i]/dj))) + 4)
			}
		}
		for e := range 256 {
			if L[e] > 3 {
				hmask[e%32] |= 1 << (e / 32)
				L[e] -= 4
			}
		}
		for h := range 2 {
			o := 128 * h
			for l := range 32 {
				qs[32*h+l] = uint8(L[o+l]) | uint8(L[o+l+32])<<2 | uint8(L[o+l+64])<<4 | uint8(L[o+l+96])<<6
			}
		}
	}
}

func quantQ2K(src []float32, dst []byte) {
	var L [256]uint8
	var laux [16]uint8
	var w [16]float32
	var scales, mins [16]float32
	for b := 0; b < len(src)/256; b++ {
		x, blk := src[256*b:256*b+256], dst[84*b:84*b+84]
		clear(blk)
		var maxScale, maxMin float32
		for j := range 16 {
			xs := x[16*j : 16*j+16]
			for i, v := range xs {
				w[i] = abs32(v)
			}
			scales[j], mins[j] = makeQKX2(3, xs, w[:], L[16*j:16*j+16], laux[:], -0.5, 0.1, 15, true)
			maxScale = max(maxScale, scales[j])
			maxMin = max(maxMin, mins[j])
		}
		sc, qs := blk[0:16], blk[16:80]
		if maxScale > 0 {
			iscale := 15 / maxScale
			for j := range 16 {
				sc[j] = uint8(nearestInt(float32(iscale * scales[j])))
			}
			putF16(blk[80:], maxScale/15)
		}
		if maxMin > 0 {
			iscale := 15 / maxMin
			for j := range 16 {
				sc[j] |= uint8(nearestInt(float32(iscale*mins[j]))) << 4
			}
			putF16(blk[82:], maxMin/15)
		}
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		for j := range 16 {
			dj := d * float32(sc[j]&15)
			if dj == 0 {
				continue
			}
			dm := dmin * float32(sc[j]>>4)
			for i := 16 * j; i < 16*j+16; i++ {
				L[i] = uint8(max(0, min(3, nearestInt((x[i]+dm)/dj))))
			}
		}
		for h := range 2 {
			o := 128 * h
			for l := range 32 {
				qs[32*h+l] = L[o+l] | L[o+l+32]<<2 | L[o+l+64]<<4 | L[o+l+96]<<6
			}
		}
	}
}
