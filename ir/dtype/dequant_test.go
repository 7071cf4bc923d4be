package dtype

import (
	"encoding/hex"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDequantizeBlockVectors(t *testing.T) {
	seen := map[Type]bool{}
	for _, v := range blockVectors {
		t.Run(v.t.String(), func(t *testing.T) {
			blk, err := hex.DecodeString(v.hex)
			require.NoError(t, err)
			require.Len(t, blk, v.t.BlockBytes())
			got := make([]float32, v.t.BlockElems())
			require.NoError(t, Dequantize(v.t, blk, got))
			for i, want := range v.want {
				require.Equal(t, want, got[i], "element %d", i)
			}
			seen[v.t] = true
		})
	}
	for ty := range quantizers {
		if ty.Quantized() {
			require.True(t, seen[ty], "no block vector for %v", ty)
		}
	}
}

// TestDequantizeBlockStride puts a zero block before each vector's block:
// the second block must decode exactly as it does alone.
func TestDequantizeBlockStride(t *testing.T) {
	for _, v := range blockVectors {
		blk, err := hex.DecodeString(v.hex)
		require.NoError(t, err)
		n := v.t.BlockElems()
		alone := make([]float32, n)
		require.NoError(t, Dequantize(v.t, blk, alone))
		two := make([]byte, 2*len(blk))
		copy(two[len(blk):], blk)
		got := make([]float32, 2*n)
		require.NoError(t, Dequantize(v.t, two, got))
		require.Equal(t, make([]float32, n), got[:n], "%v zero block", v.t)
		require.Equal(t, alone, got[n:], "%v second block", v.t)
	}
}

func TestDequantizeScalars(t *testing.T) {
	for _, c := range []struct {
		t    Type
		hex  string
		want []float32
	}{
		{F32, "0000803f000000c0", []float32{1, -2}},
		{F16, "003c00c0ff7b0100", []float32{1, -2, 65504, 1.0 / 16777216}},
		{BF16, "803f00c0493f", []float32{1, -2, 0.78515625}},
		{F8E4M3, "38b87e01", []float32{1, -1, 448, 1.0 / 512}},
	} {
		src, err := hex.DecodeString(c.hex)
		require.NoError(t, err)
		got := make([]float32, len(c.want))
		require.NoError(t, Dequantize(c.t, src, got))
		require.Equal(t, c.want, got, c.t.String())
	}
	got := make([]float32, 1)
	require.NoError(t, Dequantize(F8E4M3, []byte{0x7f}, got))
	require.True(t, math.IsNaN(float64(got[0])))
}

func TestDequantizeErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		t     Type
		bytes int
		elems int
		want  error
	}{
		{"unknown type", Type(99), 4, 1, ErrType},
		{"no decoder", I32, 4, 1, ErrType},
		{"short source", Q4_0, 17, 32, ErrLength},
		{"long source", Q4_0, 19, 32, ErrLength},
		{"partial block", Q4_K, 144, 255, ErrLength},
		{"two blocks for one", Q6_K, 420, 256, ErrLength},
		{"f16 odd bytes", F16, 3, 2, ErrLength},
		{"f32 short", F32, 7, 2, ErrLength},
	} {
		err := Dequantize(c.t, make([]byte, c.bytes), make([]float32, c.elems))
		require.ErrorIs(t, err, c.want, c.name)
	}
	require.NoError(t, Dequantize(Q4_0, nil, nil), "empty row")
}

func TestElements(t *testing.T) {
	n, err := Elements(Q4_K, 288)
	require.NoError(t, err)
	require.Equal(t, 512, n)
	n, err = Elements(F16, 10)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	_, err = Elements(Q8_0, 33)
	require.ErrorIs(t, err, ErrLength)
	_, err = Elements(Type(77), 4)
	require.ErrorIs(t, err, ErrType)
	for ty := range dequantizers {
		b, err := ty.RowBytes(4 * 256)
		require.NoError(t, err)
		n, err := Elements(ty, b)
		require.NoError(t, err)
		require.Equal(t, 4*256, n, ty.String())
	}
}
