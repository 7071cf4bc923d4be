package dtype

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDotTwins checks every dot kernel that has a vector twin, both the
// scalar one and the one Dot dispatches to (vector in a GOEXPERIMENT=simd
// build on an AVX2+FMA CPU), against the float64 dot of the dequantised row,
// on quantised and fully random rows of one to many blocks.
func TestDotTwins(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	kernels := []struct {
		ty   Type
		name string
		fn   func(row []byte, x []float32) float32
	}{
		{Q8_0, "scalar", dotQ8_0}, {Q8_0, "dispatched", dotQ8_0Fast},
		{Q4_K, "scalar", dotQ4K}, {Q4_K, "dispatched", dotQ4KFast},
		{Q6_K, "scalar", dotQ6K}, {Q6_K, "dispatched", dotQ6KFast},
		{Q5_0, "scalar", dotQ5_0}, {Q5_0, "dispatched", dotQ5_0Fast},
	}
	t.Logf("vector dot kernels: %v", simdDot)
	for _, k := range kernels {
		be := k.ty.BlockElems()
		for _, n := range []int{be, 3 * be, 4864} { // one block, an odd count, qwen2.5's FFN
			for rep := range 3 {
				var row []byte
				if rep == 0 {
					var err error
					row, err = Quantize(k.ty, normalData(n, uint64(n)))
					require.NoError(t, err)
				} else {
					row = randomRow(k.ty, n, r)
				}
				x := normalData(n, uint64(7*n+rep))
				w := make([]float32, n)
				require.NoError(t, Dequantize(k.ty, row, w))
				var ref, mag float64
				for i := range w {
					ref += float64(w[i]) * float64(x[i])
					mag += math.Abs(float64(w[i]) * float64(x[i]))
				}
				require.InDelta(t, ref, float64(k.fn(row, x)), 1e-5*mag, "%v %s n=%d rep=%d", k.ty, k.name, n, rep)
			}
		}
	}
}

// TestDequantizeTwins checks that Dequantize (vector decoders in a
// GOEXPERIMENT=simd build) gives bit-identical output to the scalar
// decoders, on quantised and fully random blocks.
func TestDequantizeTwins(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	scalar := map[Type]func(src []byte, dst []float32){Q8_0: dequantQ8_0, Q4_K: dequantQ4K, Q6_K: dequantQ6K, Q5_0: dequantQ5_0}
	for ty, ref := range scalar {
		for _, n := range []int{ty.BlockElems(), 3 * ty.BlockElems(), 4864} {
			for rep := range 4 {
				var row []byte
				if rep == 0 {
					var err error
					row, err = Quantize(ty, normalData(n, uint64(n+3)))
					require.NoError(t, err)
				} else {
					row = randomRow(ty, n, r)
				}
				want, got := make([]float32, n), make([]float32, n)
				ref(row, want)
				require.NoError(t, Dequantize(ty, row, got))
				for i := range want {
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%v n=%d rep=%d element %d", ty, n, rep, i)
				}
			}
		}
	}
}

func BenchmarkDequantize(b *testing.B) {
	const n = 4096
	for _, ty := range []Type{Q8_0, Q4_K, Q6_K, Q5_0} {
		row, err := Quantize(ty, normalData(n, 1))
		require.NoError(b, err)
		dst := make([]float32, n)
		b.Run(ty.String(), func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			for b.Loop() {
				if err := Dequantize(ty, row, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
