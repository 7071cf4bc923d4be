//go:build amd64 && !goexperiment.simd && !purego

package dtype

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// asmKernels are the assembly dot kernels, each called directly (not through
// the CPU-feature dispatch) so that a test run on an AVX2+FMA machine checks
// them whatever simdDot says.
var asmKernels = []struct {
	ty Type
	fn func(row []byte, x []float32) float32
}{
	{Q8_0, func(row []byte, x []float32) float32 { return dotQ8_0AVX2(row, x, f16Table) }},
	{Q4_K, func(row []byte, x []float32) float32 { return dotQ4KAVX2(row, x, f16Table, &u6f) }},
	{Q6_K, func(row []byte, x []float32) float32 { return dotQ6KAVX2(row, x, f16Table, &i8f) }},
	{Q5_0, func(row []byte, x []float32) float32 { return dotQ5_0AVX2(row, x, f16Table, &q5Shifts) }},
}

// TestDotAsm checks each assembly kernel against the float64 dot of the
// dequantised row, within 1e-5·Σ|w·x| (float32 rounding in another
// summation order), on random, quantised, all-zero and extreme blocks of
// many lengths.
func TestDotAsm(t *testing.T) {
	if !simdDot {
		t.Skip("CPU lacks AVX2 or FMA: the assembly kernels are never called")
	}
	r := rand.New(rand.NewPCG(51, 52))
	for _, k := range asmKernels {
		be := k.ty.BlockElems()
		bb := k.ty.BlockBytes()
		lengths := []int{be, 2 * be, 3 * be, 5 * be, 7 * be, 33 * be, 4096, 4864}
		for _, n := range lengths {
			if n%be != 0 {
				continue
			}
			rows := map[string][]byte{
				"random": randomRow(k.ty, n, r),
				"zero":   make([]byte, n/be*bb),
				"max":    extremeRow(k.ty, n, r),
			}
			q, err := Quantize(k.ty, normalData(n, uint64(n)))
			require.NoError(t, err)
			rows["quantised"] = q
			for name, row := range rows {
				x := normalData(n, uint64(3*n+len(name)))
				if name == "max" {
					for i := range x {
						x[i] = float32(r.IntN(2)*2-1) * 1e4 // large but far from overflow in float32
					}
				}
				w := make([]float32, n)
				require.NoError(t, Dequantize(k.ty, row, w))
				var ref, mag float64
				for i := range w {
					ref += float64(w[i]) * float64(x[i])
					mag += math.Abs(float64(w[i]) * float64(x[i]))
				}
				got := k.fn(row, x)
				require.InDelta(t, ref, float64(got), 1e-5*mag, "%v %s n=%d", k.ty, name, n)
				if name == "zero" {
					require.Equal(t, float32(0), got)
				}
				require.InDelta(t, float64(dotScalar(k.ty, row, x)), float64(got), 1e-5*mag+1e-30, "%v %s n=%d vs scalar", k.ty, name, n)
			}
		}
	}
}

// dotScalar is the Go kernel the assembly replaces.
func dotScalar(t Type, row []byte, x []float32) float32 {
	switch t {
	case Q8_0:
		return dotQ8_0(row, x)
	case Q4_K:
		return dotQ4K(row, x)
	case Q6_K:
		return dotQ6K(row, x)
	case Q5_0:
		return dotQ5_0(row, x)
	}
	panic("BUG: no scalar kernel for " + t.String())
}

// extremeRow returns a row of t whose scales are the largest finite f16
// (0x7bff = 65504) and whose codes are random extremes of their range.
func extremeRow(t Type, n int, r *rand.Rand) []byte {
	bb, be := t.BlockBytes(), t.BlockElems()
	row := make([]byte, n/be*bb)
	for b := 0; b < n/be; b++ {
		blk := row[b*bb : b*bb+bb]
		switch t {
		case Q8_0:
			binary.LittleEndian.PutUint16(blk, 0x7bff)
			for i := 2; i < 34; i++ {
				blk[i] = []byte{0x80, 0x7f}[r.IntN(2)] // -128 or 127
			}
		case Q4_K:
			// d and dmin at the f16 maximum, every scale and min 63.
			binary.LittleEndian.PutUint16(blk, 0x7bff)
			binary.LittleEndian.PutUint16(blk[2:], 0x7bff)
			for i := 4; i < 16; i++ {
				blk[i] = 0xff
			}
			for i := 16; i < 144; i++ {
				blk[i] = []byte{0x00, 0xff, 0x0f, 0xf0}[r.IntN(4)]
			}
		case Q6_K:
			// d at the f16 maximum, scales ±127 and -128, codes 0 or 63.
			for i := range 192 {
				blk[i] = []byte{0x00, 0xff}[r.IntN(2)]
			}
			for i := 192; i < 208; i++ {
				blk[i] = []byte{0x7f, 0x80, 0x81}[r.IntN(3)]
			}
			binary.LittleEndian.PutUint16(blk[208:], 0x7bff)
		case Q5_0:
			// d at the f16 maximum, codes 0 (−16) or 31 (15).
			binary.LittleEndian.PutUint16(blk, 0x7bff)
			for i := 2; i < 22; i++ {
				blk[i] = []byte{0x00, 0xff}[r.IntN(2)]
			}
		default:
			panic("BUG: no extreme row for " + t.String())
		}
	}
	return row
}
