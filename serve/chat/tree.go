package chat

import (
	"reflect"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// rewriteTree replaces, in a parsed template, the operations whose gonja semantics differ
// from Python's by calls of filters that have Python's semantics:
//
//	x[key]  → x|memra.getitem(key)   (negative indices, character indexing, undefined on miss)
//	a + b   → a|memra.add(b)         (TypeError for str + list, str + None, …)
//	a in b  → a|memra.in(b)          (TypeError for "x" in None); also "a not in b"
//	{{ v }} → {{ v|memra.str }}      (None prints "None", lists and dicts their repr)
//
// The filters are evaluated exactly where the operations were, with the same operands, so
// precedence and evaluation order are unchanged. The tree is walked by reflection because
// gonja keeps the operands of some control structures ({% set %}, {% with %}, …) in
// unexported fields; those fields are reached through unsafe pointers. Each node is
// rewritten once even when it is shared (a method call keeps its receiver twice).
func rewriteTree(root *nodes.Template) {
	w := &treeRewriter{seen: map[uintptr]bool{}, replaced: map[uintptr]nodes.Expression{}}
	w.visitPtr(reflect.ValueOf(root))
}

type treeRewriter struct {
	seen     map[uintptr]bool
	replaced map[uintptr]nodes.Expression
}

var typeToken = reflect.TypeFor[*tokens.Token]()

// visit walks v, which is settable, and replaces node values in it.
func (w *treeRewriter) visit(v reflect.Value) {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return
		}
		elem := v.Elem()
		if elem.Kind() == reflect.Pointer && !elem.IsNil() {
			if r, ok := w.replaced[elem.Pointer()]; ok {
				if reflect.TypeOf(r).AssignableTo(v.Type()) {
					v.Set(reflect.ValueOf(r))
				}
				return
			}
		}
		w.visitPtr(elem)
		n, ok := elem.Interface().(nodes.Node)
		if !ok || elem.Kind() != reflect.Pointer {
			return
		}
		if out, ok := n.(*nodes.Output); ok {
			wrapOutput(out)
		}
		if r := replacement(n); r != nil && reflect.TypeOf(r).AssignableTo(v.Type()) {
			w.replaced[elem.Pointer()] = r
			v.Set(reflect.ValueOf(r))
		}
	case reflect.Pointer:
		w.visitPtr(v)
	case reflect.Slice:
		for i := range v.Len() {
			w.visit(v.Index(i))
		}
	case reflect.Map:
		iter := v.MapRange()
		type kv struct{ k, v reflect.Value }
		var updates []kv
		for iter.Next() {
			val := reflect.New(v.Type().Elem()).Elem()
			val.Set(iter.Value())
			w.visit(val)
			updates = append(updates, kv{iter.Key(), val})
		}
		for _, u := range updates {
			v.SetMapIndex(u.k, u.v)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if !f.CanSet() {
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			w.visit(f)
		}
	}
}

// visitPtr walks the struct p points to, once.
func (w *treeRewriter) visitPtr(p reflect.Value) {
	if p.Kind() != reflect.Pointer || p.IsNil() || p.Type() == typeToken {
		return
	}
	if w.seen[p.Pointer()] {
		return
	}
	w.seen[p.Pointer()] = true
	if p.Elem().Kind() == reflect.Struct {
		w.visit(p.Elem())
	}
}

// wrapOutput makes {{ … }} print its value as Python's str() does.
func wrapOutput(out *nodes.Output) {
	wrap := func(e nodes.Expression) nodes.Expression {
		if e == nil {
			return nil
		}
		return &nodes.FilteredExpression{
			Expression: e,
			Filters:    []*nodes.FilterCall{{Token: out.Start, Name: filterNameStr, Kwargs: map[string]nodes.Expression{}}},
		}
	}
	out.Expression = wrap(out.Expression)
	out.Alternative = wrap(out.Alternative)
}

// replacement returns the filter expression that replaces n, or nil to keep n.
func replacement(n nodes.Node) nodes.Expression {
	call := func(tok *tokens.Token, name string, in nodes.Expression, arg nodes.Expression) nodes.Expression {
		return &nodes.FilteredExpression{
			Expression: in,
			Filters: []*nodes.FilterCall{{
				Token: tok, Name: name, Args: []nodes.Expression{arg}, Kwargs: map[string]nodes.Expression{},
			}},
		}
	}
	switch n := n.(type) {
	case *nodes.GetItem:
		if n.Node == nil || n.Arg == nil {
			return nil
		}
		return call(n.Location, filterNameGetItem, n.Node, n.Arg)
	case *nodes.BinaryExpression:
		if n.Operator == nil || n.Operator.Token == nil || n.Left == nil || n.Right == nil {
			return nil
		}
		switch n.Operator.Token.Type {
		case tokens.Addition:
			return call(n.Operator.Token, filterNameAdd, n.Left, n.Right)
		case tokens.In:
			return call(n.Operator.Token, filterNameIn, n.Left, n.Right)
		}
	case *nodes.TestExpression:
		if n.Test != nil && n.Test.Name == "in" && len(n.Test.Args) == 1 && len(n.Test.Kwargs) == 0 && n.Expression != nil {
			return call(n.Test.Token, filterNameIn, n.Expression, n.Test.Args[0])
		}
	}
	return nil
}
