package chat

import (
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// noneMarker types the value JSON null decodes to. A typed nil pointer is None to gonja
// (Value.IsNil reports true, so it prints "", is falsy and "is none"), while this package can
// still tell it from an undefined name or key, which is a plain nil: Python's jinja2 treats
// them differently ("x" in None raises, "x" in undefined is False; None "is defined").
type noneMarker struct{}

// pyNone is the value of JSON null in a render context.
var pyNone = (*noneMarker)(nil)

// isPyNone reports whether v is a JSON null from the context.
func isPyNone(v *exec.Value) bool {
	if v == nil || !v.Val.IsValid() {
		return false
	}
	_, ok := v.Val.Interface().(*noneMarker)
	return ok
}

// typeErr builds the error value of a Python TypeError.
func typeErr(format string, args ...any) *exec.Value {
	return exec.AsValue(fmt.Errorf("%w: %s", ErrType, fmt.Sprintf(format, args...)))
}

// pyNumber reports whether v is a Python number (bool counts, as in Python) and returns it
// as an int or a float.
func pyNumber(v *exec.Value) (i int, f float64, isFloat, ok bool) {
	switch {
	case v.IsBool():
		if v.Bool() {
			return 1, 1, false, true
		}
		return 0, 0, false, true
	case v.IsInteger():
		return v.Integer(), float64(v.Integer()), false, true
	case v.IsFloat():
		return 0, v.Float(), true, true
	}
	return 0, 0, false, false
}

// filterAdd is Python's a + b: numbers add, str + str and list + list concatenate, anything
// else is a TypeError. The tree rewrite turns every "a + b" into "a|memra.add(b)".
func filterAdd(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	right := params.First()
	if right.IsError() {
		return right
	}
	li, lf, lfloat, lok := pyNumber(in)
	ri, rf, rfloat, rok := pyNumber(right)
	switch {
	case lok && rok:
		if lfloat || rfloat {
			return exec.AsValue(lf + rf)
		}
		return exec.AsValue(li + ri)
	case in.IsString() && right.IsString():
		return &exec.Value{Val: exec.AsValue(in.String() + right.String()).Val, Safe: in.Safe && right.Safe}
	case in.IsList() && right.IsList():
		out := make([]any, 0, in.Len()+right.Len())
		for i := range in.Len() {
			out = append(out, listItem(in, i).Interface())
		}
		for i := range right.Len() {
			out = append(out, listItem(right, i).Interface())
		}
		return exec.AsValue(out)
	case in.IsString(), in.IsList():
		return typeErr(`can only concatenate %s (not "%s") to %s`, pyTypeName(in), pyTypeName(right), pyTypeName(in))
	}
	return typeErr("unsupported operand type(s) for +: '%s' and '%s'", pyTypeName(in), pyTypeName(right))
}

// filterIn is Python's "a in b": substring for str, element for list, key for dict; an
// undefined container gives False (jinja2's Undefined iterates as empty), None or a number a
// TypeError. The tree rewrite turns every "a in b" into "a|memra.in(b)".
func filterIn(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	container := params.First()
	switch {
	case container.IsError():
		return container
	case container.IsString():
		if !in.IsString() {
			return typeErr("'in <string>' requires string as left operand, not %s", pyTypeName(in))
		}
		return exec.AsValue(strings.Contains(container.String(), in.String()))
	case container.IsList():
		for i := range container.Len() {
			if in.EqualValueTo(listItem(container, i)) {
				return exec.AsValue(true)
			}
		}
		return exec.AsValue(false)
	case container.IsDict():
		for _, p := range dictPairs(container) {
			if in.EqualValueTo(p.Key) {
				return exec.AsValue(true)
			}
		}
		return exec.AsValue(false)
	case container.IsNil() && !isPyNone(container):
		return exec.AsValue(false)
	}
	return typeErr("argument of type '%s' is not iterable", pyTypeName(container))
}

// filterGetItem is jinja2's subscript x[key] with Python indexing: negative indices count
// from the end, strings index by character, a missing item is undefined (None), and a string
// key falls back to the attribute. The tree rewrite turns every "x[key]" into
// "x|memra.getitem(key)".
func filterGetItem(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	key := params.First()
	if key.IsError() {
		return key
	}
	if in.IsNil() {
		return exec.AsValue(nil)
	}
	if key.IsInteger() {
		i := key.Integer()
		switch {
		case in.IsList():
			n := in.Len()
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return exec.AsValue(nil)
			}
			return listItem(in, i)
		case in.IsString():
			runes := []rune(in.String())
			if i < 0 {
				i += len(runes)
			}
			if i < 0 || i >= len(runes) {
				return exec.AsValue(nil)
			}
			return exec.AsValue(string(runes[i]))
		}
	}
	if in.IsDict() {
		for _, p := range dictPairs(in) {
			if p.Key.EqualValueTo(key) {
				return p.Value
			}
		}
	}
	if key.IsString() {
		name := key.String()
		if !in.IsDict() {
			if item, found := in.GetItem(name); found {
				return item
			}
		}
		if attr, found := in.GetAttribute(name); found && !attr.IsError() {
			return attr
		}
	}
	return exec.AsValue(nil)
}

// filterItems is jinja2's |items: the (key, value) pairs of a mapping in its order.
func filterItems(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if in.IsNil() && !isPyNone(in) {
		return exec.AsValue([]any{})
	}
	if !in.IsDict() {
		return typeErr("Can only get item pairs from a mapping.")
	}
	return exec.AsValue(itemList(in))
}

func itemList(in *exec.Value) []any {
	pairs := dictPairs(in)
	out := make([]any, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, []any{p.Key.Interface(), p.Value.Interface()})
	}
	return out
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False); arguments by position or keyword in that order.
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	args := map[string]*exec.Value{}
	if len(params.Args) > len(names) {
		return typeErr("tojson() takes at most %d arguments", len(names))
	}
	for i, a := range params.Args {
		args[names[i]] = a
	}
	for k, v := range params.KwArgs {
		if !containsString(names, k) {
			return typeErr("tojson() got an unexpected keyword argument '%s'", k)
		}
		args[k] = v
	}
	o := dumpOptions{itemSep: ", ", keySep: ": "}
	if v, ok := args["ensure_ascii"]; ok {
		o.ensureASCII = v.IsTrue()
	}
	if v, ok := args["sort_keys"]; ok {
		o.sortKeys = v.IsTrue()
	}
	if v, ok := args["indent"]; ok && !v.IsNil() {
		switch {
		case v.IsString():
			o.indent = v.String()
		case v.IsInteger():
			o.indent = strings.Repeat(" ", max(v.Integer(), 0))
		default:
			return typeErr("indent must be an int or a str, not %s", pyTypeName(v))
		}
		o.hasIndent, o.itemSep = true, ","
	}
	if v, ok := args["separators"]; ok && !v.IsNil() {
		if !v.IsList() || v.Len() != 2 || !listItem(v, 0).IsString() || !listItem(v, 1).IsString() {
			return typeErr("separators must be a pair of strings")
		}
		o.itemSep, o.keySep = listItem(v, 0).String(), listItem(v, 1).String()
	}
	out, err := pyDumps(in, o)
	if err != nil {
		return exec.AsValue(err)
	}
	return exec.AsValue(out)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Tests whose gonja versions differ from jinja2's.

func testDefined(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return !in.IsError() && (!in.IsNil() || isPyNone(in)), nil
}

func testUndefined(c *exec.Context, in *exec.Value, p *exec.VarArgs) (bool, error) {
	d, err := testDefined(c, in, p)
	return !d, err
}

func testTrue(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && in.Bool(), nil
}

func testFalse(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && !in.Bool(), nil
}
