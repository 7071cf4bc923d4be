package codegen

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// The low-bit dequantisers, mirrored in Go: each function below is the
// emitted dq32_<type> line for line (loads, shifts, the float operations
// in the kernel's order and rounding), and lowBitLines are the lines of
// the emitted source each mirror stands for. Q2_K's dd * q - mm may run as
// an fma on the device: the mirror checks that the product is exact, so
// both roundings agree.

func le16(b []byte) uint32 { return uint32(binary.LittleEndian.Uint16(b)) }

// iq4Value mirrors iq4_value (bytePerm: gemv_mmah_test.go).
func iq4Value(q uint32) float32 {
	lo := bytePerm(iq4Words[0], iq4Words[1], q&7)
	hi := bytePerm(iq4Words[2], iq4Words[3], q&7)
	if q&8 != 0 {
		return float32(int8(hi))
	}
	return float32(int8(lo))
}

func mirrorQ2K(row []byte, u int, v []float32) {
	b := row[84*(u>>3):]
	j := u & 7
	d := dtype.F16ToF32(uint16(le16(b[80:])))
	dm := dtype.F16ToF32(uint16(le16(b[82:])))
	s := le16(b[2*j:])
	d0, m0 := d*float32(s&15), dm*float32((s>>4)&15)
	d1, m1 := d*float32((s>>8)&15), dm*float32(s>>12)
	qp := b[16+32*(j>>2):]
	shift := 2 * (j & 3)
	for i := 0; i < 8; i++ {
		x := le32(qp, i) >> shift
		dd, mm := d1, m1
		if i < 4 {
			dd, mm = d0, m0
		}
		for k := 0; k < 4; k++ {
			q := float32((x >> (8 * k)) & 3)
			if p := float32(dd * q); float64(p) != float64(dd)*float64(q) {
				panic("Q2_K product not exact: an fma would round differently")
			}
			v[4*i+k] = float32(dd*q) - mm
		}
	}
}

func mirrorQ3K(row []byte, u int, v []float32) {
	b := row[110*(u>>3):]
	j := u & 7
	d := dtype.F16ToF32(uint16(le16(b[108:])))
	sc := b[96:]
	a, ls, hs := (2*j)&7, 4*(j>>2), 2*(j>>1)
	d0 := d * float32(int(((sc[a]>>ls)&15)|(((sc[8+(a&3)]>>hs)&3)<<4))-32)
	d1 := d * float32(int(((sc[a+1]>>ls)&15)|(((sc[9+(a&3)]>>hs)&3)<<4))-32)
	qp, hp := b[32+32*(j>>2):], b
	shift := 2 * (j & 3)
	bit := func(h uint32) int {
		if h&1 != 0 {
			return 0
		}
		return 4
	}
	for i := 0; i < 16; i++ {
		x, h := le16(qp[2*i:])>>shift, le16(hp[2*i:])>>j
		dd := d1
		if i < 8 {
			dd = d0
		}
		v[2*i] = dd * float32(int(x&3)-bit(h))
		v[2*i+1] = dd * float32(int((x>>8)&3)-bit(h>>8))
	}
}

func mirrorIQ4NL(row []byte, u int, v []float32) {
	b := row[18*u:]
	d := dtype.F16ToF32(uint16(le16(b)))
	for i := 0; i < 8; i++ {
		s := le16(b[2+2*i:])
		v[2*i] = d * iq4Value(s&15)
		v[2*i+1] = d * iq4Value((s>>8)&15)
		v[2*i+16] = d * iq4Value((s>>4)&15)
		v[2*i+17] = d * iq4Value(s>>12)
	}
}

func mirrorIQ4XS(row []byte, u int, v []float32) {
	b := row[136*(u>>3):]
	j := u & 7
	d := dtype.F16ToF32(uint16(le16(b)))
	sh := le16(b[2:])
	ls := int((uint32(b[4+(j>>1)]>>(4*(j&1))) & 15) | ((sh>>(2*j))&3)<<4)
	dl := d * float32(ls-32)
	qp := b[8+16*j:]
	for i := 0; i < 2; i++ {
		x := [2]uint32{le32(qp, 2*i), le32(qp, 2*i+1)}
		for k := 0; k < 8; k++ {
			c := x[k>>2] >> (8 * (k & 3))
			v[8*i+k] = dl * iq4Value(c&15)
			v[8*i+k+16] = dl * iq4Value((c>>4)&15)
		}
	}
}

var lowBitMirrors = map[dtype.Type]func(row []byte, u int, v []float32){
	dtype.Q2_K: mirrorQ2K, dtype.Q3_K: mirrorQ3K, dtype.IQ4_NL: mirrorIQ4NL, dtype.IQ4_XS: mirrorIQ4XS,
}

// lowBitLines are the emitted lines whose arithmetic the mirrors copy.
var lowBitLines = map[dtype.Type][]string{
	dtype.Q2_K: {
		"const float d0 = d * (float)(s & 15u), m0 = dm * (float)((s >> 4) & 15u);",
		"const float d1 = d * (float)((s >> 8) & 15u), m1 = dm * (float)(s >> 12);",
		"v[4 * i + k] = dd * (float)((x >> (8 * k)) & 3u) - mm;",
	},
	dtype.Q3_K: {
		"const float d0 = d * (float)((int)(((sc[a] >> ls) & 15) | (((sc[8 + (a & 3)] >> hs) & 3) << 4)) - 32);",
		"const float d1 = d * (float)((int)(((sc[a + 1] >> ls) & 15) | (((sc[9 + (a & 3)] >> hs) & 3) << 4)) - 32);",
		"v[2 * i] = dd * (float)((int)(x & 3u) - (h & 1u ? 0 : 4));",
		"v[2 * i + 1] = dd * (float)((int)((x >> 8) & 3u) - ((h >> 8) & 1u ? 0 : 4));",
	},
	dtype.IQ4_NL: {
		"v[2 * i] = d * iq4_value(s & 15u);",
		"v[2 * i + 17] = d * iq4_value(s >> 12);",
	},
	dtype.IQ4_XS: {
		"const int ls = (int)(((b[4 + (j >> 1)] >> (4 * (j & 1))) & 15) | (((sh >> (2 * j)) & 3u) << 4));",
		"const float dl = d * (float)(ls - 32);",
		"v[8 * i + k] = dl * iq4_value(c & 15u);",
		"v[8 * i + k + 16] = dl * iq4_value((c >> 4) & 15u);",
	},
}

// randomF16 is a random finite f16 (subnormals and the largest included).
func randomF16(r *rand.Rand) uint16 {
	for {
		h := uint16(r.Uint32())
		if h&0x7c00 != 0x7c00 {
			return h
		}
	}
}

// lowBitRows are rows of blocks of t: random bytes with finite random
// scales, and the quantiser's blocks of random floats.
func lowBitRows(t *testing.T, ty dtype.Type, r *rand.Rand, k int) [][]byte {
	rb, err := ty.RowBytes(k)
	require.NoError(t, err)
	raw := make([]byte, rb)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	heads := map[dtype.Type][]int{dtype.Q2_K: {80, 82}, dtype.Q3_K: {108}, dtype.IQ4_NL: {0}, dtype.IQ4_XS: {0}}[ty]
	for b := 0; b < rb; b += ty.BlockBytes() {
		for _, off := range heads {
			binary.LittleEndian.PutUint16(raw[b+off:], randomF16(r))
		}
	}
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	q, err := dtype.Quantize(ty, x)
	require.NoError(t, err)
	return [][]byte{raw, q}
}

// Every low-bit dequantiser's mirror gives ir/dtype's values bit for bit,
// on every 32-element unit of rows of several blocks, and the emitted
// source holds the lines the mirror copies.
func TestLowBitDequantMirror(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 3))
	for _, ty := range []dtype.Type{dtype.Q2_K, dtype.Q3_K, dtype.IQ4_NL, dtype.IQ4_XS} {
		t.Run(ty.String(), func(t *testing.T) {
			w := &Writer{}
			emitHelpers(w, []string{dqHelper(ty)})
			src := w.String()
			require.Contains(t, src, "void "+dqFunc(ty)+"(")
			for _, line := range lowBitLines[ty] {
				require.True(t, strings.Contains(src, line), "%v source lacks %q", ty, line)
			}
			const k = 4 * 256
			for rep := 0; rep < 50; rep++ {
				for _, row := range lowBitRows(t, ty, r, k) {
					want := make([]float32, k)
					require.NoError(t, dtype.Dequantize(ty, row, want))
					got := make([]float32, k)
					for u := 0; u < k/32; u++ {
						lowBitMirrors[ty](row, u, got[32*u:32*u+32])
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v element %d: mirror %g (%#x), dtype %g (%#x)", ty, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
			}
		})
	}
}

// The codebook words hold ir/dtype's IQ4 codebook: a block whose scale is
// one dequantises to the codes' values.
func TestIQ4Words(t *testing.T) {
	blk := make([]byte, 18)
	binary.LittleEndian.PutUint16(blk, dtype.F32ToF16(1))
	for i := 0; i < 16; i++ {
		blk[2+i] = byte(i) | byte(15-i)<<4
	}
	want := make([]float32, 32)
	require.NoError(t, dtype.Dequantize(dtype.IQ4_NL, blk, want))
	for q := uint32(0); q < 16; q++ {
		require.Equal(t, want[q], iq4Value(q), "code %d", q)
		require.Equal(t, want[16+15-q], iq4Value(q), "code %d", q)
		require.Equal(t, float32(iq4Codebook[q]), iq4Value(q))
	}
}

// The float GEMV on the file's layout of each low-bit type at the tiny
// shape (the decode product lowering gives them) is pinned by
// testdata/*.cu, its dequantiser with it.
func TestGoldenLowBit(t *testing.T) {
	for _, ty := range []dtype.Type{dtype.Q2_K, dtype.Q3_K, dtype.IQ4_NL, dtype.IQ4_XS} {
		k, err := GEMV(ty, 512, 256, false, DefaultGEMVArm)
		require.NoError(t, err)
		t.Run(k.Name, func(t *testing.T) {
			path := filepath.Join("testdata", k.Name+".cu")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./codegen -run TestGoldenLowBit -update")
			require.Equal(t, string(want), k.Source)
		})
	}
}

// The repacked layout and the arms that need it (int8 activations, the
// int8 and f16 tensor-core decode products) refuse the low-bit types with
// an error naming the type, and their float products on the file's layout
// are built.
func TestLowBitRefusals(t *testing.T) {
	for _, ty := range []dtype.Type{dtype.Q2_K, dtype.Q3_K, dtype.IQ4_NL, dtype.IQ4_XS} {
		require.False(t, Repackable(ty), ty)
		require.False(t, HalfProduct(ty, 4096), ty)
		require.False(t, UntunedPrologues(ty), ty)
		_, err := Repack(ty, 8, 256, make([]byte, 8*1024))
		require.ErrorIs(t, err, ErrUnsupported, ty)
		require.ErrorContains(t, err, ty.String())
		for _, a := range []GEMVArm{DefaultRepackArm, DefaultXQOneArm, DefaultXQGlobalOneArm, DefaultXQGlobalBatchArm, DefaultXQMMAArm, DefaultXQMMAPipeArm, DefaultXQHalfArm} {
			_, err := GEMV(ty, 512, 4096, false, a)
			require.ErrorIs(t, err, ErrUnsupported, "%v %v", ty, a)
			require.ErrorContains(t, err, ty.String(), a.String())
			_, err = GEMVXQ(ty, 512, 4096, false, a, XQEnds{}, 0)
			require.ErrorIs(t, err, ErrUnsupported, "%v %v", ty, a)
			require.ErrorContains(t, err, ty.String(), a.String())
		}
		for _, f := range []func() (*Kernel, error){
			func() (*Kernel, error) { return GEMV(ty, 512, 4096, true, DefaultGEMVArm) },
			func() (*Kernel, error) { return Embedding(ty, 4096, DefaultBlockArm) },
			func() (*Kernel, error) { return MatMulMMA(ty, 512, 4096, true, DefaultMMAArm) },
			func() (*Kernel, error) { return GemmSmall(ty, 512, 4096, true, DefaultGemmSmallArm) },
			func() (*Kernel, error) { return DequantBF16(ty, 512, 4096) },
		} {
			k, err := f()
			require.NoError(t, err, ty)
			require.Contains(t, k.Source, dqFunc(ty)+"(", k.Name)
		}
	}
}
