package dtype

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// scaleFields lists, per block type, the byte offsets of its f16 scales.
var scaleFields = map[Type][]int{
	Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, Q8_0: {0}, Q8_1: {0, 2}, IQ4_NL: {0},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}, IQ4_XS: {0},
}

// randomRow returns n elements of type ty with every quant and scale bit
// random, except that scales are finite values of moderate size.
func randomRow(ty Type, n int, r *rand.Rand) []byte {
	nb, err := ty.RowBytes(n)
	if err != nil {
		panic(err)
	}
	row := make([]byte, nb)
	for i := range row {
		row[i] = byte(r.Uint32())
	}
	scale := func() float32 { return float32(r.NormFloat64() * 0.05) }
	switch ty {
	case F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(row[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
	case F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(row[2*i:], F32ToF16(float32(r.NormFloat64())))
		}
	case BF16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(row[2*i:], F32ToBF16(float32(r.NormFloat64())))
		}
	case F8E4M3:
		for i := range row {
			if row[i]&0x7f == 0x7f {
				row[i] = 0x38 // NaN -> 1
			}
		}
	case Q8_K:
		for b := 0; b < len(row); b += ty.BlockBytes() {
			binary.LittleEndian.PutUint32(row[b:], math.Float32bits(scale()))
		}
	default:
		for b := 0; b < len(row); b += ty.BlockBytes() {
			for _, off := range scaleFields[ty] {
				binary.LittleEndian.PutUint16(row[b+off:], F32ToF16(scale()))
			}
		}
	}
	return row
}

func TestDotMatchesDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for ty := range dequantizers {
		for _, n := range []int{256, 4096} {
			for rep := range 3 {
				var row []byte
				if _, ok := quantizers[ty]; ok && rep == 0 {
					var err error
					row, err = Quantize(ty, normalData(n, uint64(n+rep)))
					require.NoError(t, err)
				} else {
					row = randomRow(ty, n, r)
				}
				x := normalData(n, uint64(1000+n+rep))
				w := make([]float32, n)
				require.NoError(t, Dequantize(ty, row, w))
				var ref, mag float64
				for i := range w {
					ref += float64(w[i]) * float64(x[i])
					mag += math.Abs(float64(w[i]) * float64(x[i]))
				}
				got := Dot(ty, row, x)
				require.InDelta(t, ref, float64(got), 1e-5*mag, "%v n=%d rep=%d", ty, n, rep)
			}
		}
	}
	require.Zero(t, Dot(Q4_K, nil, nil))
}

func TestDotAllocatesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for ty := range dequantizers {
		row := randomRow(ty, 4096, r)
		x := normalData(4096, 5)
		allocs := testing.AllocsPerRun(5, func() { Dot(ty, row, x) })
		require.Zero(t, allocs, "%v", ty)
	}
}

func TestDotPanicsOnBrokenInvariant(t *testing.T) {
	require.PanicsWithValue(t, "BUG: dtype.Dot: 17 bytes of Q4_0 for 32 elements", func() {
		Dot(Q4_0, make([]byte, 17), make([]float32, 32))
	})
	require.Panics(t, func() { Dot(I32, make([]byte, 4), make([]float32, 1)) })
}

// commonDotTypes are the formats real models use; their Dot is tuned.
var commonDotTypes = []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K}

func BenchmarkDot(b *testing.B) {
	const n = 4096
	r := rand.New(rand.NewPCG(1, 1))
	types := append([]Type{}, commonDotTypes...)
	types = append(types, Q4_1, Q5_0, Q5_1, Q8_1, Q2_K, Q3_K, Q8_K, IQ4_NL, IQ4_XS, F8E4M3)
	for _, ty := range types {
		row := randomRow(ty, n, r)
		x := normalData(n, 2)
		b.Run(ty.String(), func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			var sink float32
			for b.Loop() {
				sink += Dot(ty, row, x)
			}
			_ = sink
		})
	}
}
