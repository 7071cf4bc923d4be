package cuda

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/load"
)

// weightKey identifies a device weight across programs.
func weightKey(w *codegen.WeightRef) string {
	return fmt.Sprintf("%d|%s|%v|%d|%+v|%s|%v|%d", w.Kind, w.Name, w.Type, w.PadCols, w.Parts, w.Factors, w.Rope, w.Layout)
}

// uniqueWeights returns the distinct weights of the programs and their bytes.
func uniqueWeights(progs ...*codegen.Program) ([]*codegen.WeightRef, int64) {
	seen := map[string]bool{}
	var out []*codegen.WeightRef
	var n int64
	for _, p := range progs {
		for i := range p.Weights {
			w := &p.Weights[i]
			if k := weightKey(w); !seen[k] {
				seen[k] = true
				out = append(out, w)
				n += alignBytes(w.Bytes())
			}
		}
	}
	return out, n
}

func alignBytes(n int64) int64 { return (max(n, 256) + 255) / 256 * 256 }

// tensor returns the bytes of a model tensor of type t and ne shape want.
func tensor(m *load.Model, name string, t dtype.Type, want []int) ([]byte, error) {
	ts, ok := m.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s is missing", ErrWeight, name)
	}
	if ts.Type != t || (want != nil && !slices.Equal(ts.Shape, want)) {
		return nil, fmt.Errorf("%w: %s is %v %v, want %v %v", ErrWeight, name, ts.Type, ts.Shape, t, want)
	}
	data, err := ts.Data()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWeight, name, err)
	}
	return data, nil
}

// floats dequantises a 1-D tensor of any type to float32.
func floats(m *load.Model, name string, n int) ([]float32, error) {
	ts, ok := m.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s is missing", ErrWeight, name)
	}
	data, err := tensor(m, name, ts.Type, []int{n})
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	if err := dtype.Dequantize(ts.Type, data, out); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWeight, name, err)
	}
	return out, nil
}

// upload allocates and fills the device copy of w.
func (b *Backend) upload(c *Ctx, m *load.Model, w *codegen.WeightRef) (DevicePtr, error) {
	p, err := b.alloc(c, int(w.Bytes()))
	if err != nil {
		return 0, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	switch w.Kind {
	case codegen.WeightMatrix:
		rb, err := w.Type.RowBytes(w.Cols)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %w", ErrWeight, w.Name, err)
		}
		prb, err := w.Type.RowBytes(w.PadCols)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %w", ErrWeight, w.Name, err)
		}
		if w.Layout == 1 {
			if err := b.uploadRepacked(c, m, w, p); err != nil {
				return 0, err
			}
			return p, nil
		}
		off := 0
		for _, part := range w.Parts {
			data, err := tensor(m, part.Name, w.Type, part.NE(w.Cols))
			if err != nil {
				return 0, err
			}
			if prb != rb {
				padded := make([]byte, part.Rows*prb)
				for r := 0; r < part.Rows; r++ {
					copy(padded[r*prb:], data[r*rb:(r+1)*rb])
				}
				data = padded
			}
			if err := c.CopyHtoD(p+DevicePtr(off), data); err != nil {
				return 0, err
			}
			off += part.PadRows * prb
		}
	case codegen.WeightVector:
		out := make([]float32, w.Rows())
		off := 0
		for _, part := range w.Parts {
			if part.Name != "" {
				v, err := floats(m, part.Name, part.Rows)
				if err != nil {
					return 0, err
				}
				copy(out[off:], v)
			}
			off += part.PadRows
		}
		if err := c.CopyHtoD(p, f32AsBytes(out)); err != nil {
			return 0, err
		}
	case codegen.WeightRope:
		var factors []float32
		if w.Factors != "" {
			if factors, err = floats(m, w.Factors, w.Rope.Dims/2); err != nil {
				return 0, err
			}
		}
		if err := c.CopyHtoD(p, f32AsBytes(w.RopeTable(factors))); err != nil {
			return 0, err
		}
	default:
		panic(fmt.Sprintf("BUG: weight kind %d", w.Kind))
	}
	return p, nil
}

// uploadRepacked fills p with matrix w in the repacked layout of
// codegen.Repack (layout-1 GEMVs): the parts' rows are gathered on the
// host, repacked as one matrix and copied at once.
func (b *Backend) uploadRepacked(c *Ctx, m *load.Model, w *codegen.WeightRef, p DevicePtr) error {
	if w.PadCols != w.Cols {
		return fmt.Errorf("%w: %s: repacked rows cannot be padded (%d → %d)", ErrWeight, w.Name, w.Cols, w.PadCols)
	}
	host := make([]byte, 0, w.Bytes())
	for _, part := range w.Parts {
		if part.PadRows != part.Rows {
			return fmt.Errorf("%w: %s: repacked part %s cannot be padded (%d → %d rows)", ErrWeight, w.Name, part.Name, part.Rows, part.PadRows)
		}
		data, err := tensor(m, part.Name, w.Type, part.NE(w.Cols))
		if err != nil {
			return err
		}
		host = append(host, data...)
	}
	packed, err := codegen.Repack(w.Type, w.Rows(), w.Cols, host)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrWeight, w.Name, err)
	}
	return c.CopyHtoD(p, packed)
}
