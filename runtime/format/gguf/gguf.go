// Package gguf reads and writes GGUF files, the single-file model format of
// the ggml ecosystem: a header of typed metadata key/values and tensor
// descriptions, then the tensor bytes.
//
// Versions 1 (32-bit counts and lengths), 2 and 3 are read; files are written
// as version 3. Reading is hardened against hostile input: every count and
// length is checked against the bytes that remain before anything is
// allocated, so a parse never allocates much more than the file's own size,
// and every tensor's bytes must lie inside the file, aligned and not
// overlapping another tensor. Open memory-maps the file; tensor bytes are
// slices of the mapping that the kernel pages in on first touch.
package gguf

import (
	"errors"
	"fmt"
	"math"

	"github.com/memra-ai/memra/internal/mmapfile"
	"github.com/memra-ai/memra/ir/dtype"
)

// Errors returned by the reader and the writer, wrapped with context (the
// field, key or tensor name and the byte offset).
var (
	ErrMagic      = errors.New("gguf: not a GGUF file")
	ErrVersion    = errors.New("gguf: unsupported version")
	ErrBigEndian  = errors.New("gguf: big-endian file (only little-endian is supported)")
	ErrTruncated  = errors.New("gguf: truncated")
	ErrCorrupt    = errors.New("gguf: corrupt")
	ErrValueType  = errors.New("gguf: bad metadata value type")
	ErrTensorType = errors.New("gguf: unknown tensor type")
	ErrDuplicate  = errors.New("gguf: duplicate name")
	ErrAlignment  = errors.New("gguf: bad alignment")
	ErrShape      = errors.New("gguf: bad tensor shape")
	ErrRange      = errors.New("gguf: tensor data out of range")
	ErrOverlap    = errors.New("gguf: overlapping tensors")
	ErrClosed     = errors.New("gguf: file closed")
	ErrWriter     = errors.New("gguf: writer misuse")
)

const (
	// Magic is "GGUF" read as a little-endian uint32.
	Magic = 0x46554747
	// DefaultAlignment is the data alignment when general.alignment is absent.
	DefaultAlignment = 32
	// MaxDims is the most dimensions a tensor may have.
	MaxDims = 4
	// KeyAlignment is the metadata key that sets the data alignment.
	KeyAlignment = "general.alignment"

	maxDepth = 8 // deepest array nesting accepted
)

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name   string
	Type   dtype.Type
	Dims   []uint64 // ne order: Dims[0] is the contiguous row length
	Offset uint64   // from the start of the data section
}

// Elements returns the product of the dimensions (0 when it overflows).
func (t *TensorInfo) Elements() uint64 {
	n, err := elements(t.Dims)
	if err != nil {
		return 0
	}
	return n
}

// Bytes returns the size of the tensor's data (0 when the shape is invalid).
func (t *TensorInfo) Bytes() uint64 {
	n, err := tensorBytes(t.Type, t.Dims)
	if err != nil {
		return 0
	}
	return n
}

// File is a parsed GGUF file. Its metadata and tensor infos are plain Go
// values; tensor bytes are read through TensorData.
type File struct {
	Version    uint32
	KVs        []KV // in file order
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset int64 // start of the data section, from the start of the file

	data    []byte // the whole file
	mapped  bool   // data is a mapping to unmap on Close
	closed  bool
	kvIndex map[string]int
	tIndex  map[string]int
}

// Open memory-maps the file at path read-only and parses it. Close releases
// the mapping; tensor slices must not be used after it.
func Open(path string) (*File, error) {
	data, err := mmapfile.Map(path, 4)
	var small *mmapfile.SmallError
	switch {
	case errors.As(err, &small):
		return nil, fmt.Errorf("%w: %s: file of %d bytes", ErrTruncated, path, small.Size)
	case errors.Is(err, mmapfile.ErrNotRegular):
		return nil, fmt.Errorf("%w: %s: not a regular file", ErrMagic, path)
	case err != nil:
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = mmapfile.Unmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.mapped = true
	return f, nil
}

// Close releases the file's mapping (if Open made one). It is safe to call
// more than once.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	data := f.data
	f.data = nil
	if f.mapped {
		return mmapfile.Unmap(data)
	}
	return nil
}

// Size returns the file's length in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

// TensorData returns the bytes of t, a slice of the file (of the mapping for
// Open). The slice must not be written, nor used after Close.
func (f *File) TensorData(t *TensorInfo) ([]byte, error) {
	if f.closed {
		return nil, ErrClosed
	}
	n, err := tensorBytes(t.Type, t.Dims)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	start, end, err := f.span(t.Offset, n)
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %w", ErrRange, t.Name, err)
	}
	return f.data[start:end:end], nil
}

// span returns the absolute range of a tensor of n bytes at offset off in
// the data section, or an error when it does not lie inside the file.
func (f *File) span(off, n uint64) (start, end uint64, err error) {
	size := uint64(len(f.data))
	base := uint64(f.DataOffset)
	if off > size || base > size-off || n > size-base-off {
		s, e := satAdd(base, off), satAdd(satAdd(base, off), n)
		return 0, 0, fmt.Errorf("data [%d, %d) past end of file (%d bytes)", s, e, size)
	}
	return base + off, base + off + n, nil
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Lookup returns the value of key.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Lookup(key)
	s, ok := v.x.(string)
	return s, ok
}

// Uint returns an integer value of any integer type as uint64; false when
// the key is absent, not an integer, or negative.
func (f *File) Uint(key string) (uint64, bool) {
	v, _ := f.Lookup(key)
	return v.Uint()
}

// Float returns an f32 or f64 value as float64.
func (f *File) Float(key string) (float64, bool) {
	v, _ := f.Lookup(key)
	return v.Float()
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	v, _ := f.Lookup(key)
	b, ok := v.x.(bool)
	return b, ok
}

// Strings returns an array of strings. The slice is the file's own: do not
// modify it.
func (f *File) Strings(key string) ([]string, bool) {
	v, _ := f.Lookup(key)
	s, ok := v.x.([]string)
	return s, ok
}

// Float32s returns an array of f32 (or f64, converted) values. An f32 array
// is returned as the file's own slice: do not modify it.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, _ := f.Lookup(key)
	switch x := v.x.(type) {
	case []float32:
		return x, true
	case []float64:
		out := make([]float32, len(x))
		for i, e := range x {
			out[i] = float32(e)
		}
		return out, true
	}
	return nil, false
}

// Int32s returns an array of i32 values; arrays of other integer types are
// converted when every element fits in an int32. An i32 array is returned as
// the file's own slice: do not modify it.
func (f *File) Int32s(key string) ([]int32, bool) {
	v, _ := f.Lookup(key)
	if x, ok := v.x.([]int32); ok {
		return x, true
	}
	if v.Type != TypeArray {
		return nil, false
	}
	n := v.Len()
	out := make([]int32, n)
	for i := range n {
		e, ok := intElem(v.x, i)
		if !ok || e < math.MinInt32 || e > math.MaxInt32 {
			return nil, false
		}
		out[i] = int32(e)
	}
	return out, true
}

// intElem returns element i of an integer slice as int64.
func intElem(x any, i int) (int64, bool) {
	switch x := x.(type) {
	case []uint8:
		return int64(x[i]), true
	case []int8:
		return int64(x[i]), true
	case []uint16:
		return int64(x[i]), true
	case []int16:
		return int64(x[i]), true
	case []uint32:
		return int64(x[i]), true
	case []uint64:
		if x[i] > math.MaxInt64 {
			return 0, false
		}
		return int64(x[i]), true
	case []int64:
		return x[i], true
	}
	return 0, false
}

// elements returns the product of dims, rejecting empty shapes, zero
// dimensions and overflow.
func elements(dims []uint64) (uint64, error) {
	if len(dims) == 0 || len(dims) > MaxDims {
		return 0, fmt.Errorf("%w: %d dimensions (want 1 to %d)", ErrShape, len(dims), MaxDims)
	}
	n := uint64(1)
	for i, d := range dims {
		if d == 0 {
			return 0, fmt.Errorf("%w: dimension %d is zero", ErrShape, i)
		}
		if d > math.MaxInt64/n {
			return 0, fmt.Errorf("%w: dimensions %v overflow", ErrShape, dims)
		}
		n *= d
	}
	return n, nil
}

// tensorBytes returns the data size of a tensor of type t and shape dims.
func tensorBytes(t dtype.Type, dims []uint64) (uint64, error) {
	if !t.Known() {
		return 0, fmt.Errorf("%w: %v", ErrTensorType, t)
	}
	n, err := elements(dims)
	if err != nil {
		return 0, err
	}
	if dims[0]/uint64(t.BlockElems()) > math.MaxInt64/uint64(t.BlockBytes()) {
		return 0, fmt.Errorf("%w: dimensions %v overflow", ErrShape, dims)
	}
	rb, err := t.RowBytes(int(dims[0]))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrShape, err)
	}
	rows := n / dims[0]
	if rb > 0 && rows > math.MaxInt64/uint64(rb) {
		return 0, fmt.Errorf("%w: dimensions %v overflow", ErrShape, dims)
	}
	return rows * uint64(rb), nil
}
