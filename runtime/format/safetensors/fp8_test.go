package safetensors

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// FP8 E4M3 bytes with hand-computed values: sign, 4 exponent bits (bias 7),
// 3 mantissa bits.
const (
	fp8One      = 0x38 // 0 0111 000: 1.0
	fp8Two      = 0x40 // 0 1000 000: 2.0
	fp8MinusThr = 0xC4 // 1 1000 100: -(1+4/8)·2 = -3
	fp8Tiny     = 0x01 // 0 0000 001: subnormal 1/8·2^-6 = 2^-9
	fp8Max      = 0x7E // 0 1111 110: (1+6/8)·2^8 = 448
)

func TestDequantizeFP8Blocks(t *testing.T) {
	rows, cols := 130, 129 // a 2×2 grid of 128×128 blocks, the last ones partial
	w := make([]byte, rows*cols)
	set := func(r, c int, v byte) { w[r*cols+c] = v }
	set(0, 0, fp8One)
	set(129, 128, fp8Two)
	set(0, 128, fp8MinusThr)
	set(128, 0, fp8Tiny)
	set(5, 7, fp8Max)
	scale := []float32{0.5, 0.25, 1024, 3} // [[s00, s01], [s10, s11]]
	want := map[[2]int]float32{
		{0, 0}:     0.5,   // 1·0.5
		{129, 128}: 6,     // 2·3
		{0, 128}:   -0.75, // -3·0.25
		{128, 0}:   2,     // 2^-9·1024
		{5, 7}:     224,   // 448·0.5
	}
	for _, to := range []dtype.Type{dtype.F32, dtype.BF16} {
		out, err := DequantizeFP8(w, []int{rows, cols}, scale, []int{2, 2}, to)
		require.NoError(t, err)
		require.Len(t, out, rows*cols*to.BlockBytes())
		for r := range rows {
			for c := range cols {
				got := readFloat(out, r*cols+c, to)
				require.Equal(t, want[[2]int{r, c}], got, "(%d,%d) as %v", r, c, to)
			}
		}
	}
}

func readFloat(b []byte, i int, t dtype.Type) float32 {
	if t == dtype.BF16 {
		return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

func TestDequantizeFP8Scales(t *testing.T) {
	w := []byte{fp8One, fp8Two, fp8MinusThr, fp8One}
	cases := []struct {
		name       string
		scale      []float32
		scaleShape []int
		want       []float32
		err        error
	}{
		{"per tensor", []float32{2}, []int{}, []float32{2, 4, -6, 2}, nil},
		{"per tensor [1]", []float32{2}, []int{1}, []float32{2, 4, -6, 2}, nil},
		{"per row", []float32{1, 10}, []int{2}, []float32{1, 2, -30, 10}, nil},
		{"per row [2,1]", []float32{1, 10}, []int{2, 1}, []float32{1, 2, -30, 10}, nil},
		{"bad shape", []float32{1, 2, 3}, []int{3}, nil, ErrScale},
		{"count mismatch", []float32{1, 2}, []int{3}, nil, ErrScale},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := DequantizeFP8(w, []int{2, 2}, c.scale, c.scaleShape, dtype.F32)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			for i, v := range c.want {
				require.Equal(t, v, readFloat(out, i, dtype.F32), "element %d", i)
			}
		})
	}
	_, err := DequantizeFP8(w, []int{2, 2}, []float32{1}, nil, dtype.F16)
	require.ErrorIs(t, err, ErrDType)
	_, err = DequantizeFP8(w, []int{2, 3}, []float32{1}, nil, dtype.F32)
	require.ErrorIs(t, err, ErrShape)
}

func TestSetDequantizeFP8(t *testing.T) {
	dir := t.TempDir()
	ts := []Tensor{
		{Name: "l.weight", DType: "F8_E4M3", Shape: []int{2, 2}, Data: []byte{fp8One, fp8Two, fp8MinusThr, fp8Tiny}},
		{Name: "l.weight_scale_inv", DType: "F32", Shape: []int{1, 1}, Data: f32Bytes(4)},
		{Name: "m.weight", DType: "F8_E4M3", Shape: []int{1, 2}, Data: []byte{fp8One, fp8Two}},
		{Name: "m.weight_scale", DType: "BF16", Shape: []int{}, Data: []byte{0x40, 0x40}}, // 3.0
		{Name: "n.weight", DType: "F8_E4M3", Shape: []int{1}, Data: []byte{fp8One}},
	}
	require.NoError(t, WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil))
	s, err := OpenDir(dir)
	require.NoError(t, err)
	defer s.Close()
	out, err := s.DequantizeFP8("l.weight", dtype.BF16)
	require.NoError(t, err)
	for i, v := range []float32{4, 8, -12, 1.0 / 128} {
		require.Equal(t, v, readFloat(out, i, dtype.BF16))
	}
	out, err = s.DequantizeFP8("m.weight", dtype.F32)
	require.NoError(t, err)
	require.Equal(t, []float32{3, 6}, []float32{readFloat(out, 0, dtype.F32), readFloat(out, 1, dtype.F32)})
	_, err = s.DequantizeFP8("n.weight", dtype.F32)
	require.ErrorIs(t, err, ErrScale)
	_, err = s.DequantizeFP8("l.weight_scale_inv", dtype.F32)
	require.ErrorIs(t, err, ErrDType)
}
