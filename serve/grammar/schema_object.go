package grammar

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// object compiles the object keywords of s: properties in schema order,
// required ones always present, optional ones possibly left out; extra
// properties only when additionalProperties is true or a schema.
func (c *schemaCompiler) object(s *jobj, ptr string) (*node, error) {
	type prop struct {
		name     string
		value    *node
		required bool
	}
	var props []prop
	index := map[string]int{}
	if pv, ok := s.get("properties"); ok {
		po, ok := pv.(*jobj)
		if !ok {
			return nil, invalid(ptr+"/properties", "must be an object")
		}
		for _, k := range po.keys {
			n, err := c.compile(po.vals[k], ptr+"/properties/"+escapePointer(k))
			if err != nil {
				return nil, err
			}
			index[k] = len(props)
			props = append(props, prop{name: k, value: n})
		}
	}
	var extra *node // schema of additional properties; nil: none allowed
	extraAllowed := false
	if av, ok := s.get("additionalProperties"); ok {
		switch av := av.(type) {
		case bool:
			if av {
				extra, extraAllowed = ref(c.j.value), true
			}
		default:
			n, err := c.compile(av, ptr+"/additionalProperties")
			if err != nil {
				return nil, err
			}
			extra, extraAllowed = n, true
		}
	}
	if rv, ok := s.get("required"); ok {
		list, ok := rv.([]any)
		if !ok {
			return nil, invalid(ptr+"/required", "must be an array of strings")
		}
		for _, r := range list {
			name, ok := r.(string)
			if !ok {
				return nil, invalid(ptr+"/required", "must be an array of strings")
			}
			i, known := index[name]
			if !known {
				_, explicitFalse := s.get("additionalProperties")
				if explicitFalse && !extraAllowed {
					return nil, invalid(ptr+"/required", "required property %q is not allowed", name)
				}
				v := extra
				if v == nil {
					v = ref(c.j.value)
				}
				i = len(props)
				index[name] = i
				props = append(props, prop{name: name, value: v})
			}
			props[i].required = true
		}
	}
	ws := ref(c.j.ws)
	kv := func(key, value *node) *node {
		return seq(key, ws, lit(":"), ws, value, ws)
	}
	// rest[i]: properties i… after something was written (each with a
	// leading comma); first[i]: properties i… when nothing was written yet.
	n := len(props)
	rest := make([]*node, n+1)
	first := make([]*node, n+1)
	if extraAllowed {
		names := make([]string, len(props))
		for i, p := range props {
			names[i] = p.name
		}
		key, err := c.keyNotIn(names, ptr)
		if err != nil {
			return nil, err
		}
		extraKV := kv(key, extra)
		rest[n] = ref(c.b.fresh("extra", star(seq(lit(","), ws, extraKV))))
		first[n] = opt(seq(extraKV, rest[n]))
	} else {
		rest[n], first[n] = empty(), empty()
	}
	for i := n - 1; i >= 0; i-- {
		p := props[i]
		item := kv(lit(quoteJSON(p.name)), p.value)
		if p.required {
			rest[i] = ref(c.b.fresh("props", seq(lit(","), ws, item, rest[i+1])))
			first[i] = seq(item, rest[i+1])
		} else {
			rest[i] = ref(c.b.fresh("props", seq(opt(seq(lit(","), ws, item)), rest[i+1])))
			first[i] = ref(c.b.fresh("props", alt(seq(item, rest[i+1]), first[i+1])))
		}
	}
	return seq(lit("{"), ws, first[0], lit("}")), nil
}

// keyNotIn returns the node of a JSON string key that is none of names
// (compared as written, without decoding escapes).
func (c *schemaCompiler) keyNotIn(names []string, ptr string) (*node, error) {
	type trie struct {
		kids     map[rune]*trie
		order    []rune
		terminal bool
	}
	root := &trie{kids: map[rune]*trie{}}
	for _, name := range names {
		q := quoteJSON(name)
		body := q[1 : len(q)-1]
		if strings.ContainsAny(body, `\"`) {
			return nil, unsupported(ptr, "additionalProperties", "beside a property name that needs escapes")
		}
		t := root
		for _, r := range body {
			k := t.kids[r]
			if k == nil {
				k = &trie{kids: map[rune]*trie{}}
				t.kids[r] = k
				t.order = append(t.order, r)
			}
			t = k
		}
		t.terminal = true
	}
	tail := c.b.fresh("keytail", seq(star(ref(c.j.char)), lit(`"`)))
	var build func(t *trie) *node
	build = func(t *trie) *node {
		var alts []*node
		if !t.terminal {
			alts = append(alts, lit(`"`))
		}
		exclude := []cpRange{one('"'), one('\\'), rng(0, 0x1F), one(0x7F)}
		for _, r := range t.order {
			exclude = append(exclude, one(r))
			alts = append(alts, seq(&node{kind: nLit, lit: utf8.AppendRune(nil, r)}, build(t.kids[r])))
		}
		other := alt(class(true, exclude...), seq(lit(`\`), alt(class(false, one('"'), one('\\'), one('/'), one('b'), one('f'), one('n'), one('r'), one('t')),
			seq(lit("u"), rep(hexDigit(), 4, 4)))))
		alts = append(alts, seq(other, ref(tail)))
		return ref(c.b.fresh("key", alt(alts...)))
	}
	return seq(lit(`"`), build(root)), nil
}

// array compiles items, prefixItems, minItems and maxItems.
func (c *schemaCompiler) array(s *jobj, ptr string) (*node, error) {
	if u, ok := s.get("uniqueItems"); ok && u != false {
		return nil, unsupported(ptr, "uniqueItems", "only false is supported")
	}
	minItems, err := countKeyword(s, "minItems", ptr, 0)
	if err != nil {
		return nil, err
	}
	maxItems, err := countKeyword(s, "maxItems", ptr, -1)
	if err != nil {
		return nil, err
	}
	var prefix []*node
	if pv, ok := s.get("prefixItems"); ok {
		list, ok := pv.([]any)
		if !ok {
			return nil, invalid(ptr+"/prefixItems", "must be an array")
		}
		for i, sub := range list {
			n, err := c.compile(sub, ptr+"/prefixItems/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			prefix = append(prefix, n)
		}
	}
	item := ref(c.j.value)
	if iv, ok := s.get("items"); ok {
		if item, err = c.compile(iv, ptr+"/items"); err != nil {
			return nil, err
		}
		if iv == false && (maxItems < 0 || maxItems > len(prefix)) {
			maxItems = len(prefix)
		}
	}
	if maxItems >= 0 && minItems > maxItems {
		return nil, invalid(ptr, "minItems above maxItems")
	}
	if minItems > maxRepeat || maxItems > maxRepeat {
		return nil, unsupported(ptr, "maxItems", "counts above "+strconv.Itoa(maxRepeat))
	}
	ws := ref(c.j.ws)
	// after(i): the items from position i on, each after a comma.
	var after func(i int) *node
	after = func(i int) *node {
		if maxItems >= 0 && i >= maxItems {
			return empty()
		}
		if i >= len(prefix) {
			lo := max(minItems-i, 0)
			hi := -1
			if maxItems >= 0 {
				hi = maxItems - i
			}
			return rep(seq(lit(","), ws, item, ws), lo, hi)
		}
		n := seq(lit(","), ws, prefix[i], ws, after(i+1))
		if i >= minItems {
			return opt(n)
		}
		return n
	}
	itemAt := func(i int) *node {
		if i < len(prefix) {
			return prefix[i]
		}
		return item
	}
	if maxItems == 0 {
		return seq(lit("["), ws, lit("]")), nil
	}
	body := seq(itemAt(0), ws, after(1))
	if minItems == 0 {
		body = opt(body)
	}
	return seq(lit("["), ws, body, lit("]")), nil
}

// countKeyword reads a non-negative integer keyword, def when absent.
func countKeyword(s *jobj, kw, ptr string, def int) (int, error) {
	v, ok := s.get(kw)
	if !ok {
		return def, nil
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, invalid(ptr+"/"+kw, "must be a non-negative integer")
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || n < 0 {
		return 0, invalid(ptr+"/"+kw, "must be a non-negative integer")
	}
	if n > maxRepeat {
		return 0, unsupported(ptr, kw, "counts above "+strconv.Itoa(maxRepeat))
	}
	return int(n), nil
}

// mergeAllOf folds allOf (whose parts are object schemas, possibly behind
// $ref) and the keywords beside it into one object schema.
func (c *schemaCompiler) mergeAllOf(s *jobj, ptr string) (*jobj, error) {
	list, ok := s.vals["allOf"].([]any)
	if !ok || len(list) == 0 {
		return nil, invalid(ptr+"/allOf", "must be a non-empty array")
	}
	parts := []*jobj{{vals: map[string]any{}}}
	for _, k := range s.keys {
		if k != "allOf" {
			parts[0].keys = append(parts[0].keys, k)
			parts[0].vals[k] = s.vals[k]
		}
	}
	for i, sub := range list {
		seen := 0
		for {
			o, ok := sub.(*jobj)
			if !ok {
				return nil, unsupported(ptr, "allOf", "parts must be object schemas")
			}
			r, isRef := o.get("$ref")
			if !isRef {
				break
			}
			rs, _ := r.(string)
			if !strings.HasPrefix(rs, "#") || seen > 16 {
				return nil, unsupported(ptr+"/allOf/"+strconv.Itoa(i), "$ref", "in allOf")
			}
			seen++
			t, err := resolvePointer(c.doc, rs[1:])
			if err != nil {
				return nil, invalid(ptr+"/allOf", "%v", err)
			}
			sub = t
		}
		parts = append(parts, sub.(*jobj))
	}
	merged := &jobj{vals: map[string]any{}}
	props := &jobj{vals: map[string]any{}}
	var required []any
	explicitTrue, anyFalse := false, false
	for pi, p := range parts {
		for _, k := range p.keys {
			switch kind := schemaKeywords[k]; {
			case k == "type":
				if p.vals[k] != "object" {
					return nil, unsupported(ptr, "allOf", "parts must be object schemas")
				}
			case k == "properties":
				po, ok := p.vals[k].(*jobj)
				if !ok {
					return nil, invalid(ptr, "properties must be an object")
				}
				for _, name := range po.keys {
					if old, dup := props.vals[name]; dup {
						var a, b strings.Builder
						encodeCompact(&a, old)
						encodeCompact(&b, po.vals[name])
						if a.String() != b.String() {
							return nil, unsupported(ptr, "allOf", "property "+quoteJSON(name)+" defined differently in two parts")
						}
						continue
					}
					props.keys = append(props.keys, name)
					props.vals[name] = po.vals[name]
				}
			case k == "required":
				list, _ := p.vals[k].([]any)
				required = append(required, list...)
			case k == "additionalProperties":
				switch p.vals[k] {
				case true:
					explicitTrue = true
				case false:
					anyFalse = true
				default:
					return nil, unsupported(ptr, "allOf", "additionalProperties schema in a part")
				}
			case kind == kwAnnotation:
			default:
				if pi == 0 {
					return nil, unsupported(ptr, k, "beside allOf")
				}
				return nil, unsupported(ptr+"/allOf/"+strconv.Itoa(pi-1), k, "in allOf")
			}
		}
	}
	// A part with additionalProperties false forbids what it does not list.
	for _, p := range parts {
		if p.vals["additionalProperties"] != false {
			continue
		}
		own, _ := p.vals["properties"].(*jobj)
		props.keys = slices.DeleteFunc(props.keys, func(k string) bool {
			if own != nil {
				if _, ok := own.vals[k]; ok {
					return false
				}
			}
			delete(props.vals, k)
			return true
		})
	}
	merged.keys = []string{"type", "properties", "required"}
	merged.vals["type"] = "object"
	merged.vals["properties"] = props
	merged.vals["required"] = required
	if anyFalse || explicitTrue {
		merged.keys = append(merged.keys, "additionalProperties")
		merged.vals["additionalProperties"] = !anyFalse
	}
	for _, r := range required {
		name, _ := r.(string)
		if _, ok := props.vals[name]; !ok && anyFalse {
			return nil, invalid(ptr+"/allOf", "required property %q is not allowed", name)
		}
	}
	return merged, nil
}
