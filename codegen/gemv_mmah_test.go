package codegen

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// h2Of splits an f16x2 word into its halves (element 0 the low half).
func h2Of(w uint32) (lo, hi float64) {
	return float64(dtype.F16ToF32(uint16(w))), float64(dtype.F16ToF32(uint16(w >> 16)))
}

// h2Pack rounds lo and hi to f16 (cvt.rn.f16x2.f32, pack_h2).
func h2Pack(lo, hi float64) uint32 {
	return uint32(dtype.F32ToF16(float32(lo))) | uint32(dtype.F32ToF16(float32(hi)))<<16
}

// h2Op mirrors an f16x2 instruction: f on each half, rounded once to f16.
func h2Op(f func(a, b, c float64) float64, a, b, c uint32) uint32 {
	al, ah := h2Of(a)
	bl, bh := h2Of(b)
	cl, ch := h2Of(c)
	return h2Pack(f(al, bl, cl), f(ah, bh, ch))
}

var (
	hfma2 = func(a, b, c uint32) uint32 { return h2Op(func(x, y, z float64) float64 { return x*y + z }, a, b, c) }
	hmul2 = func(a, b uint32) uint32 { return h2Op(func(x, y, _ float64) float64 { return x * y }, a, b, 0) }
	hsub2 = func(a, b uint32) uint32 { return h2Op(func(x, y, _ float64) float64 { return x - y }, a, b, 0) }
)

// bytePerm mirrors __byte_perm(x, y, s) (prmt.b32 without modes).
func bytePerm(x, y, s uint32) uint32 {
	v := uint64(x) | uint64(y)<<32
	var d uint32
	for i := range 4 {
		d |= uint32(v>>(8*(s>>(4*i)&7))&0xff) << (8 * i)
	}
	return d
}

// mmaH16 mirrors mma.sync.m16n8k16.row.col.f32.f16.f16.f32 on a warp's
// fragments (PTX ISA layouts; lane = 4g + t): a[lane] = {A[g][2t, 2t+1],
// A[g+8][2t, 2t+1], A[g][2t+8, 2t+9], A[g+8][2t+8, 2t+9]}, b[lane] =
// {B[2t, 2t+1][g], B[2t+8, 2t+9][g]}; c[lane] += {C[g][2t], C[g][2t+1],
// C[g+8][2t], C[g+8][2t+1]}.
func mmaH16(a [32][4]uint32, b [32][2]uint32, c *[32][4]float32) {
	var A [16][16]float64
	var B [16][8]float64
	for lane := range 32 {
		g, t := lane/4, lane%4
		A[g][2*t], A[g][2*t+1] = h2Of(a[lane][0])
		A[g+8][2*t], A[g+8][2*t+1] = h2Of(a[lane][1])
		A[g][2*t+8], A[g][2*t+9] = h2Of(a[lane][2])
		A[g+8][2*t+8], A[g+8][2*t+9] = h2Of(a[lane][3])
		B[2*t][g], B[2*t+1][g] = h2Of(b[lane][0])
		B[2*t+8][g], B[2*t+9][g] = h2Of(b[lane][1])
	}
	C := func(i, j int) float32 {
		var s float64
		for k := range 16 {
			s += A[i][k] * B[k][j]
		}
		return float32(s)
	}
	for lane := range 32 {
		g, t := lane/4, lane%4
		c[lane][0] += C(g, 2*t)
		c[lane][1] += C(g, 2*t+1)
		c[lane][2] += C(g+8, 2*t)
		c[lane][3] += C(g+8, 2*t+1)
	}
}

// xhalfRows mirrors XHalf's stores (no prologue): chunk c of 8 elements
// (q = c % 4 of its group) writes its pairs (0, 2), (1, 3) at u32 words wd,
// wd+1 and (4, 6), (5, 7) at wd+4, wd+5, wd = 16(c/4) + 8(q%2) + 2(q/2).
func xhalfRows(x []float32, m, k int) []byte {
	out := make([]byte, m*XHRowBytes(k))
	for r := range m {
		row := out[r*XHRowBytes(k):]
		for c := range k / 8 {
			v := x[r*k+8*c : r*k+8*c+8]
			q := c & 3
			wd := 16*(c>>2) + 8*(q&1) + 2*(q>>1)
			put := func(i int, lo, hi float32) {
				binary.LittleEndian.PutUint32(row[4*i:], h2Pack(float64(lo), float64(hi)))
			}
			put(wd, v[0], v[2])
			put(wd+1, v[1], v[3])
			put(wd+4, v[4], v[6])
			put(wd+5, v[5], v[7])
		}
	}
	return out
}

// mmahWarp mirrors gemvMMAH's warp at weight rows r0.. r0+15 and tokens
// m0.. m0+mb-1 (mb/8 tiles, a block's rows: 16, or a wide arm's 32 or
// 64): the words it reads from the repacked weights and the XHalf rows
// (the same offsets as the generated code), the f16 decoding of q4h and
// q6h instruction by instruction, and the mma fragments; a tile past the
// step's rows is skipped. It returns y[token][row] for the rows and tokens
// it stores.
func mmahWarp(ty dtype.Type, n, k, r0, m0, m, mb int, w, xh []byte) map[[2]int]float32 {
	return mmahWarpOf(ty, n, k, r0, m0, m, mb, w, xh, 0, 1, false)
}

// mmahWarpOf is mmahWarp for the warp ks of a split of KS: its groups are
// those of super-blocks ks, ks + KS, … (the kernel's nsb loop). With stale
// the ring slots of tokens past the step's rows hold f16 NaN pairs (a
// small arm copies nothing there) instead of the step's last row.
func mmahWarpOf(ty dtype.Type, n, k, r0, m0, m, mb int, w, xh []byte, ks, nks int, stale bool) map[[2]int]float32 {
	rt := rpTypes[ty]
	upr, nb := k/rt.unitElems, k/ty.BlockElems()
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(w[off:]) }
	u16 := func(off int) uint16 { return binary.LittleEndian.Uint16(w[off:]) }
	f16 := func(off int) float32 { return dtype.F16ToF32(u16(off)) }
	andOr := func(a, b, c uint32) uint32 { return a&b | c }
	mrows := min(mb, m-m0)
	nts := (mb + 7) / 8
	acc := make([][32][4]float32, nts)
	for u := range k / 32 {
		if (u/8)%nks != ks {
			continue // another warp's super-block
		}
		var p [32][2][4]uint32 // lane, row (g, g+8), pair p0..p3
		for lane := range 32 {
			g, t := lane/4, lane%4
			for ri, row := range []int{min(r0+g, n-1), min(r0+g+8, n-1)} {
				pp := &p[lane][ri]
				switch ty {
				case dtype.Q4_K:
					q := u32(row*upr*16 + 16*u + 4*t)
					hd := n*nb*128 + 16*(row*nb+u>>3)
					ks, km := kScaleMin(u&7, w[hd+4:hd+16])
					fa, mn := f16(hd)*float32(ks), f16(hd+2)*float32(km)
					s, mm := h2Pack(float64(fa), float64(fa)), h2Pack(float64(-mn), float64(-mn))
					e := q >> 8
					pp[0] = hfma2(hsub2(andOr(q, 0x000f000f, 0x64006400), 0x64006400), s, mm)
					pp[2] = hfma2(hsub2(andOr(e, 0x000f000f, 0x64006400), 0x64006400), s, mm)
					pp[1] = hfma2(hfma2(andOr(q, 0x00f000f0, 0x64006400), 0x2c002c00, 0xd400d400), s, mm)
					pp[3] = hfma2(hfma2(andOr(e, 0x00f000f0, 0x64006400), 0x2c002c00, 0xd400d400), s, mm)
				case dtype.Q6_K:
					l := u32(row*upr*16 + 4*t + 4*4*u)
					h := u32(n*nb*128 + row*upr*8 + 4*(t>>1) + 4*2*u)
					hl, hh := h<<4, h<<2
					if t&1 == 1 {
						hl, hh = h, h>>2
					}
					lo := l&0x0f0f0f0f | hl&0x30303030
					hi := l>>4&0x0f0f0f0f | hh&0x30303030
					sc := u16(n*nb*192 + 2*(row*upr+u))
					d := f16(n*nb*208 + 2*(row*nb+u>>3))
					fa, fb := d*float32(int8(sc&0xff)), d*float32(int8(sc>>8))
					sa, sb := h2Pack(float64(fa), float64(fa)), h2Pack(float64(fb), float64(fb))
					pp[0] = hmul2(hsub2(bytePerm(lo, 0x64646464, 0x4240), 0x64206420), sa)
					pp[2] = hmul2(hsub2(bytePerm(lo, 0x64646464, 0x4341), 0x64206420), sa)
					pp[1] = hmul2(hsub2(bytePerm(hi, 0x64646464, 0x4240), 0x64206420), sb)
					pp[3] = hmul2(hsub2(bytePerm(hi, 0x64646464, 0x4341), 0x64206420), sb)
				}
			}
		}
		for nt := range nts {
			if 8*nt >= mrows {
				continue // the kernel's "8 * nt < mrows"
			}
			var b [32][4]uint32
			for lane := range 32 {
				g, t := lane/4, lane%4
				tok := m0 + min(8*nt+g, mrows-1) // the ring holds the last row for tokens past the block's
				if stale && 8*nt+g >= mrows {
					b[lane] = [4]uint32{0x7e007e00, 0x7e007e00, 0x7e007e00, 0x7e007e00}
					continue
				}
				for i := range 4 {
					b[lane][i] = binary.LittleEndian.Uint32(xh[tok*XHRowBytes(k)+64*u+16*t+4*i:])
				}
			}
			var a0, a1 [32][4]uint32
			var b0, b1 [32][2]uint32
			for lane := range 32 {
				pa, pb := p[lane][0], p[lane][1]
				a0[lane] = [4]uint32{pa[0], pb[0], pa[2], pb[2]}
				a1[lane] = [4]uint32{pa[1], pb[1], pa[3], pb[3]}
				b0[lane] = [2]uint32{b[lane][0], b[lane][1]}
				b1[lane] = [2]uint32{b[lane][2], b[lane][3]}
			}
			mmaH16(a0, b0, &acc[nt])
			mmaH16(a1, b1, &acc[nt])
		}
	}
	out := map[[2]int]float32{}
	for nt := range nts {
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

// TestHalfPos: XHalf's store formula puts element e of each group at
// HalfPos(e), a permutation of the group.
func TestHalfPos(t *testing.T) {
	const k = 64
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(i)
	}
	row := xhalfRows(x, 1, k)
	seen := map[int]bool{}
	for e := range k {
		p := 32*(e/32) + HalfPos(e%32)
		require.False(t, seen[p], "position %d twice", p)
		seen[p] = true
		require.Equal(t, float32(e), dtype.F16ToF32(binary.LittleEndian.Uint16(row[2*p:])), "element %d", e)
	}
}

// TestMMAHMirror checks the f16 tensor-core product's design: its loads
// from the repacked weights and the XHalf rows, the f16 decoding of the
// Q4_K and Q6_K words and the mma fragments, mirrored in Go with the PTX
// layouts, give each (token, row) the float product within HalfTol (and
// not exactly, nor when the rows are stored in plain order: the order of
// the k slots must be the weights'), for ragged rows and a ragged tile.
func TestMMAHMirror(t *testing.T) {
	for _, mb := range []int{16, 32, 64} {
		mmahMirror(t, mb, map[int]int{16: 11, 32: 27, 64: 70}[mb])
	}
}

// mmahMirror is TestMMAHMirror for blocks of mb rows over a step of m.
func mmahMirror(t *testing.T, mb, m int) {
	r := rand.New(rand.NewPCG(41, uint64(mb)))
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
		t.Run(fmt.Sprintf("%v/mb%d", ty, mb), func(t *testing.T) {
			const n, k = 40, 512
			w, rp := randRepacked(t, r, ty, n, k)
			x := make([]float32, m*k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			want, err := RefMatMul(ty, n, k, w, x, m, nil, false)
			require.NoError(t, err)
			run := func(xh []byte) []float32 {
				got := make([]float32, m*n)
				seen := 0
				for m0 := 0; m0 < m; m0 += mb {
					for r0 := 0; r0 < n; r0 += 16 {
						for tok, v := range mmahWarp(ty, n, k, r0, m0, m, mb, rp, xh) {
							got[tok[0]*n+tok[1]] = v
							seen++
						}
					}
				}
				require.Equal(t, n*m, seen, "every (token, row) stored once")
				return got
			}
			e := RelErr(run(xhalfRows(x, m, k)), want)
			t.Logf("%v: relative error %.3g (HalfTol %.3g)", ty, e, HalfTol)
			require.Less(t, e, HalfTol)
			require.Greater(t, e, 1e-6, "f16 rounding leaves a trace")
			plain := make([]byte, m*XHRowBytes(k))
			for i, v := range x {
				binary.LittleEndian.PutUint16(plain[2*i:], dtype.F32ToF16(v))
			}
			require.Greater(t, RelErr(run(plain), want), 0.5, "rows in plain order")
		})
	}
}

// TestMMAHKernel: the f16 product's arms parse and validate, its weights
// are copied before the wait for the previous kernel and its activations
// after, its ring runs the pipelined schedule (simulatePipe), the launch
// asks for its shared memory, and what it does not cover is refused.
func TestMMAHKernel(t *testing.T) {
	a, err := ParseGEMVArm("t512_r1_u2_s1_l1_h16_w2_p2")
	require.NoError(t, err)
	require.Equal(t, DefaultXQHalfArm, a)
	require.Equal(t, "t512_r1_u2_s1_l1_h16_w2_p2", a.String())
	_, err = ParseGEMVArm("t512_r1_u2_s1_l1_h16_m16_w2_p2")
	require.ErrorIs(t, err, ErrUnsupported)
	nostage := DefaultXQHalfArm
	nostage.Stages = 0
	require.ErrorIs(t, nostage.Validate(), ErrUnsupported, "XQ 4 needs a ring")
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
		for _, s := range []string{"t512_r1_u2_s1_l1_h16_w2_p2", "t256_r1_u1_s1_l1_h16_w2_p4", "t256_r1_u1_s1_l1_h12_p8"} {
			a, err := ParseGEMVArm(s)
			require.NoError(t, err, s)
			k, err := GEMVXQ(ty, 1000, 11008, true, a, XQEnds{NormIn: true, NormEps: 1e-5}, 0)
			require.NoError(t, err, s)
			require.True(t, strings.HasSuffix(k.Name, "_res_"+s), k.Name)
			src := k.Source
			wait := strings.Index(src, "    pdl_wait();")
			require.Positive(t, wait, s)
			require.Less(t, strings.Index(src, "cp_cg16(wsa"), wait, "weights before the wait")
			require.Greater(t, strings.Index(src, "cp_ca16(wsa"), wait, "activations after it")
			require.NotContains(t, src, "srn[", "the rows are normalised already")
			require.Equal(t, 2*8*a.rowsPerWarp(), strings.Count(src, "mma_h16(acc["), "two mma a tile and group")
			g := k.Launch(Dims{Tokens: 20})
			require.Equal(t, [3]uint32{uint32(ceilDiv(1000, 16*a.rowsPerWarp())), uint32(ceilDiv(20, a.batchRows())), 1}, g.Grid)
			require.Equal(t, uint32(a.mmahShared(mma8PipeTypes[ty])), g.Shared)
			small, err := GEMVXQ(ty, 256, 2048, false, a, XQEnds{}, 0)
			require.NoError(t, err)
			for nsb := 1; nsb <= 5; nsb++ {
				require.NoError(t, simulatePipe(small.Source, a.Stages, nsb), "%v %s, %d super-blocks", ty, s, nsb)
			}
		}
	}
	viaGEMV, err := GEMV(dtype.Q4_K, 512, 256, false, DefaultXQHalfArm)
	require.NoError(t, err)
	require.Contains(t, viaGEMV.Source, "mma_h16(", "GEMV of an XQ 4 arm is the f16 product")
	for _, bad := range []struct {
		t dtype.Type
		k int
		e XQEnds
	}{{dtype.Q8_0, 4096, XQEnds{}}, {dtype.Q4_0, 4096, XQEnds{}}, {dtype.Q4_K, 4096, XQEnds{QuantOut: true}}, {dtype.Q4_K, 4096 + 32, XQEnds{}}} {
		_, err := GEMVXQ(bad.t, 4096, bad.k, bad.e.QuantOut, DefaultXQHalfArm, bad.e, 0)
		require.ErrorIs(t, err, ErrUnsupported, "%v K %d %+v", bad.t, bad.k, bad.e)
	}
	for _, p := range []Prologue{{}, {Kind: ProNorm, Eps: 1e-5}, {Kind: ProSwiGLU}} {
		x, err := XHalf(4096, p)
		require.NoError(t, err)
		q, err := XQuant(4096, p)
		require.NoError(t, err)
		require.Equal(t, q.Params, x.Params, "one launch takes either")
		require.Equal(t, q.Launch(Dims{Tokens: 16}), x.Launch(Dims{Tokens: 16}))
	}
}

// TestLowerHalfLarge: with the f16 tensor-core arm as Arms.GEMVLarge, in a
// program of GEMVLargeRows sequences every repacked product's large-step
// kernel is XQ 4 and every XQuant launch takes XHalf at those steps (the
// same parameters, a buffer wide enough for f16 rows); the products whose
// rows a residual epilogue quantised keep the int8 arm; RoPE stays a
// launch of its own; without the arm nothing reads f16 rows.
func TestLowerHalfLarge(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: GEMVLargeRows, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch}
	o.Arms.GEMVLarge = DefaultXQHalfArm
	// count returns the large kernels of the products (f16, int8) and the XQuant launches taking XHalf
	count := func(o LowerOptions) (f16, int8, xhalf, xquants int) {
		p, err := Lower(g, o)
		require.NoError(t, err)
		half := map[int]bool{} // by buffer: the rows XQuant (or XHalf at large steps) last wrote
		for _, ln := range p.Launches {
			k := p.Kernels[ln.Kernel]
			if k.Family == "gemv" && len(k.Params) > 1 && k.Params[1].Name == "xq" {
				in := ln.Args[1]
				require.Equal(t, half[in.Index], strings.Contains(p.Kernels[ln.KernelFor(GEMVLargeRows)].Name, "_h16_"),
					"%s reads the rows its producer writes at large steps", k.Name)
			}
			if strings.HasPrefix(k.Name, "xquant_") {
				xquants++
				out := ln.Args[len(ln.Args)-2]
				require.Equal(t, ArgBuffer, out.Kind)
				half[out.Index] = ln.Large > 0
				if ln.Large == 0 {
					continue
				}
				xhalf++
				h := p.Kernels[ln.Large-1]
				require.Equal(t, "xhalf_"+strings.TrimPrefix(k.Name, "xquant_"), h.Name)
				require.Equal(t, k.Params, h.Params)
				bf := p.Buffers.Buffers[out.Index]
				kk, err := strconv.Atoi(strings.Split(strings.TrimPrefix(k.Name, "xquant_k"), "_")[0])
				require.NoError(t, err)
				require.GreaterOrEqual(t, 4*bf.Width, XHRowBytes(kk), "%s: rows of %d f16", h.Name, kk)
				continue
			}
			if ln.Large == 0 {
				continue
			}
			switch name := p.Kernels[ln.Large-1].Name; {
			case strings.HasSuffix(name, "_h16_w2_p2"):
				f16++
			case strings.HasSuffix(name, "_m16_w2_p2"):
				int8++
			default:
				t.Fatalf("large kernel %s", name)
			}
		}
		return
	}
	f, i, x, xq := count(o)
	require.Zero(t, i, "no int8 large kernel")
	require.Equal(t, xq, x, "every XQuant launch has XHalf")
	require.Equal(t, 5*llama.Layers+1, f, "per layer q+k, v (Q6_K), o, gate/up, down; the output head")
	p, err := Lower(g, o)
	require.NoError(t, err)
	require.Equal(t, llama.Layers, launchesOf(p, "rope_kv"))
	rope := o
	rope.RopeInProduct = true
	p, err = Lower(g, rope)
	require.NoError(t, err)
	require.Equal(t, llama.Layers, launchesOf(p, "rope_kv"), "f16 large steps keep RopeKV")
	// the residual products quantise the next norm's rows: its products keep int8 rows
	epi := o
	epi.NoQuantOut = 0
	fe, ie, xe, xqe := count(epi)
	require.Positive(t, ie)
	require.Equal(t, f-2*llama.Layers, fe+ie, "the residual products quantising the next rows have none (TestLowerLargeArm)")
	require.Positive(t, xe)
	require.Less(t, xe, xqe, "the down products' SwiGLU rows: their readers quantise the next rows, with no XQ 4 kernel")
	plain := o
	plain.Arms.GEMVLarge = DefaultXQMMAPipeArm
	fp, ip, xp, _ := count(plain)
	require.Equal(t, []int{0, f, 0}, []int{fp, ip, xp})
	// the zero value is the f16 arm
	zero := o
	zero.Arms.GEMVLarge = GEMVArm{}
	fz, iz, xz, _ := count(zero)
	require.Equal(t, []int{f, 0, x}, []int{fz, iz, xz})
	// Q and K over Q4_K share their rows with V over Q8_0, which has no XQ 4
	// kernel: Lower falls back to the int8 arm for the whole program
	mixed := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q8_0))
	_, err = lower(mixed, o)
	require.ErrorIs(t, err, errHalfShared)
	p, err = Lower(mixed, o)
	require.NoError(t, err)
	for _, ln := range p.Launches {
		if ln.Large > 0 {
			require.NotContains(t, p.Kernels[ln.Large-1].Name, "_h16_", "no f16 large kernel after the fallback")
			require.NotContains(t, p.Kernels[ln.Large-1].Name, "xhalf")
		}
	}
}

// TestHalfReaderConflict: the readers of one XQuant launch must agree.
func TestHalfReaderConflict(t *testing.T) {
	l := &lowerer{o: LowerOptions{MaxTokens: GEMVLargeRows}, halfRows: map[int]halfUse{}}
	require.NoError(t, l.halfReader(xqInput{launch: -1}, true), "rows an epilogue wrote")
	require.NoError(t, l.halfReader(xqInput{launch: 3}, false))
	require.NoError(t, l.halfReader(xqInput{launch: 3}, false))
	require.ErrorContains(t, l.halfReader(xqInput{launch: 3}, true), "XQ 4")
	small := &lowerer{o: LowerOptions{MaxTokens: HalfLargeRows - 1}, halfRows: map[int]halfUse{}}
	require.NoError(t, small.halfReader(xqInput{launch: 3}, true), "no large steps")
}

// TestLowerHalfFrom: LowerOptions.HalfFrom moves the step rows from which
// the f16 products and their XHalf launches run, in programs of that many
// sequences; the int8 tensor-core arm keeps GEMVLargeRows.
func TestLowerHalfFrom(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 8, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch, HalfFrom: 4}
	// large returns the launches with a large kernel: f16 products, XHalf
	// launches, int8 products; each switching at from rows
	large := func(o LowerOptions, from int) (f16, xhalf, int8 int) {
		p, err := Lower(g, o)
		require.NoError(t, err)
		for _, ln := range p.Launches {
			if ln.Large == 0 {
				continue
			}
			name := p.Kernels[ln.Large-1].Name
			switch {
			case strings.Contains(name, "_h16_"):
				f16++
			case strings.HasPrefix(name, "xhalf_"):
				xhalf++
			default:
				int8++
			}
			require.Equal(t, ln.Large-1, ln.KernelFor(from), name)
			require.NotEqual(t, ln.Large-1, ln.KernelFor(from-1), name)
			require.Contains(t, p.String(), fmt.Sprintf("(k%d from %d rows)", ln.Large-1, from))
		}
		return
	}
	f, x, i := large(o, 4)
	require.Equal(t, []int{5*llama.Layers + 1, 0}, []int{f, i}, "per layer q+k, v (Q6_K), o, gate/up, down; the output head")
	require.Equal(t, 4*llama.Layers+1, x, "per layer the two norms, the attention output, the SwiGLU; the final norm")
	// the default: from HalfLargeRows
	def := o
	def.HalfFrom = 0
	fd, xd, id := large(def, HalfLargeRows)
	require.Equal(t, []int{f, x, i}, []int{fd, xd, id})
	// from more rows than the program's 8 sequences: none
	above := o
	above.HalfFrom = 9
	f, x, i = large(above, 9)
	require.Equal(t, []int{0, 0, 0}, []int{f, x, i})
	// the int8 arm runs from GEMVLargeRows whatever HalfFrom says
	int8 := o
	int8.Arms.GEMVLarge = DefaultXQMMAPipeArm
	f, x, i = large(int8, GEMVLargeRows)
	require.Equal(t, []int{0, 0, 0}, []int{f, x, i})
	int8.MaxSeqs = GEMVLargeRows
	f, x, i = large(int8, GEMVLargeRows)
	require.Equal(t, []int{0, 0, 5*llama.Layers + 1}, []int{f, x, i})
	// a program falling back to the int8 arm (V over Q8_0 shares Q and K's
	// rows) has no large kernel below GEMVLargeRows
	mixed := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q8_0))
	p, err := Lower(mixed, o)
	require.NoError(t, err)
	for _, ln := range p.Launches {
		require.Zero(t, ln.Large, p.Kernels[ln.Kernel].Name)
	}
	bad := o
	bad.HalfFrom = -1
	_, err = Lower(g, bad)
	require.ErrorIs(t, err, ErrLower)
}

// TestLowerBatchInvariant: with HalfFrom 1 every launch of a Q4_K/Q6_K
// decode program runs the same kernel at every step width, one row
// included, so a sequence's arithmetic does not depend on how many
// sequences share its step; by default the widths run different kernels.
func TestLowerBatchInvariant(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	// varying counts the launches whose kernel differs between widths
	varying := func(o LowerOptions) int {
		p, err := Lower(g, o)
		require.NoError(t, err)
		n := 0
		for _, ln := range p.Launches {
			k := ln.KernelFor(1)
			for _, rows := range []int{2, 3, 4, 8} {
				if ln.KernelFor(rows) != k {
					n++
					break
				}
			}
		}
		return n
	}
	o := LowerOptions{Class: Decode, MaxSeqs: 16, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch}
	require.Positive(t, varying(o), "by default one row runs its own kernels")
	o.BatchInvariant = true
	require.Zero(t, varying(o))
	// a type the f16 kernel does not cover (Q8_0 V beside Q4_K Q and K):
	// the batch kernel at every width, and no int8 tensor-core kernel
	mixed := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q8_0))
	def := o
	def.BatchInvariant = false
	pm, err := Lower(mixed, def)
	require.NoError(t, err)
	large := 0
	for _, ln := range pm.Launches {
		if ln.Large > 0 {
			large++
		}
	}
	require.Positive(t, large, "by default 16 rows run the int8 tensor-core kernel")
	for _, gr := range []*ir.Graph{mixed} {
		p, err := Lower(gr, o)
		require.NoError(t, err)
		for _, ln := range p.Launches {
			for _, rows := range []int{2, 3, 8, 16} {
				require.Equal(t, ln.KernelFor(1), ln.KernelFor(rows), p.Kernels[ln.Kernel].Name)
			}
		}
	}
	p, err := Lower(g, o)
	require.NoError(t, err)
	halves := 0
	for _, ln := range p.Launches {
		if strings.Contains(p.Kernels[ln.KernelFor(1)].Name, "_h16_") {
			halves++
		}
	}
	require.Equal(t, 5*llama.Layers+1, halves, "every product runs the f16 tensor-core kernel, one row too")
}

// TestLowerInvariantInt8: the int8 class of the batch-invariant
// configuration never runs an f16 (XQ 4) product: the repacked products
// are unsplit XQ 2 kernels up to 15 rows (a one-row kernel for one row,
// the batch kernel from two: unsplit, both add a row's lanes in one
// order) and from 16 rows the ordered int8 tensor-core kernel, which
// keeps that order too (gemv_mma8_order.go).
func TestLowerInvariantInt8(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 64, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch, BatchInvariant: true, InvariantInt8: true}
	p, err := Lower(g, o)
	require.NoError(t, err)
	xq2, ordered := 0, 0
	for _, ln := range p.Launches {
		for _, rows := range []int{2, 3, 8, 15} {
			require.Equal(t, ln.KernelFor(2), ln.KernelFor(rows), p.Kernels[ln.Kernel].Name)
		}
		name := p.Kernels[ln.Kernel].Name
		require.False(t, strings.HasPrefix(name, "xhalf"), "no f16 activation rows")
		if p.Kernels[ln.Kernel].Family != "gemv" || !strings.Contains(name, "_l1_") {
			require.Equal(t, ln.KernelFor(1), ln.KernelFor(64), name)
			continue
		}
		arm := func(rows int) GEMVArm { return kernelArm(t, p, ln.KernelFor(rows)) }
		for _, rows := range []int{1, 2} {
			require.Equal(t, 2, arm(rows).XQ, name)
			require.Equal(t, 1, arm(rows).Threads/32/arm(rows).RowsPerBlock, "%s: unsplit", name)
		}
		xq2++
		if arm(16) != arm(2) {
			require.Equal(t, DefaultXQOrderedPipeArm, arm(16), "from 16 rows: the (pipelined) ordered arm")
			require.Equal(t, ln.KernelFor(16), ln.KernelFor(64))
			ordered++
		}
	}
	require.Equal(t, 5*llama.Layers+1, xq2, "every repacked product runs unsplit XQ 2 kernels")
	require.Equal(t, 5*llama.Layers+1, ordered, "and the ordered kernel from 16 rows")
	// the switch alone does nothing: InvariantInt8 without BatchInvariant is the default
	def := o
	def.BatchInvariant = false
	pd, err := Lower(g, def)
	require.NoError(t, err)
	def.InvariantInt8 = false
	pd2, err := Lower(g, def)
	require.NoError(t, err)
	require.Equal(t, len(pd2.Kernels), len(pd.Kernels))
}

// TestLowerInvariantInt8Picks: with tunedb picks of split XQ 2 arms (one
// row and batch), of an f16 large arm and of an f16 small arm the int8
// invariant class runs XQ 2 kernels in the one-row pick's order (split
// over two warps, unroll 2) to 15 rows, the ordered arm of that order
// from 16, no f16 product.
func TestLowerInvariantInt8Picks(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	one := GEMVArm{Threads: 512, RowsPerBlock: 8, Unroll: 2, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 1, RowsPerWarp: 4}
	batch := GEMVArm{Threads: 256, RowsPerBlock: 4, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 8, RowsPerWarp: 2}
	require.NoError(t, one.Validate())
	require.NoError(t, batch.Validate())
	require.Equal(t, 2, one.kSplit())
	require.Equal(t, 2, batch.kSplit())
	picks := 0
	o := LowerOptions{Class: Decode, MaxSeqs: 64, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch, BatchInvariant: true, InvariantInt8: true,
		Pick: func(family, class string) (Point, bool) {
			if family != "gemv" {
				return nil, false
			}
			picks++
			switch {
			case strings.HasSuffix(class, "_batch"):
				return batch.Point(), true
			case strings.HasSuffix(class, "_large"), strings.HasSuffix(class, "_small"):
				return DefaultXQHalfArm.Point(), true
			case strings.HasSuffix(class, "_wide"):
				return nil, false
			}
			return one.Point(), true
		}}
	p, err := Lower(g, o)
	require.NoError(t, err)
	require.Positive(t, picks)
	ordered := 0
	for _, ln := range p.Launches {
		name := p.Kernels[ln.Kernel].Name
		if p.Kernels[ln.Kernel].Family != "gemv" || !strings.Contains(name, "_l1_") {
			continue
		}
		arm := func(rows int) GEMVArm { return kernelArm(t, p, ln.KernelFor(rows)) }
		require.Equal(t, one, arm(1), "%s: the one-row pick, split over two warps", name)
		b := batch
		b.Unroll = one.Unroll
		require.Equal(t, b, arm(2), "%s: the batch pick in the one-row pick's order", name)
		require.Equal(t, arm(2), arm(15), name)
		ord := DefaultXQOrderedSplitArm
		ord.Ordered = 22
		require.Equal(t, ord, arm(16), name)
		ordered++
	}
	require.Equal(t, 5*llama.Layers+1, ordered)
}
