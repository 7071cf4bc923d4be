package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/memra-ai/memra/ir/dtype"
)

var le = binary.LittleEndian

// Parse parses a whole GGUF file held in memory. Tensor data are slices of
// data, which must stay unmodified while the File is in use.
func Parse(data []byte) (*File, error) {
	d := &decoder{b: data}
	f, err := d.file()
	if err != nil {
		return nil, err
	}
	f.data = data
	if err := f.checkTensors(); err != nil {
		return nil, err
	}
	return f, nil
}

// decoder reads the header of a GGUF file, bounds-checking every read.
type decoder struct {
	b   []byte
	pos int
	v1  bool // version 1: 32-bit counts, lengths and dimensions
}

func (d *decoder) remain() uint64 { return uint64(len(d.b) - d.pos) }

// need fails unless n more bytes remain.
func (d *decoder) need(n uint64, what string) error {
	if n > d.remain() {
		return fmt.Errorf("%w: %s at offset %d: need %d bytes, %d remain", ErrTruncated, what, d.pos, n, d.remain())
	}
	return nil
}

func (d *decoder) take(n int, what string) ([]byte, error) {
	if err := d.need(uint64(n), what); err != nil {
		return nil, err
	}
	p := d.b[d.pos : d.pos+n]
	d.pos += n
	return p, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	p, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return le.Uint32(p), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	p, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return le.Uint64(p), nil
}

// word reads a count, length or dimension: u32 in version 1, u64 after.
func (d *decoder) word(what string) (uint64, error) {
	if d.v1 {
		v, err := d.u32(what)
		return uint64(v), err
	}
	return d.u64(what)
}

func (d *decoder) wordSize() uint64 {
	if d.v1 {
		return 4
	}
	return 8
}

// count reads a count of items of at least minSize bytes each and checks
// that the remaining bytes can hold them, before anything is allocated.
func (d *decoder) count(what string, minSize uint64) (int, error) {
	at := d.pos
	n, err := d.word(what)
	if err != nil {
		return 0, err
	}
	hi, lo := bits.Mul64(n, minSize)
	if hi != 0 || lo > d.remain() {
		return 0, fmt.Errorf("%w: %s %d at offset %d needs at least %d×%d bytes, %d remain",
			ErrTruncated, what, n, at, n, minSize, d.remain())
	}
	return int(n), nil
}

func (d *decoder) str(what string) (string, error) {
	n, err := d.count(what+" length", 1)
	if err != nil {
		return "", err
	}
	p, _ := d.take(n, what)
	return string(p), nil
}

// strings reads n strings. It checks every length first, then copies the
// whole run in one allocation and slices the strings out of it.
func (d *decoder) strings(what string, n int) ([]string, error) {
	start := d.pos
	for i := range n {
		at := d.pos
		l, err := d.word(what)
		if err == nil {
			err = d.need(l, what)
		}
		if err != nil {
			return nil, fmt.Errorf("element %d at offset %d: %w", i, at, err)
		}
		d.pos += int(l)
	}
	all := string(d.b[start:d.pos])
	xs := make([]string, n)
	p := 0
	ws := int(d.wordSize())
	for i := range xs {
		var l int
		if d.v1 {
			l = int(le.Uint32(d.b[start+p:]))
		} else {
			l = int(le.Uint64(d.b[start+p:]))
		}
		p += ws
		xs[i] = all[p : p+l]
		p += l
	}
	return xs, nil
}

// minValueSize is the fewest bytes a value of type t can take.
func (d *decoder) minValueSize(t ValueType) uint64 {
	switch t {
	case TypeString:
		return d.wordSize()
	case TypeArray:
		return 4 + d.wordSize()
	}
	return uint64(fixedSize[t])
}

func (d *decoder) file() (*File, error) {
	if len(d.b) < 4 {
		return nil, fmt.Errorf("%w: magic: file of %d bytes", ErrTruncated, len(d.b))
	}
	if m := le.Uint32(d.b); m != Magic {
		return nil, fmt.Errorf("%w: magic %q", ErrMagic, d.b[:4])
	}
	d.pos = 4
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version != 0 && version&0xFFFF == 0:
		return nil, fmt.Errorf("%w: version field %#x", ErrBigEndian, version)
	case version < 1 || version > 3:
		return nil, fmt.Errorf("%w: %d (want 1, 2 or 3)", ErrVersion, version)
	}
	d.v1 = version == 1
	f := &File{Version: version, Alignment: DefaultAlignment}

	ws := d.wordSize()
	minTensor := ws + 4 + 4 + 8 // name length, n_dims, type, offset
	minKV := ws + 4 + 1         // key length, type, smallest value
	nt, err := d.count("tensor_count", minTensor)
	if err != nil {
		return nil, err
	}
	nkv, err := d.count("kv_count", minKV)
	if err != nil {
		return nil, err
	}
	if uint64(nt)*minTensor+uint64(nkv)*minKV > d.remain() {
		return nil, fmt.Errorf("%w: %d tensor infos and %d key/values at offset %d need more than the %d bytes that remain",
			ErrTruncated, nt, nkv, d.pos, d.remain())
	}

	f.KVs = make([]KV, 0, nkv)
	f.kvIndex = make(map[string]int, nkv)
	for i := range nkv {
		kv, err := d.kv(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.kvIndex[kv.Key]; dup {
			return nil, fmt.Errorf("%w: key %q appears twice", ErrDuplicate, kv.Key)
		}
		f.kvIndex[kv.Key] = len(f.KVs)
		f.KVs = append(f.KVs, kv)
	}
	if v, ok := f.Lookup(KeyAlignment); ok {
		a, isU32 := v.x.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: %s = %v (%v); want a power of two of type u32", ErrAlignment, KeyAlignment, v, v.Type)
		}
		f.Alignment = uint64(a)
	}

	f.Tensors = make([]TensorInfo, 0, nt)
	f.tIndex = make(map[string]int, nt)
	for i := range nt {
		t, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tIndex[t.Name]; dup {
			return nil, fmt.Errorf("%w: tensor %q appears twice", ErrDuplicate, t.Name)
		}
		f.tIndex[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	f.DataOffset = int64(alignUp(uint64(d.pos), f.Alignment))
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

func (d *decoder) kv(i int) (KV, error) {
	at := d.pos
	key, err := d.str(fmt.Sprintf("key %d", i))
	if err != nil {
		return KV{}, err
	}
	if key == "" {
		return KV{}, fmt.Errorf("%w: key %d at offset %d is empty", ErrCorrupt, i, at)
	}
	what := fmt.Sprintf("key %q", key)
	at = d.pos
	t, err := d.u32(what + ": value type")
	if err != nil {
		return KV{}, err
	}
	if !ValueType(t).Valid() {
		return KV{}, fmt.Errorf("%w: %s: value type %d at offset %d", ErrValueType, what, t, at)
	}
	v, err := d.value(ValueType(t), what, 0)
	if err != nil {
		return KV{}, err
	}
	return KV{Key: key, Value: v}, nil
}

// value reads one value of type t (already validated).
func (d *decoder) value(t ValueType, what string, depth int) (Value, error) {
	if t == TypeArray {
		return d.array(what, depth)
	}
	if t == TypeString {
		s, err := d.str(what)
		return Value{Type: t, x: s}, err
	}
	at := d.pos
	p, err := d.take(fixedSize[t], what)
	if err != nil {
		return Value{}, err
	}
	v := Value{Type: t}
	switch t {
	case TypeUint8:
		v.x = p[0]
	case TypeInt8:
		v.x = int8(p[0])
	case TypeUint16:
		v.x = le.Uint16(p)
	case TypeInt16:
		v.x = int16(le.Uint16(p))
	case TypeUint32:
		v.x = le.Uint32(p)
	case TypeInt32:
		v.x = int32(le.Uint32(p))
	case TypeFloat32:
		v.x = math.Float32frombits(le.Uint32(p))
	case TypeBool:
		if p[0] > 1 {
			return Value{}, fmt.Errorf("%w: %s: bool byte %d at offset %d", ErrCorrupt, what, p[0], at)
		}
		v.x = p[0] == 1
	case TypeUint64:
		v.x = le.Uint64(p)
	case TypeInt64:
		v.x = int64(le.Uint64(p))
	case TypeFloat64:
		v.x = math.Float64frombits(le.Uint64(p))
	default:
		panic("BUG: gguf: unhandled value type " + t.String())
	}
	return v, nil
}

func (d *decoder) array(what string, depth int) (Value, error) {
	if depth >= maxDepth {
		return Value{}, fmt.Errorf("%w: %s: arrays nested deeper than %d at offset %d", ErrCorrupt, what, maxDepth, d.pos)
	}
	at := d.pos
	et, err := d.u32(what + ": array element type")
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	if !elem.Valid() {
		return Value{}, fmt.Errorf("%w: %s: array element type %d at offset %d", ErrValueType, what, et, at)
	}
	n, err := d.count(what+": array count", d.minValueSize(elem))
	if err != nil {
		return Value{}, err
	}
	v := Value{Type: TypeArray, Elem: elem}
	switch elem {
	case TypeString:
		xs, err := d.strings(what, n)
		if err != nil {
			return Value{}, err
		}
		v.x = xs
	case TypeArray:
		xs := make([]Value, n)
		for i := range xs {
			if xs[i], err = d.array(what, depth+1); err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
		}
		v.x = xs
	case TypeBool:
		p, _ := d.take(n, what)
		xs := make([]bool, n)
		for i, c := range p {
			if c > 1 {
				return Value{}, fmt.Errorf("%w: %s[%d]: bool byte %d at offset %d", ErrCorrupt, what, i, c, d.pos-n+i)
			}
			xs[i] = c == 1
		}
		v.x = xs
	default:
		p, _ := d.take(n*fixedSize[elem], what) // count checked the size
		v.x = decodeFixed(elem, p, n)
	}
	return v, nil
}

// decodeFixed decodes n little-endian values of a fixed-size type.
func decodeFixed(t ValueType, p []byte, n int) any {
	switch t {
	case TypeUint8:
		return slices.Clone(p)
	case TypeInt8:
		xs := make([]int8, n)
		for i := range xs {
			xs[i] = int8(p[i])
		}
		return xs
	case TypeUint16:
		return decodeSlice(p, n, 2, func(b []byte) uint16 { return le.Uint16(b) })
	case TypeInt16:
		return decodeSlice(p, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case TypeUint32:
		return decodeSlice(p, n, 4, le.Uint32)
	case TypeInt32:
		return decodeSlice(p, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case TypeFloat32:
		return decodeSlice(p, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case TypeUint64:
		return decodeSlice(p, n, 8, le.Uint64)
	case TypeInt64:
		return decodeSlice(p, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })
	case TypeFloat64:
		return decodeSlice(p, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	}
	panic("BUG: gguf: decodeFixed of " + t.String())
}

func decodeSlice[T any](p []byte, n, size int, get func([]byte) T) []T {
	xs := make([]T, n)
	for i := range xs {
		xs[i] = get(p[i*size:])
	}
	return xs
}

func (d *decoder) tensorInfo(i int) (TensorInfo, error) {
	name, err := d.str(fmt.Sprintf("tensor %d name", i))
	if err != nil {
		return TensorInfo{}, err
	}
	if name == "" {
		return TensorInfo{}, fmt.Errorf("%w: tensor %d at offset %d has an empty name", ErrCorrupt, i, d.pos)
	}
	what := fmt.Sprintf("tensor %q", name)
	at := d.pos
	nd, err := d.u32(what + ": n_dims")
	if err != nil {
		return TensorInfo{}, err
	}
	if nd == 0 || nd > MaxDims {
		return TensorInfo{}, fmt.Errorf("%w: %s: %d dimensions at offset %d (want 1 to %d)", ErrShape, what, nd, at, MaxDims)
	}
	t := TensorInfo{Name: name, Dims: make([]uint64, nd)}
	for j := range t.Dims {
		if t.Dims[j], err = d.word(fmt.Sprintf("%s: dimension %d", what, j)); err != nil {
			return TensorInfo{}, err
		}
	}
	at = d.pos
	typ, err := d.u32(what + ": type")
	if err != nil {
		return TensorInfo{}, err
	}
	t.Type = dtype.Type(typ)
	if !t.Type.Known() {
		return TensorInfo{}, fmt.Errorf("%w: %s: type %d at offset %d", ErrTensorType, what, typ, at)
	}
	if _, err := tensorBytes(t.Type, t.Dims); err != nil {
		return TensorInfo{}, fmt.Errorf("%s (dims at offset %d): %w", what, at-int(nd)*int(d.wordSize()), err)
	}
	if t.Offset, err = d.u64(what + ": offset"); err != nil {
		return TensorInfo{}, err
	}
	return t, nil
}

// checkTensors verifies that every tensor's bytes are aligned, inside the
// file and disjoint from every other tensor's.
func (f *File) checkTensors() error {
	type span struct {
		start, end uint64
		i          int
	}
	spans := make([]span, len(f.Tensors))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset%f.Alignment != 0 {
			return fmt.Errorf("%w: tensor %q: offset %d is not a multiple of %d", ErrAlignment, t.Name, t.Offset, f.Alignment)
		}
		n, err := tensorBytes(t.Type, t.Dims)
		if err != nil {
			panic("BUG: gguf: shape checked at parse: " + err.Error())
		}
		s, e, err := f.span(t.Offset, n)
		if err != nil {
			return fmt.Errorf("%w: tensor %q: %w", ErrRange, t.Name, err)
		}
		spans[i] = span{s, e, i}
	}
	slices.SortFunc(spans, func(a, b span) int {
		if a.start != b.start {
			return cmpU64(a.start, b.start)
		}
		return a.i - b.i
	})
	for k := 1; k < len(spans); k++ {
		a, b := spans[k-1], spans[k]
		if b.start < a.end {
			return fmt.Errorf("%w: tensor %q [%d, %d) and tensor %q [%d, %d)", ErrOverlap,
				f.Tensors[a.i].Name, a.start, a.end, f.Tensors[b.i].Name, b.start, b.end)
		}
	}
	return nil
}

func cmpU64(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}
