package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// decodeOrdered decodes one JSON value into the values templates see: objects become
// *exec.Dict (gonja's ordered dict, keys in document order), arrays []any, integers int,
// other numbers float64, strings string, booleans bool and null pyNone.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			dict := exec.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v is not a string", kt)
				}
				val, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				setDictItem(dict, key, val)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return dict, nil
		case '[':
			list := []any{}
			for dec.More() {
				val, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, val)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected delimiter %q", t)
	case json.Number:
		s := t.String()
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 0); err == nil {
				return int(i), nil
			}
		}
		f, err := t.Float64()
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil
	case nil:
		return pyNone, nil
	default: // string, bool
		return t, nil
	}
}

// setDictItem sets key in dict, replacing an existing value in place (Python keeps the first
// position of a repeated key and the last value).
func setDictItem(dict *exec.Dict, key string, val any) {
	for _, p := range dict.Pairs {
		if p.Key.IsString() && p.Key.String() == key {
			p.Value = exec.ToValue(val)
			return
		}
	}
	dict.Pairs = append(dict.Pairs, &exec.Pair{Key: exec.AsValue(key), Value: exec.ToValue(val)})
}

// decodeContext decodes the render context, a JSON object, into its top-level names in order.
func decodeContext(ctx []byte) ([]*exec.Pair, error) {
	dec := json.NewDecoder(bytes.NewReader(ctx))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the context object")
	}
	dict, ok := v.(*exec.Dict)
	if !ok {
		return nil, fmt.Errorf("context is %s, not an object", pyTypeName(exec.ToValue(v)))
	}
	return dict.Pairs, nil
}

// dumpOptions are the arguments of Python's json.dumps that templates use.
type dumpOptions struct {
	indent      string // "" with hasIndent false: one line
	hasIndent   bool
	itemSep     string
	keySep      string
	ensureASCII bool
	sortKeys    bool
}

// pyDumps is Python's json.dumps(v, ensure_ascii=o.ensureASCII, indent=…, separators=…,
// sort_keys=…) for template values.
func pyDumps(v *exec.Value, o dumpOptions) (string, error) {
	var b strings.Builder
	if err := o.encode(&b, v, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

const maxJSONDepth = 512

func (o *dumpOptions) newline(b *strings.Builder, depth int) {
	b.WriteByte('\n')
	for range depth {
		b.WriteString(o.indent)
	}
}

func (o *dumpOptions) encode(b *strings.Builder, v *exec.Value, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("tojson: value nested too deeply")
	}
	if v == nil || v.IsNil() {
		b.WriteString("null")
		return nil
	}
	if v.IsError() {
		return errors.New(v.Error())
	}
	switch {
	case v.IsString():
		o.encodeString(b, v.String())
	case v.IsBool():
		if v.Bool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInteger():
		b.WriteString(strconv.Itoa(v.Integer()))
	case v.IsFloat():
		f := v.Float()
		switch {
		case math.IsNaN(f):
			b.WriteString("NaN")
		case math.IsInf(f, 1):
			b.WriteString("Infinity")
		case math.IsInf(f, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(f))
		}
	case v.IsList():
		n := v.Len()
		if n == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			if o.hasIndent {
				o.newline(b, depth+1)
			}
			if err := o.encode(b, listItem(v, i), depth+1); err != nil {
				return err
			}
		}
		if o.hasIndent {
			o.newline(b, depth)
		}
		b.WriteByte(']')
	case v.IsDict():
		pairs := dictPairs(v)
		if len(pairs) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, len(pairs))
		for i, p := range pairs {
			k, err := jsonKey(p.Key)
			if err != nil {
				return err
			}
			keys[i] = k
		}
		order := make([]int, len(pairs))
		for i := range order {
			order[i] = i
		}
		if o.sortKeys {
			sort.SliceStable(order, func(i, j int) bool { return keys[order[i]] < keys[order[j]] })
		}
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteString(o.itemSep)
			}
			if o.hasIndent {
				o.newline(b, depth+1)
			}
			o.encodeString(b, keys[i])
			b.WriteString(o.keySep)
			if err := o.encode(b, pairs[i].Value, depth+1); err != nil {
				return err
			}
		}
		if o.hasIndent {
			o.newline(b, depth)
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("%w: Object of type %s is not JSON serializable", ErrType, pyTypeName(v))
	}
	return nil
}

// jsonKey converts a dict key the way json.dumps does (str as is; int, float, bool, None
// to their JSON text).
func jsonKey(k *exec.Value) (string, error) {
	switch {
	case k.IsString():
		return k.String(), nil
	case k.IsNil():
		return "null", nil
	case k.IsBool():
		if k.Bool() {
			return "true", nil
		}
		return "false", nil
	case k.IsInteger():
		return strconv.Itoa(k.Integer()), nil
	case k.IsFloat():
		return pyFloatRepr(k.Float()), nil
	}
	return "", fmt.Errorf("%w: keys must be str, int, float, bool or None, not %s", ErrType, pyTypeName(k))
}

// listItem returns element i of a list value.
func listItem(v *exec.Value, i int) *exec.Value {
	return exec.ToValue(reflect.Indirect(v.Val).Index(i))
}

// dictPairs returns the pairs of a dict value in iteration order: insertion order for
// *exec.Dict, sorted keys for a Go map (which has no order of its own).
func dictPairs(v *exec.Value) []*exec.Pair {
	switch d := v.Interface().(type) {
	case *exec.Dict:
		return d.Pairs
	case exec.Dict:
		return d.Pairs
	}
	var pairs []*exec.Pair
	for _, k := range v.Keys() {
		item, _ := v.GetItem(k.Interface())
		pairs = append(pairs, &exec.Pair{Key: k, Value: item})
	}
	return pairs
}

const hexDigits = "0123456789abcdef"

// encodeString writes s as a JSON string the way Python's json module does.
func (o *dumpOptions) encodeString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (o.ensureASCII && r > 0x7e):
				if r > 0xffff {
					r -= 0x10000
					writeU4(b, 0xd800+(r>>10))
					writeU4(b, 0xdc00+(r&0x3ff))
				} else {
					writeU4(b, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func writeU4(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexDigits[r>>12&0xf])
	b.WriteByte(hexDigits[r>>8&0xf])
	b.WriteByte(hexDigits[r>>4&0xf])
	b.WriteByte(hexDigits[r&0xf])
}

// pyFloatRepr is Python's repr(float): the shortest round-tripping digits, in positional
// notation for exponents -4 ≤ e < 16 (always with a fractional part) and scientific
// notation otherwise (at least two exponent digits).
func pyFloatRepr(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		switch {
		case math.IsNaN(f):
			return "nan"
		case f > 0:
			return "inf"
		}
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expText, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expText)
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

// pyTypeName names a value's type as Python would in an error message.
func pyTypeName(v *exec.Value) string {
	switch {
	case v == nil || v.IsNil():
		return "NoneType"
	case v.IsString():
		return "str"
	case v.IsBool():
		return "bool"
	case v.IsInteger():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	case v.IsCallable():
		return "function"
	}
	return reflect.Indirect(v.Val).Type().String()
}
