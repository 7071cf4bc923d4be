package codegen

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// xqQuantize mirrors the kernel's activation stage for one row: int8
// quants and per group of 32 (dx, sum 0-15, sum 16-31, sum).
func xqQuantize(x []float32) ([]int8, [][4]float32) {
	q := make([]int8, len(x))
	meta := make([][4]float32, len(x)/32)
	for g := range meta {
		xs := x[32*g : 32*g+32]
		am := absMax(xs)
		// the same rounding as the 8-bit KV cache's
		quantBlock(xs, q[32*g:32*g+32])
		var s [4]float32 // sums of the 8-float chunks
		for c := range 4 {
			ch := xs[8*c : 8*c+8]
			s[c] = ((ch[0] + ch[1]) + (ch[2] + ch[3])) + ((ch[4] + ch[5]) + (ch[6] + ch[7]))
		}
		var is [2]int
		for i := range xs {
			is[i/16] += int(q[32*g+i])
		}
		meta[g] = [4]float32{am * (1.0 / 127), float32(is[0]), float32(is[1]), (s[0] + s[1]) + (s[2] + s[3])}
	}
	return q, meta
}

// dp4a mirrors the PTX instruction: c + Σ signed bytes of a × b.
func dp4a(a uint32, b []int8, c int32) int32 {
	for i := range 4 {
		c += int32(int8(a>>(8*i))) * int32(b[i])
	}
	return c
}

func le32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }

// xqRow mirrors the kernel's dot of repacked row r against quantised x.
func xqRow(t dtype.Type, rows, k, r int, w []byte, xq []int8, meta [][4]float32) float32 {
	nb := k / t.BlockElems()
	f16 := func(b []byte) float32 { return dtype.F16ToF32(binary.LittleEndian.Uint16(b)) }
	var acc float32
	switch t {
	case dtype.Q8_0:
		for uu := range k / 16 {
			q := w[(r*(k/16)+uu)*16:]
			var s int32
			for c := range 4 {
				s = dp4a(le32(q, c), xq[16*uu+4*c:], s)
			}
			d := f16(w[rows*k+2*(r*nb+uu/2):])
			acc += d * meta[uu/2][0] * float32(s)
		}
	case dtype.Q4_0, dtype.Q4_K, dtype.Q6_K:
		for uu := range k / 32 {
			q := w[(r*(k/32)+uu)*16:]
			x0, x1 := xq[32*uu:], xq[32*uu+16:]
			m := meta[uu]
			switch t {
			case dtype.Q4_0, dtype.Q4_K:
				var s int32
				for c := range 4 {
					s = dp4a(le32(q, c)&0x0f0f0f0f, x0[4*c:], s)
				}
				for c := range 4 {
					s = dp4a(le32(q, c)>>4&0x0f0f0f0f, x1[4*c:], s)
				}
				sc := float32(s) - 8*(m[1]+m[2])
				if t == dtype.Q4_0 {
					acc += f16(w[rows*nb*16+2*(r*nb+uu):]) * m[0] * sc
					continue
				}
				hd := w[rows*nb*128+16*(r*nb+uu/8):]
				ks, km := kScaleMin(uu%8, hd[4:16])
				d, dm := f16(hd)*float32(ks), f16(hd[2:])*float32(km)
				acc += d*m[0]*sc + (8*d-dm)*m[3]
			case dtype.Q6_K:
				h := w[rows*nb*128+8*(r*(k/32)+uu):]
				var s0, s1 int32
				for c := range 4 {
					hw := le32(h, c/2)
					hl, hh := hw<<4, hw<<2
					if c%2 == 1 {
						hl, hh = hw, hw>>2
					}
					l := le32(q, c)
					lo := l&0x0f0f0f0f | hl&0x30303030
					hi := l>>4&0x0f0f0f0f | hh&0x30303030
					s0 = dp4a(lo, x0[4*c:], s0)
					s1 = dp4a(hi, x1[4*c:], s1)
				}
				sc := w[rows*nb*192+2*(r*(k/32)+uu):]
				d := f16(w[rows*nb*208+2*(r*nb+uu/8):])
				acc += d * m[0] * (float32(int8(sc[0]))*(float32(s0)-32*m[1]) + float32(int8(sc[1]))*(float32(s1)-32*m[2]))
			}
		}
	}
	return acc
}

// randRepacked returns n random rows of k elements of type ty in the
// file's layout and repacked.
func randRepacked(t *testing.T, r *rand.Rand, ty dtype.Type, n, k int) (w, rp []byte) {
	t.Helper()
	src := make([]float32, n*k)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	w, err := dtype.Quantize(ty, src)
	require.NoError(t, err)
	rp, err = Repack(ty, n, k, w)
	require.NoError(t, err)
	return w, rp
}

// TestXQMirror checks the int8-activation GEMV's arithmetic, mirrored in
// Go over the repacked layout, against the float product on the file's
// layout: within XQTol, and far from it (so the tolerance means something).
func TestXQMirror(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, ty := range RepackTypes {
		t.Run(ty.String(), func(t *testing.T) {
			const rows, k = 64, 1024
			w, rp := randRepacked(t, r, ty, rows, k)
			x := make([]float32, k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			xq, meta := xqQuantize(x)
			rb, _ := ty.RowBytes(k)
			got, want := make([]float32, rows), make([]float32, rows)
			for i := range rows {
				want[i] = dtype.Dot(ty, w[i*rb:(i+1)*rb], x)
				got[i] = xqRow(ty, rows, k, i, rp, xq, meta)
			}
			e := RelErr(got, want)
			t.Logf("%v: rel. L2 error %.3g", ty, e)
			require.Less(t, e, XQTol/2)
			require.Greater(t, e, 1e-5, "int8 activations cannot be exact")
		})
	}
}

// TestParseGEMVArm: the String form of every arm parses back to the arm.
func TestParseGEMVArm(t *testing.T) {
	for _, a := range []GEMVArm{DefaultGEMVArm, DefaultRepackArm, DefaultXQArm, DefaultXQBatchArm,
		{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1, Layout: 1, XQ: 1, BatchRows: 8, RowsPerWarp: 4},
		DefaultXQGlobalOneArm, DefaultXQGlobalBatchArm, DefaultXQMMAArm,
		{Threads: 128, RowsPerBlock: 4, Unroll: 4, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 16, RowsPerWarp: 2},
		{Threads: 512, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 12, RowsPerWarp: 2},
		{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 8, RowsPerWarp: 2, Prefetch: 1}} {
		b, err := ParseGEMVArm(a.String())
		require.NoError(t, err, a.String())
		require.Equal(t, a, b)
	}
	for _, s := range []string{"", "t256", "t256_r8_u4_s1_x1", "t256_r8_u4_s1_l1_qx", "t100_r8_u4_s1", "t256_r8_u4_s1_w2",
		"t256_r8_u1_s1_l1_g16_q16", "t128_r4_u4_s1_l1_m16_w3", "t128_r4_u4_s1_l1_m16_g16",
		"t512_r2_u1_s1_l1_g16",      // XQ 2: one warp a row
		"t512_r1_u1_s1_l1_m16_w4",   // XQ 3: 60 KiB of split sums (15 warps × 4 tiles × 2 token tiles)
		"t256_r8_u1_s1_l1_g1_w4_f1", // prefetch: one row a block has no next row
		"t256_r8_u1_s1_l1_m16_f1",   // prefetch: XQ 2 only
		"t256_r8_u1_s1_l1_g16_f2"} {
		_, err := ParseGEMVArm(s)
		require.Error(t, err, s)
	}
}

// TestXQDeferredNorm checks the arithmetic of the norm's rows (XQuant
// ProNorm, XQEnds.QuantOut and NormIn), mirrored in Go: quantising x·nw
// per group and scaling the product by 1/rms from the groups' sums of
// squares gives what quantising the normalised row gives (within float
// rounding: the int8 values agree but for rounding ties), and the product
// of the normalised row within XQTol.
func TestXQDeferredNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const eps = 1e-5
	for _, ty := range RepackTypes {
		t.Run(ty.String(), func(t *testing.T) {
			const rows, k = 64, 1024
			w, rp := randRepacked(t, r, ty, rows, k)
			x, nw := make([]float32, k), make([]float32, k)
			for i := range x {
				x[i] = 3 * float32(r.NormFloat64())
				nw[i] = float32(r.NormFloat64())
			}
			// the deferred rows: x·nw, and each group's Σx²
			z := make([]float32, k)
			ssq := make([]float32, k/32)
			for i := range x {
				z[i] = x[i] * nw[i]
				ssq[i/32] += x[i] * x[i]
			}
			var total float32
			for _, v := range ssq {
				total += v
			}
			rn := float32(1 / math.Sqrt(float64(total/k+eps)))
			zq, zmeta := xqQuantize(z)
			// the normalised row, quantised as it is
			_, y := RefRMSNormAdd(k, eps, false, x, nil, nw)
			yq, ymeta := xqQuantize(y)
			diff := 0
			for i := range zq {
				if zq[i] != yq[i] {
					diff++
				}
			}
			require.LessOrEqual(t, diff, k/100, "int8 values of x·nw and of the normalised row")
			rb, _ := ty.RowBytes(k)
			got, direct, want := make([]float32, rows), make([]float32, rows), make([]float32, rows)
			for i := range rows {
				got[i] = rn * xqRow(ty, rows, k, i, rp, zq, zmeta)
				direct[i] = xqRow(ty, rows, k, i, rp, yq, ymeta)
				want[i] = dtype.Dot(ty, w[i*rb:(i+1)*rb], y)
			}
			require.Less(t, RelErr(got, direct), 1e-3, "deferred 1/rms against quantising the normalised row")
			e := RelErr(got, want)
			t.Logf("%v: %d of %d int8 values differ; rel. L2 error %.3g", ty, diff, k, e)
			require.Less(t, e, XQTol/2)
		})
	}
}

// TestGateUpRow: a SwiGLUOut product takes 32 gate rows, then the same
// 32 up rows, and so on, each row once.
func TestGateUpRow(t *testing.T) {
	const n = 128
	seen := map[int]bool{}
	for i := range n {
		q, j := i/64, i%64
		want := 32*q + j // gate row
		if j >= 32 {
			want = n/2 + 32*q + j - 32 // up row
		}
		require.Equal(t, want, GateUpRow(i, n), "row %d", i)
		seen[GateUpRow(i, n)] = true
	}
	require.Len(t, seen, n)
}

// TestGEMVXQRopeEnds: the RoPE epilogue is generated for XQ 2 arms with
// pairs of weight rows a warp and refused, with ErrUnsupported, for the
// tensor-core arm, one row a warp, a residual product, NeoX pairs, an odd
// first column and columns past the fused row.
func TestGEMVXQRopeEnds(t *testing.T) {
	rs := RopeShape{Heads: 4, HeadsKV: 2, HeadDim: 64, RopeDim: 64, Cache: dtype.F16}
	e := XQEnds{NormIn: true, NormEps: 1e-6, Rope: true, RopeShape: rs, RopeCol0: 384}
	k, err := GEMVXQ(dtype.Q6_K, 128, 256, false, DefaultXQGlobalOneArm, e, rs.QKVStride())
	require.NoError(t, err)
	require.Contains(t, k.Name, "_rn_rope_h4_2_d64_r64_f16_c384")
	require.Equal(t, xqRopeParams(dtype.F16), k.Params)
	_, err = GEMVXQ(dtype.Q6_K, 128, 256, false, DefaultXQGlobalBatchArm, e, rs.QKVStride())
	require.NoError(t, err)
	one := DefaultXQGlobalOneArm
	one.RowsPerWarp = 0
	half := e
	half.RopeShape.Half = true
	odd, past := e, e
	odd.RopeCol0 = 383
	past.RopeCol0 = 448
	for name, c := range map[string]struct {
		arm      GEMVArm
		residual bool
		e        XQEnds
	}{"xq3": {DefaultXQMMAArm, false, e}, "one row a warp": {one, false, e}, "residual": {DefaultXQGlobalOneArm, true, e},
		"neox": {DefaultXQGlobalOneArm, false, half}, "odd column": {DefaultXQGlobalOneArm, false, odd}, "past the row": {DefaultXQGlobalOneArm, false, past}} {
		_, err := GEMVXQ(dtype.Q6_K, 128, 256, c.residual, c.arm, c.e, rs.QKVStride())
		require.ErrorIs(t, err, ErrUnsupported, name)
	}
}

// TestXQPrefetch: a prefetching batch arm loads activation row j+1 before
// it takes row j's dots, through the same xq_dot the other kernels reach
// through xq_use, and without a prefetch the loop is as before.
func TestXQPrefetch(t *testing.T) {
	arm := DefaultXQGlobalBatchArm
	arm.Prefetch = 1
	k, err := GEMVXQ(dtype.Q4_K, 512, 256, false, arm, XQEnds{}, 0)
	require.NoError(t, err)
	src := k.Source
	require.Contains(t, src, "return xq_dot(u, xq_load(xr, mt, uu));", "xq_use is the load and the dot")
	next := strings.Index(src, "xn = xq_load((const int4*)(xb + (j + 1) * XR), (const float4*)(xb + (j + 1) * XR + K), uu);")
	dot := strings.Index(src, "acc[0][j] = __fadd_rn(acc[0][j], xq_dot(w0, xc));")
	require.Positive(t, next)
	require.Greater(t, dot, next, "the next row's loads come before this row's dots")
	require.Contains(t, src, "if (j + 1 < MB && j + 1 < mrows)")
	require.NotContains(t, src, "xq_use(w0", "every row through the loaded groups")

	plain, err := GEMVXQ(dtype.Q4_K, 512, 256, false, DefaultXQGlobalBatchArm, XQEnds{}, 0)
	require.NoError(t, err)
	require.Contains(t, plain.Source, "acc[0][j] = __fadd_rn(acc[0][j], xq_use(w0, xr, mt, uu));")
	require.NotContains(t, plain.Source, "xn = xq_load(")
	require.Equal(t, strings.Replace(plain.Name, DefaultXQGlobalBatchArm.String(), arm.String(), 1), k.Name)
}

// TestXQMinBlocks: MinBlocks is __launch_bounds__'s second argument on an
// XQ 2 kernel (named "_b" and the count) and changes nothing else of its
// source; more threads than 1024 a multiprocessor's worth, or another kind
// of arm, is refused.
func TestXQMinBlocks(t *testing.T) {
	for _, base := range []GEMVArm{DefaultXQGlobalOneArm, DefaultXQGlobalBatchArm} {
		arm := base
		arm.MinBlocks = 4
		require.NoError(t, arm.Validate())
		k, err := GEMVXQ(dtype.Q6_K, 4096, 11008, true, arm, XQEnds{}, 0)
		require.NoError(t, err)
		plain, err := GEMVXQ(dtype.Q6_K, 4096, 11008, true, base, XQEnds{}, 0)
		require.NoError(t, err)
		require.Equal(t, strings.Replace(plain.Name, base.String(), base.String()+"_b4", 1), k.Name)
		require.Contains(t, k.Source, "__launch_bounds__(256, 4) "+k.Name+"(")
		require.Equal(t, strings.ReplaceAll(plain.Source, base.String(), arm.String()),
			strings.Replace(k.Source, "__launch_bounds__(256, 4)", "__launch_bounds__(256)", 1), "only the bounds differ")
		p, err := ParseGEMVArm(arm.String())
		require.NoError(t, err)
		require.Equal(t, arm, p)
		require.Equal(t, arm, GEMVArmOf(arm.Point()))
	}
	wide := DefaultXQGlobalOneArm.Split(2) // 512 threads
	wide.MinBlocks = 2
	require.NoError(t, wide.Validate())
	wide.MinBlocks = 4
	require.Error(t, wide.Validate(), "4 blocks of 512 threads: 32 registers a thread")
	mma := DefaultXQMMAArm
	mma.MinBlocks = 2
	require.Error(t, mma.Validate(), "XQ 2 arms only")
	gemv, err := SpaceByName("gemv")
	require.NoError(t, err)
	require.NoError(t, gemv.Valid(DefaultXQGlobalBatchArm.Point()), "entries recorded before the knob stay valid")
}
