package codegen

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// randBlocks returns rows × k elements of type t with random bytes in every
// block, the f16 scales replaced by finite values (random bytes cover every
// nibble, 6-bit scale and sign pattern; quantising floats would not).
func randBlocks(r *rand.Rand, t dtype.Type, rows, k int) []byte {
	rb, _ := t.RowBytes(k)
	data := make([]byte, rows*rb)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	bb := t.BlockBytes()
	var f16s []int // byte offsets of f16 fields in a block
	switch t {
	case dtype.Q4_0, dtype.Q8_0:
		f16s = []int{0}
	case dtype.Q4_K:
		f16s = []int{0, 2}
	case dtype.Q6_K:
		f16s = []int{208}
	}
	for b := 0; b < len(data); b += bb {
		for _, o := range f16s {
			h := dtype.F32ToF16(float32(r.NormFloat64()))
			data[b+o], data[b+o+1] = byte(h), byte(h>>8)
		}
	}
	return data
}

func TestRepackDequantizeMatchesFile(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, ty := range RepackTypes {
		for _, sh := range []struct{ rows, k int }{{1, 256}, {3, 256}, {7, 512}, {13, 768}, {33, 1024}} {
			t.Run(ty.String(), func(t *testing.T) {
				data := randBlocks(r, ty, sh.rows, sh.k)
				want := make([]float32, sh.rows*sh.k)
				require.NoError(t, dtype.Dequantize(ty, data, want))
				rp, err := Repack(ty, sh.rows, sh.k, data)
				require.NoError(t, err)
				require.Len(t, rp, len(data))
				require.NotEqual(t, data, rp, "repack must move bytes")
				got := make([]float32, len(want))
				require.NoError(t, DequantizeRepacked(ty, sh.rows, sh.k, rp, got))
				for i := range want {
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%v %dx%d element %d", ty, sh.rows, sh.k, i)
				}
			})
		}
	}
}

// TestRepackRowsIndependent checks the planes hold rows in order: the
// repack of a matrix dequantises, row by row, like the repack of each row.
func TestRepackRowsIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, ty := range RepackTypes {
		const rows, k = 5, 512
		data := randBlocks(r, ty, rows, k)
		rp, err := Repack(ty, rows, k, data)
		require.NoError(t, err)
		all := make([]float32, rows*k)
		require.NoError(t, DequantizeRepacked(ty, rows, k, rp, all))
		rb, _ := ty.RowBytes(k)
		for row := range rows {
			one, err := Repack(ty, 1, k, data[row*rb:(row+1)*rb])
			require.NoError(t, err)
			got := make([]float32, k)
			require.NoError(t, DequantizeRepacked(ty, 1, k, one, got))
			require.Equal(t, all[row*k:(row+1)*k], got, "%v row %d", ty, row)
		}
	}
}

func TestRepackErrors(t *testing.T) {
	tests := []struct {
		name    string
		t       dtype.Type
		rows, k int
		n       int
	}{
		{"type", dtype.Q5_K, 1, 256, 176},
		{"float type", dtype.F16, 1, 256, 512},
		{"ragged k", dtype.Q4_K, 1, 300, 144},
		{"short data", dtype.Q8_0, 2, 32, 34},
		{"no rows", dtype.Q4_0, 0, 32, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Repack(tc.t, tc.rows, tc.k, make([]byte, tc.n))
			require.ErrorIs(t, err, ErrUnsupported)
			err = DequantizeRepacked(tc.t, tc.rows, tc.k, make([]byte, tc.n), make([]float32, max(tc.rows*tc.k, 0)))
			require.ErrorIs(t, err, ErrUnsupported)
		})
	}
	err := DequantizeRepacked(dtype.Q8_0, 1, 32, make([]byte, 34), make([]float32, 31))
	require.ErrorIs(t, err, ErrUnsupported)
}
