// Package dtype defines the numeric formats memra reads, stores and computes
// with: plain floats and the block-quantised formats of GGUF files.
//
// The numbering of Type is GGUF's ggml_type numbering, so a tensor type read
// from a file converts directly. Block layouts are bit-compatible with the
// files other tools write.
//
// Besides the type table the package converts scalars (F16, BF16, FP8 E4M3),
// decodes rows (Dequantize), encodes them with GGUF tools' reference
// quantisers (Quantize) and takes the fused row·vector product the CPU
// reference executor is built on (Dot). The CPU's int8 products (q8.go:
// Acts, Pack, Packed.Product) are a second, faster numerical class.
package dtype

import (
	"errors"
	"fmt"
)

// ErrType is returned for a type memra does not know or cannot handle.
var ErrType = errors.New("dtype: unsupported type")

// ErrLength is returned when a byte or element count does not fit the type:
// not a whole number of blocks, or bytes and elements that disagree.
var ErrLength = errors.New("dtype: length mismatch")

// Type is a tensor element format, numbered as GGUF's ggml_type.
type Type uint32

// The types memra knows. Gaps in the numbering are types removed from GGUF or
// not supported here.
const (
	F32    Type = 0
	F16    Type = 1
	Q4_0   Type = 2
	Q4_1   Type = 3
	Q5_0   Type = 6
	Q5_1   Type = 7
	Q8_0   Type = 8
	Q8_1   Type = 9
	Q2_K   Type = 10
	Q3_K   Type = 11
	Q4_K   Type = 12
	Q5_K   Type = 13
	Q6_K   Type = 14
	Q8_K   Type = 15
	IQ4_NL Type = 20
	IQ4_XS Type = 23
	I8     Type = 24
	I16    Type = 25
	I32    Type = 26
	I64    Type = 27
	F64    Type = 28
	BF16   Type = 30
	// F8E4M3 is FP8 E4M3 (safetensors F8_E4M3). It has no GGUF id; memra
	// numbers it past GGUF's private range so it never collides.
	F8E4M3 Type = 1000
)

// info is one row of the type table.
type info struct {
	name       string
	blockElems int // elements per block
	blockBytes int // bytes per block
}

// table is indexed by Type; a zero row means "unknown".
var table = map[Type]info{
	F32:    {"F32", 1, 4},
	F16:    {"F16", 1, 2},
	Q4_0:   {"Q4_0", 32, 18},
	Q4_1:   {"Q4_1", 32, 20},
	Q5_0:   {"Q5_0", 32, 22},
	Q5_1:   {"Q5_1", 32, 24},
	Q8_0:   {"Q8_0", 32, 34},
	Q8_1:   {"Q8_1", 32, 36},
	Q2_K:   {"Q2_K", 256, 84},
	Q3_K:   {"Q3_K", 256, 110},
	Q4_K:   {"Q4_K", 256, 144},
	Q5_K:   {"Q5_K", 256, 176},
	Q6_K:   {"Q6_K", 256, 210},
	Q8_K:   {"Q8_K", 256, 292},
	IQ4_NL: {"IQ4_NL", 32, 18},
	IQ4_XS: {"IQ4_XS", 256, 136},
	I8:     {"I8", 1, 1},
	I16:    {"I16", 1, 2},
	I32:    {"I32", 1, 4},
	I64:    {"I64", 1, 8},
	F64:    {"F64", 1, 8},
	BF16:   {"BF16", 1, 2},
	F8E4M3: {"F8_E4M3", 1, 1},
}

// Known reports whether memra knows the layout of t.
func (t Type) Known() bool { _, ok := table[t]; return ok }

// String returns the conventional upper-case name ("Q4_K", "BF16").
func (t Type) String() string {
	if i, ok := table[t]; ok {
		return i.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockElems is the number of elements in one block (1 for scalar types).
func (t Type) BlockElems() int { return table[t].blockElems }

// BlockBytes is the size of one block in bytes (the element size for scalar types).
func (t Type) BlockBytes() int { return table[t].blockBytes }

// Quantized reports whether t is a block-quantised type.
func (t Type) Quantized() bool { return table[t].blockElems > 1 }

// RowBytes returns the bytes of a row of n elements, or an error when t is
// unknown or n is not a whole number of blocks.
func (t Type) RowBytes(n int) (int, error) {
	i, ok := table[t]
	if !ok {
		return 0, fmt.Errorf("%w: %v", ErrType, t)
	}
	if n < 0 || n%i.blockElems != 0 {
		return 0, fmt.Errorf("%w: row of %d elements is not a whole number of %v blocks (%d)", ErrLength, n, t, i.blockElems)
	}
	return n / i.blockElems * i.blockBytes, nil
}

// Parse returns the type with the given name (case-insensitive).
func Parse(name string) (Type, error) {
	for t, i := range table {
		if equalFold(i.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrType, name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
