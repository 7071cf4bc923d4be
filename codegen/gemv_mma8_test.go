package codegen

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// mmaS8 mirrors mma.sync.m16n8kK.row.col.s32.s8.s8 on a warp's fragments
// (PTX ISA layouts; lane = 4g + t): for K 32, a[lane] = {A[g][4t..],
// A[g+8][4t..], A[g][16+4t..], A[g+8][16+4t..]} and b[lane] = {B[4t..][g],
// B[16+4t..][g]}; for K 16, a[lane] = {A[g][4t..], A[g+8][4t..]} and
// b[lane] = {B[4t..][g]}. c[lane] += {C[g][2t], C[g][2t+1], C[g+8][2t],
// C[g+8][2t+1]}.
func mmaS8(kk int, a [32][4]uint32, b [32][2]uint32, c *[32][4]int32) {
	var A [16][32]int8
	var B [32][8]int8
	byteOf := func(w uint32, i int) int8 { return int8(w >> (8 * i)) }
	for lane := range 32 {
		g, t := lane/4, lane%4
		for i := range 4 {
			A[g][4*t+i] = byteOf(a[lane][0], i)
			A[g+8][4*t+i] = byteOf(a[lane][1], i)
			B[4*t+i][g] = byteOf(b[lane][0], i)
			if kk == 32 {
				A[g][16+4*t+i] = byteOf(a[lane][2], i)
				A[g+8][16+4*t+i] = byteOf(a[lane][3], i)
				B[16+4*t+i][g] = byteOf(b[lane][1], i)
			}
		}
	}
	C := func(i, j int) int32 {
		var s int32
		for k := range kk {
			s += int32(A[i][k]) * int32(B[k][j])
		}
		return s
	}
	for lane := range 32 {
		g, t := lane/4, lane%4
		c[lane][0] += C(g, 2*t)
		c[lane][1] += C(g, 2*t+1)
		c[lane][2] += C(g+8, 2*t)
		c[lane][3] += C(g+8, 2*t+1)
	}
}

// mma8Warp mirrors gemvMMA8's warp at weight rows r0.. r0+15 and tokens
// m0.. m0+15 (two tiles): its loads (the same offsets as the generated
// code), fragments and scaling. It returns y[token][row] for the rows and
// tokens it stores.
func mma8Warp(ty dtype.Type, n, k, r0, m0, m int, w []byte, xq []byte) map[[2]int]float32 {
	rt := rpTypes[ty]
	upr, nb := k/rt.unitElems, k/ty.BlockElems()
	xr := XQRowBytes(k)
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(w[off:]) }
	u16 := func(off int) uint16 { return binary.LittleEndian.Uint16(w[off:]) }
	f16 := func(off int) float32 { return dtype.F16ToF32(u16(off)) }
	meta := func(tok, u int) [4]float32 {
		var v [4]float32
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(xq[tok*xr+k+16*u+4*i:]))
		}
		return v
	}
	mrows := min(16, m-m0)
	var acc [2][32][4]float32
	for u := range k / 32 {
		// per lane: A words of rows ra (g) and rb (g+8), and their factors
		var lo, hi [32][2]uint32
		var fa, fb [32][2]float32
		for lane := range 32 {
			g, t := lane/4, lane%4
			for ri, row := range []int{min(r0+g, n-1), min(r0+g+8, n-1)} {
				switch ty {
				case dtype.Q4_0, dtype.Q4_K:
					wd := u32(row*upr*16 + 4*t + 16*u) // qp[4u], qp = unit 0 of the row + t
					lo[lane][ri], hi[lane][ri] = wd&0x0f0f0f0f, wd>>4&0x0f0f0f0f
					if ty == dtype.Q4_0 {
						fa[lane][ri] = f16(n*nb*16 + 2*(row*nb+u))
						break
					}
					hd := w[n*nb*128+16*(row*nb+u>>3):]
					ks, km := kScaleMin(u&7, hd[4:16])
					a := f16(n*nb*128+16*(row*nb+u>>3)) * float32(ks)
					fa[lane][ri], fb[lane][ri] = a, 8*a-f16(n*nb*128+16*(row*nb+u>>3)+2)*float32(km)
				case dtype.Q8_0:
					lo[lane][ri] = u32(row*upr*16 + 4*t + 4*8*u)
					hi[lane][ri] = u32(row*upr*16 + 4*t + 4*(8*u+4))
					fa[lane][ri] = f16(n*nb*32 + 2*(row*nb+u))
				case dtype.Q6_K:
					l := u32(row*upr*16 + 4*t + 4*4*u)
					h := u32(n*nb*128 + row*upr*8 + 4*(t>>1) + 4*2*u)
					hl, hh := h<<4, h<<2
					if t&1 == 1 {
						hl, hh = h, h>>2
					}
					lo[lane][ri] = l&0x0f0f0f0f | hl&0x30303030
					hi[lane][ri] = l>>4&0x0f0f0f0f | hh&0x30303030
					sc := u16(n*nb*192 + 2*(row*upr+u))
					d := f16(n*nb*208 + 2*(row*nb+u>>3))
					fa[lane][ri], fb[lane][ri] = d*float32(int8(sc&0xff)), d*float32(int8(sc>>8))
				}
			}
		}
		for nt := range 2 {
			var b [32][2]uint32
			var x0, x1 [32][4]float32
			for lane := range 32 {
				g, t := lane/4, lane%4
				if nbk := 8*nt + g; nbk < mrows {
					base := (m0+nbk)*xr + 4*t + 32*u
					b[lane] = [2]uint32{binary.LittleEndian.Uint32(xq[base:]), binary.LittleEndian.Uint32(xq[base+16:])}
				}
				if n0 := 8*nt + 2*t; n0 < mrows {
					x0[lane] = meta(m0+n0, u)
				}
				if n1 := 8*nt + 2*t + 1; n1 < mrows {
					x1[lane] = meta(m0+n1, u)
				}
			}
			if ty == dtype.Q6_K {
				var sa, ha [32][4]uint32
				for lane := range 32 {
					sa[lane] = [4]uint32{lo[lane][0], lo[lane][1]}
					ha[lane] = [4]uint32{hi[lane][0], hi[lane][1]}
				}
				var bl, bh [32][2]uint32
				for lane := range 32 {
					bl[lane][0], bh[lane][0] = b[lane][0], b[lane][1]
				}
				var s, h [32][4]int32
				mmaS8(16, sa, bl, &s)
				mmaS8(16, ha, bh, &h)
				for lane := range 32 {
					X := [4][4]float32{x0[lane], x1[lane], x0[lane], x1[lane]}
					for i := range 4 {
						r := i / 2
						acc[nt][lane][i] += X[i][0] * (fa[lane][r]*(float32(s[lane][i])-32*X[i][1]) + fb[lane][r]*(float32(h[lane][i])-32*X[i][2]))
					}
				}
				continue
			}
			var a [32][4]uint32
			for lane := range 32 {
				a[lane] = [4]uint32{lo[lane][0], lo[lane][1], hi[lane][0], hi[lane][1]}
			}
			var c [32][4]int32
			mmaS8(32, a, b, &c)
			for lane := range 32 {
				X := [4][4]float32{x0[lane], x1[lane], x0[lane], x1[lane]}
				for i := range 4 {
					r := i / 2
					if ty == dtype.Q8_0 {
						acc[nt][lane][i] += fa[lane][r] * X[i][0] * float32(c[lane][i])
						continue
					}
					acc[nt][lane][i] += fa[lane][r]*X[i][0]*(float32(c[lane][i])-8*(X[i][1]+X[i][2])) + fb[lane][r]*X[i][3]
				}
			}
		}
	}
	out := map[[2]int]float32{}
	for nt := range 2 {
		for lane := range 32 {
			g, t := lane/4, lane%4
			for i := range 4 {
				tok, row := 8*nt+2*t+i%2, r0+g+8*(i/2)
				if tok < mrows && row < n {
					out[[2]int{m0 + tok, row}] = acc[nt][lane][i]
				}
			}
		}
	}
	return out
}

// TestMMA8Mirror checks the int8 tensor-core product's data movement: its
// loads from the repacked weights and the XQuant rows, the mma fragments
// and the scaling, mirrored in Go with the PTX fragment layouts, give each
// (token, row) the dot of the dp4a products' mirror (xqRow), for every
// repacked type, ragged rows (the last warp's rows clamp to N-1) and a
// ragged token tile.
func TestMMA8Mirror(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, ty := range RepackTypes {
		t.Run(ty.String(), func(t *testing.T) {
			const n, k, m = 40, 512, 11
			_, rp := randRepacked(t, r, ty, n, k)
			xr := XQRowBytes(k)
			xq := make([]byte, m*xr)
			q8 := make([][]int8, m)
			metas := make([][][4]float32, m)
			for tok := range m {
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				q8[tok], metas[tok] = xqQuantize(x)
				for i, v := range q8[tok] {
					xq[tok*xr+i] = byte(v)
				}
				for g, mt := range metas[tok] {
					for i, v := range mt {
						binary.LittleEndian.PutUint32(xq[tok*xr+k+16*g+4*i:], math.Float32bits(v))
					}
				}
			}
			seen := 0
			for r0 := 0; r0 < n; r0 += 16 {
				for tok, v := range mma8Warp(ty, n, k, r0, 0, m, rp, xq) {
					want := xqRow(ty, n, k, tok[1], rp, q8[tok[0]], metas[tok[0]])
					require.InDelta(t, want, v, 1e-4*math.Max(1, math.Abs(float64(want))), "token %d row %d", tok[0], tok[1])
					seen++
				}
			}
			require.Equal(t, n*m, seen, "every (token, row) stored once")
		})
	}
}
