// Package safetensors reads and writes safetensors files, the weight format
// of Hugging Face checkpoints: a little-endian u64 header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the bytes.
//
// Files are memory-mapped; tensor bytes are slices of the mapping, paged in
// on first touch. Reading is strict: the header length is capped, the JSON
// must be a well-formed object with unique names, and every tensor's range
// must lie inside the data section, match its dtype and shape, and not
// overlap another. Sharded checkpoints (model.safetensors.index.json) open as
// one Set. FP8 E4M3 weights with their scale tensors are dequantised by
// DequantizeFP8.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/memra-ai/memra/internal/mmapfile"
	"github.com/memra-ai/memra/ir/dtype"
)

// Errors returned by this package, wrapped with the file, tensor and offset.
var (
	ErrTruncated = errors.New("safetensors: truncated")
	ErrHeader    = errors.New("safetensors: bad header")
	ErrDType     = errors.New("safetensors: unsupported dtype")
	ErrShape     = errors.New("safetensors: bad shape")
	ErrRange     = errors.New("safetensors: tensor data out of range")
	ErrOverlap   = errors.New("safetensors: overlapping tensors")
	ErrDuplicate = errors.New("safetensors: duplicate tensor")
	ErrIndex     = errors.New("safetensors: bad index")
	ErrNotFound  = errors.New("safetensors: tensor not found")
	ErrScale     = errors.New("safetensors: bad FP8 scale")
	ErrClosed    = errors.New("safetensors: file closed")
)

// MaxHeader is the largest JSON header accepted (100 MB).
const MaxHeader = 100 << 20

// metadataKey is the JSON key of the free-form string metadata.
const metadataKey = "__metadata__"

// dtypeSizes gives the element size of each dtype name accepted.
var dtypeSizes = map[string]int{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}

// memraTypes maps the dtype names that have a dtype.Type.
var memraTypes = map[string]dtype.Type{
	"F64": dtype.F64, "F32": dtype.F32, "F16": dtype.F16, "BF16": dtype.BF16, "F8_E4M3": dtype.F8E4M3,
	"I64": dtype.I64, "I32": dtype.I32, "I16": dtype.I16, "I8": dtype.I8,
}

// ElemSize returns the bytes per element of a dtype name, or 0 if unknown.
func ElemSize(dt string) int { return dtypeSizes[dt] }

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name  string
	DType string // "F32", "BF16", "F8_E4M3", "I64", …
	Shape []int  // PyTorch order: Shape[len-1] is contiguous
	Begin int64  // byte range in the data section
	End   int64
}

// Type returns the memra type of the tensor's dtype; false for dtypes memra
// keeps as raw bytes only (U8, BOOL, F8_E5M2).
func (t *TensorInfo) Type() (dtype.Type, bool) {
	ty, ok := memraTypes[t.DType]
	return ty, ok
}

// Elements returns the product of the shape (1 for a scalar).
func (t *TensorInfo) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is one parsed safetensors file.
type File struct {
	Path       string            // "" for Parse
	Metadata   map[string]string // the __metadata__ object; nil when absent
	Tensors    []TensorInfo      // in data order
	DataOffset int64             // start of the data section in the file

	data   []byte
	mapped bool
	closed bool
	index  map[string]int
}

// Open memory-maps and parses the file at path.
func Open(path string) (*File, error) {
	data, err := mmapfile.Map(path, 8)
	var small *mmapfile.SmallError
	switch {
	case errors.As(err, &small):
		return nil, fmt.Errorf("%w: %s: %d bytes", ErrTruncated, path, small.Size)
	case errors.Is(err, mmapfile.ErrNotRegular):
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrHeader, path)
	case err != nil:
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = mmapfile.Unmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path, f.mapped = path, true
	return f, nil
}

// Close releases the mapping. It is safe to call more than once.
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

// Tensor returns the named tensor's info.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorData returns the bytes of t, a read-only slice of the file.
func (f *File) TensorData(t *TensorInfo) ([]byte, error) {
	if f.closed {
		return nil, ErrClosed
	}
	size := int64(len(f.data)) - f.DataOffset
	if t.Begin < 0 || t.End < t.Begin || t.End > size {
		return nil, fmt.Errorf("%w: tensor %q: [%d, %d) outside the data section (%d bytes)", ErrRange, t.Name, t.Begin, t.End, size)
	}
	s, e := f.DataOffset+t.Begin, f.DataOffset+t.End
	return f.data[s:e:e], nil
}

// rawEntry is one tensor entry of the JSON header.
type rawEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// Parse parses a whole safetensors file held in memory; tensor data are
// slices of data.
func Parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("%w: header length: file of %d bytes", ErrTruncated, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeader {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d-byte cap", ErrHeader, n, MaxHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("%w: header of %d bytes at offset 8, file has %d", ErrTruncated, n, len(data))
	}
	f := &File{data: data, DataOffset: 8 + int64(n), index: map[string]int{}}
	if err := f.parseHeader(data[8 : 8+n]); err != nil {
		return nil, err
	}
	if err := f.checkRanges(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) parseHeader(h []byte) error {
	dec := json.NewDecoder(bytes.NewReader(h))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return fmt.Errorf("%w: JSON header does not start with an object (offset 8)", ErrHeader)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: JSON at header byte %d: %w", ErrHeader, dec.InputOffset(), err)
		}
		name, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%w: JSON at header byte %d: key is not a string", ErrHeader, dec.InputOffset())
		}
		if name == metadataKey {
			if f.Metadata != nil {
				return fmt.Errorf("%w: %s appears twice", ErrDuplicate, metadataKey)
			}
			f.Metadata = map[string]string{}
			if err := dec.Decode(&f.Metadata); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrHeader, metadataKey, err)
			}
			continue
		}
		if _, dup := f.index[name]; dup {
			return fmt.Errorf("%w: %q appears twice in the header", ErrDuplicate, name)
		}
		var e rawEntry
		sub := json.RawMessage{}
		if err := dec.Decode(&sub); err != nil {
			return fmt.Errorf("%w: tensor %q: %w", ErrHeader, name, err)
		}
		ed := json.NewDecoder(bytes.NewReader(sub))
		ed.DisallowUnknownFields()
		if err := ed.Decode(&e); err != nil {
			return fmt.Errorf("%w: tensor %q: %w", ErrHeader, name, err)
		}
		t, err := e.info(name)
		if err != nil {
			return err
		}
		f.index[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: JSON header: %w", ErrHeader, err)
	}
	if rest := bytes.TrimRight(h[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return fmt.Errorf("%w: %d bytes after the JSON object", ErrHeader, len(rest))
	}
	return nil
}

// info validates one header entry.
func (e *rawEntry) info(name string) (TensorInfo, error) {
	size, ok := dtypeSizes[e.DType]
	if !ok {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q: dtype %q", ErrDType, name, e.DType)
	}
	if e.Shape == nil || len(e.DataOffsets) != 2 {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q: missing shape or data_offsets [begin, end]", ErrHeader, name)
	}
	t := TensorInfo{Name: name, DType: e.DType, Shape: make([]int, len(e.Shape))}
	n := int64(size)
	for i, d := range e.Shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/d) {
			return TensorInfo{}, fmt.Errorf("%w: tensor %q: shape %v", ErrShape, name, e.Shape)
		}
		n *= d
		t.Shape[i] = int(d)
	}
	for _, o := range e.DataOffsets {
		if o > math.MaxInt64 {
			return TensorInfo{}, fmt.Errorf("%w: tensor %q: data_offsets %v", ErrRange, name, e.DataOffsets)
		}
	}
	t.Begin, t.End = int64(e.DataOffsets[0]), int64(e.DataOffsets[1])
	if t.End < t.Begin || t.End-t.Begin != n {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d) hold %d bytes, %s %v needs %d",
			ErrShape, name, t.Begin, t.End, t.End-t.Begin, e.DType, e.Shape, n)
	}
	return t, nil
}

// checkRanges verifies that ranges lie in the data section and are
// disjoint, and orders the tensors by offset.
func (f *File) checkRanges() error {
	size := int64(len(f.data)) - f.DataOffset
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.End > size {
			return fmt.Errorf("%w: tensor %q: data [%d, %d) past the end of the data section (%d bytes at offset %d)",
				ErrRange, t.Name, t.Begin, t.End, size, f.DataOffset)
		}
	}
	slices.SortStableFunc(f.Tensors, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmpInt(a.Begin, b.Begin)
		}
		return cmpInt(a.End, b.End)
	})
	var prev *TensorInfo
	for i := range f.Tensors {
		t := &f.Tensors[i]
		f.index[t.Name] = i
		if t.Begin == t.End {
			continue // empty tensors take no bytes
		}
		if prev != nil && t.Begin < prev.End {
			return fmt.Errorf("%w: tensor %q [%d, %d) and tensor %q [%d, %d)", ErrOverlap, prev.Name, prev.Begin, prev.End, t.Name, t.Begin, t.End)
		}
		prev = t
	}
	return nil
}

func cmpInt(a, b int64) int {
	if a < b {
		return -1
	}
	return 1
}

// Tensor is one tensor to write.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Data  []byte
}

// Write writes a single safetensors file holding tensors in the order
// given, with optional string metadata. The header is padded with spaces to
// a multiple of 8 bytes.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	var h bytes.Buffer
	h.WriteByte('{')
	if metadata != nil {
		m, err := json.Marshal(metadata)
		if err != nil {
			return fmt.Errorf("safetensors: metadata: %w", err)
		}
		fmt.Fprintf(&h, "%q:%s", metadataKey, m)
	}
	seen := map[string]bool{}
	var off int64
	for i, t := range tensors {
		size, ok := dtypeSizes[t.DType]
		if !ok {
			return fmt.Errorf("%w: tensor %q: dtype %q", ErrDType, t.Name, t.DType)
		}
		if seen[t.Name] || t.Name == metadataKey {
			return fmt.Errorf("%w: %q", ErrDuplicate, t.Name)
		}
		seen[t.Name] = true
		n := size
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("%w: tensor %q: shape %v", ErrShape, t.Name, t.Shape)
			}
			n *= d
		}
		if n != len(t.Data) {
			return fmt.Errorf("%w: tensor %q: %d bytes given, %s %v is %d", ErrShape, t.Name, len(t.Data), t.DType, t.Shape, n)
		}
		if i > 0 || metadata != nil {
			h.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		shape, _ := json.Marshal(append([]int{}, t.Shape...))
		fmt.Fprintf(&h, `%s:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, name, t.DType, shape, off, off+int64(n))
		off += int64(n)
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(h.Len())); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	if _, err := w.Write(h.Bytes()); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: write: %w", err)
		}
	}
	return nil
}

// WriteFile writes tensors to a new file at path.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	fd, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := Write(fd, tensors, metadata); err != nil {
		fd.Close()
		return err
	}
	return fd.Close()
}
