package dtype

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// q8Types are the types with int8 products.
var q8Types = []Type{Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS}

// fma32Exact is a·b + c rounded once to float32, in big.Float arithmetic.
func fma32Exact(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// TestFMA32 holds fma32 to the exactly rounded result on random operands,
// cancelling ones, ties of the float32 rounding and subnormals.
func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	f := func() float32 {
		return float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(40)-20))
	}
	check := func(a, b, c float32) {
		got, want := fma32(a, b, c), fma32Exact(a, b, c)
		require.Equal(t, math.Float32bits(want), math.Float32bits(got), "fma32(%g, %g, %g)", a, b, c)
	}
	for range 200000 {
		a, b := f(), f()
		check(a, b, f())
		// c near −a·b: the sum cancels to a few bits
		p := float32(a * b)
		check(a, b, -p)
		check(a, b, -math.Nextafter32(p, 0))
	}
	// a·b + c exactly halfway between two float32 with a tiny extra term:
	// (1 + 2⁻²⁴)·(1 + 2⁻²³) = 1 + 2⁻²⁴ + 2⁻²³ + 2⁻⁴⁷.
	one := float32(1)
	check(math.Nextafter32(one, 2), math.Nextafter32(one, 2), 0)
	check(1+float32(math.Ldexp(1, -23)), 1+float32(math.Ldexp(1, -22)), -1)
	for range 100000 {
		// products in the subnormal range
		a := float32(r.NormFloat64()) * float32(math.Ldexp(1, -70))
		b := float32(r.NormFloat64()) * float32(math.Ldexp(1, -70))
		check(a, b, float32(r.NormFloat64())*float32(math.Ldexp(1, -135)))
	}
	require.True(t, math.IsNaN(float64(fma32(float32(math.Inf(1)), 0, 1))))
	require.Equal(t, float32(math.Inf(1)), fma32(math.MaxFloat32, 2, 0))
}

// TestQuantizeActs checks the activation codes: |D·q − x| ≤ D/2 for every
// element, the largest element of a group is ±127, the corrections are the
// codes' sums, and a group with a NaN or an infinity is all NaN.
func TestQuantizeActs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	K := 96
	x := make([]float32, 3*K)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(20)-10))
	}
	for i := 32; i < 64; i++ {
		x[i] = 0 // a zero group
	}
	x[2*K+5] = float32(math.Inf(-1))
	var a Acts
	a.Quantize(x, K)
	require.Equal(t, 3, a.M)
	for gi, g := range a.G {
		xs, qs := x[32*gi:32*gi+32], a.Q[32*gi:32*gi+32]
		if gi == 6 {
			require.True(t, math.IsNaN(float64(g.D)))
			continue
		}
		var s, lo int32
		peak := false
		for i, q := range qs {
			require.LessOrEqual(t, math.Abs(float64(g.D)*float64(q)-float64(xs[i])), float64(g.D)/2*(1+1e-6)+1e-30)
			s += int32(q)
			if i < 16 {
				lo += int32(q)
			}
			peak = peak || q == 127 || q == -127
		}
		require.Equal(t, gi != 1, peak, "group %d", gi)
		require.Equal(t, -8*s, g.N8)
		require.Equal(t, -128*s, g.N128)
		require.Equal(t, -16*s, g.N16)
		require.Equal(t, [2]int32{-32 * lo, -32 * (s - lo)}, g.N32)
		require.Equal(t, g.D*float32(s), g.SD)
	}
}

// randomMatrix returns rows × cols of type ty with random blocks (or, with
// extreme, scales at the f16 maximum and codes at the ends of their range).
func randomMatrix(ty Type, rows, cols int, r *rand.Rand, extreme bool) []byte {
	var out []byte
	for range rows {
		if extreme {
			out = append(out, extremeQ8Row(ty, cols, r)...)
		} else {
			out = append(out, randomRow(ty, cols, r)...)
		}
	}
	return out
}

// extremeQ8Row is a row with every scale field at 0x7bff (65504) and codes
// of all ones or all zeros, for each type.
func extremeQ8Row(ty Type, n int, r *rand.Rand) []byte {
	row := randomRow(ty, n, r)
	bb := ty.BlockBytes()
	for b := 0; b < len(row); b += bb {
		blk := row[b : b+bb]
		for i := range blk {
			blk[i] = []byte{0x00, 0xff}[r.IntN(2)]
		}
		for _, off := range scaleFields[ty] {
			blk[off], blk[off+1] = 0xff, 0x7b
		}
	}
	return row
}

// randomActs returns m rows of k activations quantised, of varied scale.
func randomActs(m, k int, r *rand.Rand) (*Acts, []float32) {
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(6)-3))
	}
	var a Acts
	a.Quantize(x, k)
	return &a, x
}

// TestQ8ProductMeaning holds the portable int8 products, on a matrix
// packed by Pack, to Σ w·(D·q) in float64, w the weights Dequantize
// decodes from the stored rows: the layouts and formulas mean the
// weights, not merely what the assembly computes.
func TestQ8ProductMeaning(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, ty := range q8Types {
		sb := q8Formats[ty].sb
		for _, shape := range [][2]int{{1, sb}, {17, 3 * sb}, {33, 5 * sb}} {
			rows, cols := shape[0], shape[1]
			data := randomMatrix(ty, rows, cols, r, false)
			p, err := Pack(ty, data, rows, cols)
			require.NoError(t, err)
			a, _ := randomActs(3, cols, r)
			y := make([]float32, 3*rows)
			productWith(t, nil, p, a, 0, y)
			w := make([]float32, cols)
			rb, _ := ty.RowBytes(cols)
			for row := range rows {
				require.NoError(t, Dequantize(ty, data[row*rb:(row+1)*rb], w))
				for m := range 3 {
					var ref, mag float64
					for i, wi := range w {
						v := float64(wi) * float64(a.G[(m*cols+i)/32].D) * float64(a.Q[m*cols+i])
						ref += v
						mag += math.Abs(v)
					}
					require.InDelta(t, ref, float64(y[m*rows+row]), 1e-5*mag+1e-30, "%v %dx%d row %d token %d", ty, rows, cols, row, m)
				}
			}
		}
	}
}

// productWith runs p's product over all tiles and tokens with the kernel
// set ks (nil: the portable kernels), block tokens a call (0: the most).
func productWith(t *testing.T, ks *q8KernelSet, p *Packed, a *Acts, block int, y []float32) {
	saved := q8Active.Load()
	q8Active.Store(ks)
	defer q8Active.Store(saved)
	p.Product(a, 0, p.Tiles, 0, a.M, block, y, p.Rows)
}

// TestPackErrors checks that Pack refuses types without a product, rows
// that are not whole super-blocks and data of the wrong size.
func TestPackErrors(t *testing.T) {
	_, err := Pack(Q2_K, make([]byte, 84), 1, 256)
	require.ErrorIs(t, err, ErrType)
	_, err = Pack(Q4_K, make([]byte, 18), 1, 32)
	require.ErrorIs(t, err, ErrType)
	_, err = Pack(Q8_0, make([]byte, 33), 1, 32)
	require.ErrorIs(t, err, ErrLength)
	require.True(t, Packable(Q6_K, 512))
	require.False(t, Packable(Q6_K, 96))
	require.True(t, Packable(F16, 64))
	require.False(t, Packable(F16, 66))
	require.False(t, Packable(Q2_K, 256))
}

// floatTypes are the types with float products in the same tiles.
var floatTypes = []Type{F32, F16, BF16}

// TestFloatProductMeaning holds the portable float products to the float64
// dot of the dequantised rows with the activations (within 1e-6 of Σ|w·x|),
// on shapes with rows that are not a whole tile.
func TestFloatProductMeaning(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, ty := range floatTypes {
		for _, shape := range [][2]int{{1, 4}, {17, 12}, {33, 68}} {
			rows, cols := shape[0], shape[1]
			data := randomMatrix(ty, rows, cols, r, false)
			p, err := Pack(ty, data, rows, cols)
			require.NoError(t, err)
			require.True(t, p.Float())
			_, x := randomActs(3, 32*((cols+31)/32), r)
			x = x[:3*cols]
			y := make([]float32, 3*rows)
			floatProductWith(nil, p, x, 0, y)
			w := make([]float32, cols)
			rb, _ := ty.RowBytes(cols)
			for row := range rows {
				require.NoError(t, Dequantize(ty, data[row*rb:(row+1)*rb], w))
				for m := range 3 {
					var ref, mag float64
					for i, wi := range w {
						v := float64(wi) * float64(x[m*cols+i])
						ref += v
						mag += math.Abs(v)
					}
					require.InDelta(t, ref, float64(y[m*rows+row]), 1e-6*mag+1e-30, "%v %dx%d row %d token %d", ty, rows, cols, row, m)
				}
			}
		}
	}
}

// floatProductWith runs p's float product over all tiles and the tokens
// of x with the kernel set ks (nil: the portable kernels).
func floatProductWith(ks *q8KernelSet, p *Packed, x []float32, block int, y []float32) {
	saved := q8Active.Load()
	q8Active.Store(ks)
	defer q8Active.Store(saved)
	p.ProductFloat(x, 0, p.Tiles, 0, len(x)/p.Cols, block, y, p.Rows)
}
