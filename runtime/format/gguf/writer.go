package gguf

import (
	"bufio"
	"fmt"
	"io"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// Writer streams a GGUF version 3 file: declare every key/value (AddKV) and
// tensor (AddTensor), call WriteHeader, then WriteTensorData for each tensor
// in the order declared, then Close. Tensor data are laid out in declaration
// order, each padded to the alignment (general.alignment when added as a
// uint32, else 32).
//
// AddKV and AddTensor record the first error they meet; WriteHeader returns
// it. After any error every later call fails with it.
type Writer struct {
	w       *bufio.Writer
	pos     uint64 // bytes written so far
	kvs     []KV
	keys    map[string]bool
	tensors []TensorInfo
	sizes   []uint64
	names   map[string]bool
	align   uint64
	next    uint64 // offset the next tensor gets
	header  bool   // WriteHeader done
	written int    // tensors whose data was written
	err     error
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{
		w:     bufio.NewWriterSize(w, 1<<20),
		keys:  map[string]bool{},
		names: map[string]bool{},
		align: DefaultAlignment,
	}
}

func (w *Writer) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
	}
}

// AddKV declares a metadata entry. v is any value ValueOf accepts. Keys
// must be unique and are written in the order added.
func (w *Writer) AddKV(key string, v any) {
	if w.err != nil {
		return
	}
	if w.header {
		w.fail("%w: AddKV(%q) after WriteHeader", ErrWriter, key)
		return
	}
	if key == "" || w.keys[key] {
		w.fail("%w: key %q is empty or added twice", ErrWriter, key)
		return
	}
	val, err := ValueOf(v)
	if err != nil {
		w.fail("key %q: %w", key, err)
		return
	}
	if key == KeyAlignment {
		a, ok := val.x.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			w.fail("%w: %s = %v; want a power of two of type uint32", ErrAlignment, key, val)
			return
		}
		if len(w.tensors) > 0 {
			w.fail("%w: %s must be added before the first tensor", ErrWriter, key)
			return
		}
		w.align = uint64(a)
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, KV{Key: key, Value: val})
}

// AddTensor declares a tensor of type t and shape dims (ne order) whose data
// is size bytes; size must equal what the type and shape imply.
func (w *Writer) AddTensor(name string, t dtype.Type, dims []uint64, size int64) {
	if w.err != nil {
		return
	}
	if w.header {
		w.fail("%w: AddTensor(%q) after WriteHeader", ErrWriter, name)
		return
	}
	if name == "" || w.names[name] {
		w.fail("%w: tensor name %q is empty or added twice", ErrWriter, name)
		return
	}
	n, err := tensorBytes(t, dims)
	if err != nil {
		w.fail("tensor %q: %w", name, err)
		return
	}
	if size < 0 || uint64(size) != n {
		w.fail("%w: tensor %q: size %d, but %v %v is %d bytes", ErrWriter, name, size, t, dims, n)
		return
	}
	w.names[name] = true
	w.tensors = append(w.tensors, TensorInfo{Name: name, Type: t, Dims: append([]uint64(nil), dims...), Offset: w.next})
	w.sizes = append(w.sizes, n)
	w.next = alignUp(w.next+n, w.align)
}

// WriteHeader writes the header: version, counts, every key/value and
// every tensor info, and the padding up to the data section.
func (w *Writer) WriteHeader() error {
	if w.err != nil {
		return w.err
	}
	if w.header {
		w.fail("%w: WriteHeader called twice", ErrWriter)
		return w.err
	}
	w.header = true
	w.u32(Magic)
	w.u32(3)
	w.u64(uint64(len(w.tensors)))
	w.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		w.str(kv.Key)
		w.u32(uint32(kv.Value.Type))
		w.value(kv.Value)
	}
	for _, t := range w.tensors {
		w.str(t.Name)
		w.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			w.u64(d)
		}
		w.u32(uint32(t.Type))
		w.u64(t.Offset)
	}
	if len(w.tensors) > 0 {
		w.pad()
	}
	return w.err
}

// WriteTensorData writes the bytes of the next declared tensor, which must
// be called name, followed by the padding to the alignment.
func (w *Writer) WriteTensorData(name string, data []byte) error {
	if w.err != nil {
		return w.err
	}
	switch {
	case !w.header:
		w.fail("%w: WriteTensorData(%q) before WriteHeader", ErrWriter, name)
	case w.written >= len(w.tensors):
		w.fail("%w: WriteTensorData(%q): all %d tensors already written", ErrWriter, name, len(w.tensors))
	case w.tensors[w.written].Name != name:
		w.fail("%w: WriteTensorData(%q): next tensor is %q", ErrWriter, name, w.tensors[w.written].Name)
	case uint64(len(data)) != w.sizes[w.written]:
		w.fail("%w: tensor %q: %d bytes given, %d declared", ErrWriter, name, len(data), w.sizes[w.written])
	}
	if w.err != nil {
		return w.err
	}
	w.write(data)
	w.written++
	w.pad()
	return w.err
}

// Close checks that every tensor was written and flushes. It does not
// close the underlying io.Writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if !w.header {
		if err := w.WriteHeader(); err != nil {
			return err
		}
	}
	if w.written != len(w.tensors) {
		w.fail("%w: Close after %d of %d tensors written", ErrWriter, w.written, len(w.tensors))
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.fail("gguf: write: %w", err)
	}
	return w.err
}

func (w *Writer) write(p []byte) {
	if w.err != nil {
		return
	}
	if _, err := w.w.Write(p); err != nil {
		w.fail("gguf: write: %w", err)
		return
	}
	w.pos += uint64(len(p))
}

var zeros [256]byte

func (w *Writer) pad() {
	for n := alignUp(w.pos, w.align) - w.pos; n > 0; {
		k := min(n, uint64(len(zeros)))
		w.write(zeros[:k])
		n -= k
	}
}

func (w *Writer) u32(v uint32) { w.write(le.AppendUint32(nil, v)) }
func (w *Writer) u64(v uint64) { w.write(le.AppendUint64(nil, v)) }
func (w *Writer) str(s string) { w.u64(uint64(len(s))); w.write([]byte(s)) }

// value writes the payload of v (its type tag is written by the caller).
func (w *Writer) value(v Value) {
	var b []byte
	switch x := v.x.(type) {
	case uint8:
		b = []byte{x}
	case int8:
		b = []byte{byte(x)}
	case uint16:
		b = le.AppendUint16(nil, x)
	case int16:
		b = le.AppendUint16(nil, uint16(x))
	case uint32:
		b = le.AppendUint32(nil, x)
	case int32:
		b = le.AppendUint32(nil, uint32(x))
	case float32:
		b = le.AppendUint32(nil, math.Float32bits(x))
	case bool:
		b = []byte{0}
		if x {
			b[0] = 1
		}
	case string:
		w.str(x)
	case uint64:
		b = le.AppendUint64(nil, x)
	case int64:
		b = le.AppendUint64(nil, uint64(x))
	case float64:
		b = le.AppendUint64(nil, math.Float64bits(x))
	default:
		w.array(v)
	}
	w.write(b)
}

func (w *Writer) array(v Value) {
	w.u32(uint32(v.Elem))
	w.u64(uint64(v.Len()))
	switch x := v.x.(type) {
	case []string:
		for _, s := range x {
			w.str(s)
		}
	case []Value:
		for _, e := range x {
			w.array(e)
		}
	case []bool:
		for _, e := range x {
			w.value(Value{Type: TypeBool, x: e})
		}
	default:
		w.write(encodeFixed(x))
	}
}

// encodeFixed encodes a slice of a fixed-size type, little-endian.
func encodeFixed(x any) []byte {
	var b []byte
	switch x := x.(type) {
	case []uint8:
		return x
	case []int8:
		for _, e := range x {
			b = append(b, byte(e))
		}
	case []uint16:
		for _, e := range x {
			b = le.AppendUint16(b, e)
		}
	case []int16:
		for _, e := range x {
			b = le.AppendUint16(b, uint16(e))
		}
	case []uint32:
		for _, e := range x {
			b = le.AppendUint32(b, e)
		}
	case []int32:
		for _, e := range x {
			b = le.AppendUint32(b, uint32(e))
		}
	case []float32:
		for _, e := range x {
			b = le.AppendUint32(b, math.Float32bits(e))
		}
	case []uint64:
		for _, e := range x {
			b = le.AppendUint64(b, e)
		}
	case []int64:
		for _, e := range x {
			b = le.AppendUint64(b, uint64(e))
		}
	case []float64:
		for _, e := range x {
			b = le.AppendUint64(b, math.Float64bits(e))
		}
	default:
		panic(fmt.Sprintf("BUG: gguf: encodeFixed of %T", x))
	}
	return b
}
