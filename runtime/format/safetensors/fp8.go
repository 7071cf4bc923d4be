package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// FP8Block is the side of the square blocks of block-scaled FP8 weights
// (the scale_inv grids of DeepSeek-V3 and Qwen3 FP8 checkpoints).
const FP8Block = 128

// ScaleName returns the name of the scale tensor of the FP8 weight called
// name: "<name>_scale_inv" (block scales) or "<name>_scale" (per-tensor or
// per-row, e.g. "…weight_scale").
func (s *Set) ScaleName(name string) (string, bool) {
	for _, n := range []string{name + "_scale_inv", name + "_scale"} {
		if _, _, ok := s.Tensor(n); ok {
			return n, true
		}
	}
	return "", false
}

// DequantizeFP8 reads the FP8 E4M3 tensor called name and its scale tensor
// from the set and returns its values as to (dtype.BF16 or dtype.F32) bytes,
// in the same shape.
func (s *Set) DequantizeFP8(name string, to dtype.Type) ([]byte, error) {
	t, f, ok := s.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if t.DType != "F8_E4M3" {
		return nil, fmt.Errorf("%w: tensor %q is %s, not F8_E4M3", ErrDType, name, t.DType)
	}
	sn, ok := s.ScaleName(name)
	if !ok {
		return nil, fmt.Errorf("%w: tensor %q has no %s_scale_inv or %s_scale tensor", ErrScale, name, name, name)
	}
	st, sf, _ := s.Tensor(sn)
	w, err := f.TensorData(t)
	if err != nil {
		return nil, err
	}
	sd, err := sf.TensorData(st)
	if err != nil {
		return nil, err
	}
	scale, err := Float32s(st, sd)
	if err != nil {
		return nil, err
	}
	out, err := DequantizeFP8(w, t.Shape, scale, st.Shape, to)
	if err != nil {
		return nil, fmt.Errorf("tensor %q (scale %q): %w", name, sn, err)
	}
	return out, nil
}

// DequantizeFP8 converts an FP8 E4M3 weight of the given shape (PyTorch
// order; leading dimensions flatten into rows) to dtype.BF16 or dtype.F32
// bytes, multiplying each element by its scale. The scale is one value (per
// tensor), one value per row (shape [rows] or [rows, 1]), or a
// [⌈rows/128⌉, ⌈cols/128⌉] grid of 128×128 block scales.
func DequantizeFP8(w []byte, shape []int, scale []float32, scaleShape []int, to dtype.Type) ([]byte, error) {
	if to != dtype.BF16 && to != dtype.F32 {
		return nil, fmt.Errorf("%w: FP8 dequantises to BF16 or F32, not %v", ErrDType, to)
	}
	rows, cols := 1, 1
	for i, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("%w: shape %v", ErrShape, shape)
		}
		if i == len(shape)-1 {
			cols = d
		} else {
			rows *= d
		}
	}
	if rows*cols != len(w) {
		return nil, fmt.Errorf("%w: %d FP8 bytes for shape %v", ErrShape, len(w), shape)
	}
	scaleAt, err := scaleIndex(rows, cols, scale, scaleShape)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(w)*to.BlockBytes())
	for r := range rows {
		for c := range cols {
			i := r*cols + c
			v := dtype.F8E4M3ToF32(w[i]) * scale[scaleAt(r, c)]
			if to == dtype.BF16 {
				binary.LittleEndian.PutUint16(out[2*i:], dtype.F32ToBF16(v))
			} else {
				binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
			}
		}
	}
	return out, nil
}

// scaleIndex returns the function mapping an element (r, c) to its scale.
func scaleIndex(rows, cols int, scale []float32, scaleShape []int) (func(r, c int) int, error) {
	n := 1
	for _, d := range scaleShape {
		n *= d
	}
	if n != len(scale) {
		return nil, fmt.Errorf("%w: %d values for scale shape %v", ErrScale, len(scale), scaleShape)
	}
	ceil := func(a int) int { return (a + FP8Block - 1) / FP8Block }
	switch {
	case n == 1:
		return func(int, int) int { return 0 }, nil
	case len(scaleShape) == 2 && scaleShape[0] == ceil(rows) && scaleShape[1] == ceil(cols):
		sc := scaleShape[1]
		return func(r, c int) int { return r/FP8Block*sc + c/FP8Block }, nil
	case n == rows && (len(scaleShape) == 1 || (len(scaleShape) == 2 && scaleShape[1] == 1)):
		return func(r, _ int) int { return r }, nil
	}
	return nil, fmt.Errorf("%w: scale shape %v fits neither per-tensor, per-row nor %d×%d blocks of a %d×%d weight",
		ErrScale, scaleShape, FP8Block, FP8Block, rows, cols)
}

// Float32s decodes the bytes of an F32, F16 or BF16 tensor.
func Float32s(t *TensorInfo, data []byte) ([]float32, error) {
	size := ElemSize(t.DType)
	if size == 0 || len(data)%size != 0 {
		return nil, fmt.Errorf("%w: tensor %q: %d bytes of %s", ErrDType, t.Name, len(data), t.DType)
	}
	out := make([]float32, len(data)/size)
	for i := range out {
		switch t.DType {
		case "F32":
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		case "F16":
			out[i] = dtype.F16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		case "BF16":
			out[i] = dtype.BF16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		default:
			return nil, fmt.Errorf("%w: tensor %q: %s is not a float type", ErrDType, t.Name, t.DType)
		}
	}
	return out, nil
}
