package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// jobj is a JSON object that keeps its keys in document order.
type jobj struct {
	keys []string
	vals map[string]any
}

func (o *jobj) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// decodeOrdered parses one JSON value: objects as *jobj, arrays as []any,
// numbers as json.Number, then string, bool, nil.
func decodeOrdered(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: schema JSON: %v", ErrSyntax, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: schema JSON: data after the value", ErrSyntax)
	}
	return v, nil
}

func decodeValue(d *json.Decoder, depth int) (any, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("nested deeper than %d", maxNesting)
	}
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &jobj{vals: map[string]any{}}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(d, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			_, err := d.Token()
			return o, err
		case '[':
			a := []any{}
			for d.More() {
				v, err := decodeValue(d, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// encodeCompact writes v (as decodeOrdered returns it) as compact JSON.
func encodeCompact(sb *strings.Builder, v any) {
	switch v := v.(type) {
	case *jobj:
		sb.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(quoteJSON(k))
			sb.WriteByte(':')
			encodeCompact(sb, v.vals[k])
		}
		sb.WriteByte('}')
	case []any:
		sb.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				sb.WriteByte(',')
			}
			encodeCompact(sb, x)
		}
		sb.WriteByte(']')
	case string:
		sb.WriteString(quoteJSON(v))
	case json.Number:
		sb.WriteString(string(v))
	case bool:
		if v {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case nil:
		sb.WriteString("null")
	default:
		panic(fmt.Sprintf("BUG: grammar: encodeCompact of %T", v))
	}
}

// quoteJSON returns s as a JSON string literal.
func quoteJSON(s string) string {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(s); err != nil {
		panic("BUG: grammar: encoding a string: " + err.Error())
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// escapePointer escapes one JSON-pointer token.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
