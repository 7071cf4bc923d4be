package gguf

import (
	"fmt"
	"math"
)

// ValueType is the type tag of a metadata value, numbered as in the file.
type ValueType uint32

// The metadata value types of GGUF.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// valueTypeNames is indexed by ValueType.
var valueTypeNames = [...]string{
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
}

// fixedSize is the encoded size of each fixed-size scalar type (0 for
// string and array, whose size depends on the version and the content).
var fixedSize = [...]int{1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}

// Valid reports whether t is a value type GGUF defines.
func (t ValueType) Valid() bool { return int(t) < len(valueTypeNames) }

// String returns the short name of the type ("u32", "string", "array").
func (t ValueType) String() string {
	if t.Valid() {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Value is one metadata value. Scalars hold one Go value of the matching
// type (uint8 … float64, bool, string). Arrays hold a Go slice of the element
// type ([]uint32, []string, []bool, …); an array of arrays holds []Value.
type Value struct {
	Type ValueType // the value's type; TypeArray for arrays
	Elem ValueType // the element type when Type is TypeArray
	x    any
}

// Any returns the Go value: a scalar (uint8 … float64, bool, string) or, for
// an array, a slice of the element type ([]Value for nested arrays).
func (v Value) Any() any { return v.x }

// Len returns the number of elements of an array, or 0 for a scalar.
func (v Value) Len() int {
	switch x := v.x.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	case []Value:
		return len(x)
	}
	return 0
}

// String formats the value for people: scalars as Go prints them, arrays as
// their element type and length.
func (v Value) String() string {
	if v.Type == TypeArray {
		return fmt.Sprintf("[%d]%v", v.Len(), v.Elem)
	}
	if s, ok := v.x.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v.x)
}

// Uint returns an integer scalar as uint64; false for other types and for
// negative values.
func (v Value) Uint() (uint64, bool) {
	switch x := v.x.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8, int16, int32, int64:
		i, _ := v.Int()
		if i < 0 {
			return 0, false
		}
		return uint64(i), true
	}
	return 0, false
}

// Int returns an integer scalar as int64; false for other types and for
// a uint64 above math.MaxInt64.
func (v Value) Int() (int64, bool) {
	switch x := v.x.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8, uint16, uint32:
		u, _ := v.Uint()
		return int64(u), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

// Float returns a float scalar (f32 or f64) as float64.
func (v Value) Float() (float64, bool) {
	switch x := v.x.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// ValueOf converts a Go value into a metadata Value. It accepts the scalar
// types uint8 … float64, bool and string; int (stored as i32, the GGUF
// convention, when it fits); slices of those types; []Value for arrays of
// arrays; and a Value itself.
func ValueOf(x any) (Value, error) {
	switch x := x.(type) {
	case Value:
		return x, x.check(0)
	case uint8:
		return Value{Type: TypeUint8, x: x}, nil
	case int8:
		return Value{Type: TypeInt8, x: x}, nil
	case uint16:
		return Value{Type: TypeUint16, x: x}, nil
	case int16:
		return Value{Type: TypeInt16, x: x}, nil
	case uint32:
		return Value{Type: TypeUint32, x: x}, nil
	case int32:
		return Value{Type: TypeInt32, x: x}, nil
	case float32:
		return Value{Type: TypeFloat32, x: x}, nil
	case bool:
		return Value{Type: TypeBool, x: x}, nil
	case string:
		return Value{Type: TypeString, x: x}, nil
	case uint64:
		return Value{Type: TypeUint64, x: x}, nil
	case int64:
		return Value{Type: TypeInt64, x: x}, nil
	case float64:
		return Value{Type: TypeFloat64, x: x}, nil
	case int:
		if x < math.MinInt32 || x > math.MaxInt32 {
			return Value{}, fmt.Errorf("%w: int %d does not fit an i32 value; pass an int64", ErrValueType, x)
		}
		return Value{Type: TypeInt32, x: int32(x)}, nil
	case []uint8:
		return array(TypeUint8, x), nil
	case []int8:
		return array(TypeInt8, x), nil
	case []uint16:
		return array(TypeUint16, x), nil
	case []int16:
		return array(TypeInt16, x), nil
	case []uint32:
		return array(TypeUint32, x), nil
	case []int32:
		return array(TypeInt32, x), nil
	case []float32:
		return array(TypeFloat32, x), nil
	case []bool:
		return array(TypeBool, x), nil
	case []string:
		return array(TypeString, x), nil
	case []uint64:
		return array(TypeUint64, x), nil
	case []int64:
		return array(TypeInt64, x), nil
	case []float64:
		return array(TypeFloat64, x), nil
	case []Value:
		v := array(TypeArray, x)
		return v, v.check(0)
	}
	return Value{}, fmt.Errorf("%w: cannot store a Go %T", ErrValueType, x)
}

func array(elem ValueType, x any) Value { return Value{Type: TypeArray, Elem: elem, x: x} }

// check verifies that a Value built by a caller is consistent: its Go
// value matches its type tags, and nested arrays hold arrays.
func (v Value) check(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: arrays nested deeper than %d", ErrCorrupt, maxDepth)
	}
	if vs, ok := v.x.([]Value); ok {
		if v.Type != TypeArray || v.Elem != TypeArray {
			return fmt.Errorf("%w: value tagged %v/%v holds []Value", ErrValueType, v.Type, v.Elem)
		}
		for _, e := range vs {
			if e.Type != TypeArray {
				return fmt.Errorf("%w: array of arrays holds a %v", ErrValueType, e.Type)
			}
			if err := e.check(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	want, err := ValueOf(v.x)
	if err != nil {
		return err
	}
	if v.Type != want.Type || (v.Type == TypeArray && v.Elem != want.Elem) {
		return fmt.Errorf("%w: value tagged %v/%v holds a Go %T", ErrValueType, v.Type, v.Elem, v.x)
	}
	return nil
}
