package dtype

// The portable int8 products: the definition of each type's arithmetic
// (see q8.go). Each adds one token's products with one packed super-block
// to the 16 rows' accumulators, group by group in the order given.

// f16s returns the f16 at b[2r:] as float32.
func f16s(b []byte, r int) float32 { return f16At(b[2*r:]) }

// Q8_0: P = Σ code·q over the block; acc += P·(d·D).
func refQ8_0(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32) {
	x = x[:32]
	for r := range PackRows {
		var p int32
		for s := range 8 {
			w := sb[32+64*s+4*r : 32+64*s+4*r+4]
			for j := range 4 {
				p += int32(int8(w[j]^0x80)) * int32(x[4*s+j])
			}
		}
		acc[r] = fma32(float32(p), float32(f16s(sb, r)*g[0].D), acc[r])
	}
}

// q4Block is the Q4_0 and IQ4_NL integer sum of one row: lo and hi map a
// nibble to its value.
func q4Block(sb []byte, x []int8, r int, val *[16]int32) int32 {
	var p int32
	for v := range 4 {
		w := sb[32+64*v+4*r : 32+64*v+4*r+4]
		for j := range 4 {
			p += val[w[j]&15]*int32(x[4*v+j]) + val[w[j]>>4]*int32(x[16+4*v+j])
		}
	}
	return p
}

var (
	q4Values = func() (t [16]int32) {
		for i := range t {
			t[i] = int32(i) - 8
		}
		return
	}()
	iq4Values32 = func() (t [16]int32) {
		for i := range t {
			t[i] = int32(iq4Values[i])
		}
		return
	}()
)

// Q4_0: codes less 8; acc += P·(d·D).
func refQ4_0(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32) {
	x = x[:32]
	for r := range PackRows {
		p := q4Block(sb, x, r, &q4Values)
		acc[r] = fma32(float32(p), float32(f16s(sb, r)*g[0].D), acc[r])
	}
}

// IQ4_NL: codes through the codebook; acc += P·(d·D).
func refIQ4NL(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32) {
	x = x[:32]
	for r := range PackRows {
		p := q4Block(sb, x, r, &iq4Values32)
		acc[r] = fma32(float32(p), float32(f16s(sb, r)*g[0].D), acc[r])
	}
}

// kGroup applies one Q4_K/Q5_K group: acc += P·(d·sc·D), then acc −= (dmin·m)·SD.
func kGroup(sb []byte, r, grp int, p int32, g *ActGroup, acc *float32) {
	ws := f16s(sb, r) * float32(sb[64+16*grp+r])
	wm := f16s(sb[32:], r) * float32(sb[192+16*grp+r])
	*acc = fma32(float32(p), float32(ws*g.D), *acc)
	*acc = fma32(-wm, g.SD, *acc)
}

// Q4_K: per 64-element chunk c, groups 2c (low nibbles) then 2c+1 (high).
func refQ4K(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32) {
	x = x[:256]
	for r := range PackRows {
		for c := range 4 {
			var p0, p1 int32
			for s := range 8 {
				w := sb[320+512*c+64*s+4*r : 320+512*c+64*s+4*r+4]
				for j := range 4 {
					p0 += int32(w[j]&15) * int32(x[64*c+4*s+j])
					p1 += int32(w[j]>>4) * int32(x[64*c+32+4*s+j])
				}
			}
			kGroup(sb, r, 2*c, p0, &g[2*c], &acc[r])
			kGroup(sb, r, 2*c+1, p1, &g[2*c+1], &acc[r])
		}
	}
}

// Q5_K: Q4_K with a fifth bit per code from the high-bit vectors.
func refQ5K(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32) {
	x = x[:256]
	for r := range PackRows {
		for c := range 4 {
			var p0, p1 int32
			for s := range 8 {
				w := sb[832+512*c+64*s+4*r : 832+512*c+64*s+4*r+4]
				h := sb[320+64*s+4*r : 320+64*s+4*r+4]
				for j := range 4 {
					lo := int32(w[j]&15) | int32(h[j]>>(2*c)&1)<<4
					hi := int32(w[j]>>4) | int32(h[j]>>(2*c+1)&1)<<4
					p0 += lo * int32(x[64*c+4*s+j])
					p1 += hi * int32(x[64*c+32+4*s+j])
				}
			}
			kGroup(sb, r, 2*c, p0, &g[2*c], &acc[r])
			kGroup(sb, r, 2*c+1, p1, &g[2*c+1], &acc[r])
		}
	}
}

// Q6_K: codes less 32, a scale per 16 elements. Per half h of 128
// elements, first the lower 16 of each of its four groups, then the upper
// 16: acc += P·(d·sc·D).
func refQ6K(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32) {
	x = x[:256]
	for r := range PackRows {
		d := f16s(sb, r)
		for h := range 2 {
			for u := range 2 {
				for g4 := range 4 {
					var p int32
					for s := 4 * u; s < 4*u+4; s++ {
						o := 64*s + 4*r
						lo := sb[288+1024*h+512*(g4&1)+o : 288+1024*h+512*(g4&1)+o+4]
						hb := sb[2336+512*h+o : 2336+512*h+o+4]
						for j := range 4 {
							q := int32(lo[j]>>(4*(g4>>1))&15) | int32(hb[j]>>(2*g4)&3)<<4
							p += (q - 32) * int32(x[128*h+32*g4+4*s+j])
						}
					}
					ws := d * float32(int8(sb[32+16*(8*h+2*g4+u)+r]))
					acc[r] = fma32(float32(p), float32(ws*g[4*h+g4].D), acc[r])
				}
			}
		}
	}
}

// IQ4_XS: codes through the codebook, a signed scale per group of 32:
// acc += P·(d·ls·D).
func refIQ4XS(sb []byte, x []int8, g []ActGroup, acc *[PackRows]float32) {
	x = x[:256]
	for r := range PackRows {
		d := f16s(sb, r)
		for grp := range 8 {
			var p int32
			for v := range 4 {
				w := sb[160+256*grp+64*v+4*r : 160+256*grp+64*v+4*r+4]
				for j := range 4 {
					p += iq4Values32[w[j]&15]*int32(x[32*grp+4*v+j]) + iq4Values32[w[j]>>4]*int32(x[32*grp+16+4*v+j])
				}
			}
			ws := d * float32(int8(sb[32+16*grp+r]))
			acc[r] = fma32(float32(p), float32(ws*g[grp].D), acc[r])
		}
	}
}

// productRef sets out[16·t + r] to the product of row r of tile with token
// m0+t of a, for t < T.
func productRef(p *Packed, tile []byte, a *Acts, m0, T int, out []float32) {
	f := p.f
	nsb := p.Cols / f.sb
	gs := f.sb / ActGroupSize
	for t := range T {
		var acc [PackRows]float32
		m := m0 + t
		x := a.Q[m*a.K : (m+1)*a.K]
		g := a.G[m*a.K/ActGroupSize : (m+1)*a.K/ActGroupSize]
		for b := range nsb {
			f.ref(tile[b*f.sbBytes:(b+1)*f.sbBytes], x[b*f.sb:(b+1)*f.sb], g[b*gs:(b+1)*gs], &acc)
		}
		copy(out[PackRows*t:PackRows*(t+1)], acc[:])
	}
}
