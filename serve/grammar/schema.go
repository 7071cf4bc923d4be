package grammar

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// FromJSONSchema compiles a JSON schema (the subset in docs/GRAMMAR.md) to
// the grammar of the JSON texts it accepts. Properties come in schema
// order; optional ones may be left out. A keyword outside the subset gives
// ErrUnsupported naming the keyword and its JSON pointer.
func FromJSONSchema(schema []byte) (*Grammar, error) {
	v, err := decodeOrdered(schema)
	if err != nil {
		return nil, err
	}
	b := newBuilder()
	root := b.rule("root")
	c := &schemaCompiler{b: b, j: newJSONRules(b), doc: v, refs: map[string]int{}}
	body, err := c.compile(v, "")
	if err != nil {
		return nil, err
	}
	b.define(root, body)
	return lower(b, root)
}

// FromResponseFormat compiles an OpenAI response_format object:
// {"type":"text"} gives nil (no constraint), {"type":"json_object"} any
// JSON object, {"type":"json_schema","json_schema":{"name":…,"schema":…,
// "strict":…}} the schema. The schema is enforced whether strict is set
// or not.
func FromResponseFormat(raw []byte) (*Grammar, error) {
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, fmt.Errorf("%w: response_format: %v", ErrSyntax, err)
	}
	switch rf.Type {
	case "text", "":
		return nil, nil
	case "json_object":
		return JSONObject(), nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, fmt.Errorf("%w: response_format json_schema without a schema", ErrInvalidSchema)
		}
		return FromJSONSchema(rf.JSONSchema.Schema)
	}
	return nil, fmt.Errorf("%w: response_format type %q", ErrUnsupported, rf.Type)
}

// keyword kinds: what a schema keyword constrains.
const (
	kwAnnotation = iota // ignored
	kwObject
	kwArray
	kwString
	kwNumber
	kwOther // type, enum, const, composition, $ref, $defs
)

var schemaKeywords = map[string]int{
	"title": kwAnnotation, "description": kwAnnotation, "$comment": kwAnnotation, "$schema": kwAnnotation,
	"$id": kwAnnotation, "default": kwAnnotation, "examples": kwAnnotation, "deprecated": kwAnnotation,
	"readOnly": kwAnnotation, "writeOnly": kwAnnotation,
	"$defs": kwAnnotation, "definitions": kwAnnotation,
	"properties": kwObject, "required": kwObject, "additionalProperties": kwObject,
	"items": kwArray, "prefixItems": kwArray, "minItems": kwArray, "maxItems": kwArray, "uniqueItems": kwArray,
	"minLength": kwString, "maxLength": kwString, "pattern": kwString, "format": kwString,
	"minimum": kwNumber, "maximum": kwNumber, "exclusiveMinimum": kwNumber, "exclusiveMaximum": kwNumber,
	"type": kwOther, "enum": kwOther, "const": kwOther, "anyOf": kwOther, "oneOf": kwOther, "allOf": kwOther,
	"$ref": kwOther,
}

type schemaCompiler struct {
	b     *builder
	j     *jsonRules
	doc   any
	refs  map[string]int // JSON pointer → rule
	depth int
}

func unsupported(ptr, kw, why string) error {
	if why != "" {
		why = " (" + why + ")"
	}
	return fmt.Errorf("%w: keyword %q at %q%s", ErrUnsupported, kw, ptr+"/"+escapePointer(kw), why)
}

func invalid(ptr, format string, args ...any) error {
	return fmt.Errorf("%w: at %q: %s", ErrInvalidSchema, ptr, fmt.Sprintf(format, args...))
}

// compile returns the node of the JSON texts schema s (at pointer ptr)
// accepts.
func (c *schemaCompiler) compile(s any, ptr string) (*node, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxNesting {
		return nil, invalid(ptr, "schema nested deeper than %d", maxNesting)
	}
	switch s := s.(type) {
	case bool:
		if s {
			return ref(c.j.value), nil
		}
		return never(), nil
	case *jobj:
		return c.compileObject(s, ptr)
	}
	return nil, invalid(ptr, "a schema must be an object or a boolean")
}

func (c *schemaCompiler) compileObject(s *jobj, ptr string) (*node, error) {
	kinds := map[int]bool{}
	for _, k := range s.keys {
		kind, ok := schemaKeywords[k]
		if !ok {
			return nil, unsupported(ptr, k, "")
		}
		kinds[kind] = true
	}
	constraining := func(except ...string) string {
		for _, k := range s.keys {
			if schemaKeywords[k] != kwAnnotation && !slices.Contains(except, k) {
				return k
			}
		}
		return ""
	}
	if r, ok := s.get("$ref"); ok {
		if k := constraining("$ref"); k != "" {
			return nil, unsupported(ptr, k, "beside $ref")
		}
		rs, _ := r.(string)
		return c.ref(rs, ptr)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if v, ok := s.get(kw); ok {
			if k := constraining(kw); k != "" {
				return nil, unsupported(ptr, k, "beside "+kw)
			}
			return c.anyOf(v, ptr+"/"+kw)
		}
	}
	if _, ok := s.get("allOf"); ok {
		merged, err := c.mergeAllOf(s, ptr)
		if err != nil {
			return nil, err
		}
		return c.compileObject(merged, ptr)
	}
	types, err := schemaTypes(s, ptr, kinds)
	if err != nil {
		return nil, err
	}
	if v, ok := s.get("const"); ok {
		return c.enum([]any{v}, types, ptr+"/const")
	}
	if v, ok := s.get("enum"); ok {
		vals, ok := v.([]any)
		if !ok {
			return nil, invalid(ptr+"/enum", "enum must be an array")
		}
		return c.enum(vals, types, ptr+"/enum")
	}
	if types == nil {
		return ref(c.j.value), nil
	}
	var alts []*node
	for _, t := range types {
		var n *node
		var err error
		switch t {
		case "object":
			n, err = c.object(s, ptr)
		case "array":
			n, err = c.array(s, ptr)
		case "string":
			n, err = c.str(s, ptr)
		case "integer":
			n, err = c.integer(s, ptr)
		case "number":
			n, err = c.number(s, ptr)
		case "boolean":
			n = alt(lit("true"), lit("false"))
		case "null":
			n = lit("null")
		default:
			return nil, invalid(ptr+"/type", "unknown type %q", t)
		}
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return alt(alts...), nil
}

// schemaTypes returns the types s allows: its "type", else the types its
// keywords imply, else nil (any value).
func schemaTypes(s *jobj, ptr string, kinds map[int]bool) ([]string, error) {
	if t, ok := s.get("type"); ok {
		switch t := t.(type) {
		case string:
			return []string{t}, nil
		case []any:
			var out []string
			for _, x := range t {
				xs, ok := x.(string)
				if !ok {
					return nil, invalid(ptr+"/type", "type entries must be strings")
				}
				out = append(out, xs)
			}
			if len(out) == 0 {
				return nil, invalid(ptr+"/type", "empty type list")
			}
			return out, nil
		}
		return nil, invalid(ptr+"/type", "type must be a string or an array")
	}
	var out []string
	if kinds[kwObject] {
		out = append(out, "object")
	}
	if kinds[kwArray] {
		out = append(out, "array")
	}
	if kinds[kwString] {
		out = append(out, "string")
	}
	if kinds[kwNumber] {
		out = append(out, "number")
	}
	return out, nil
}

// ref compiles a "$ref" to a pointer in the same document; each target is
// one rule, so recursive schemas work.
func (c *schemaCompiler) ref(r, ptr string) (*node, error) {
	if !strings.HasPrefix(r, "#") {
		return nil, unsupported(ptr, "$ref", "only references inside the document (#/…) are supported")
	}
	frag, err := url.PathUnescape(r[1:])
	if err != nil {
		return nil, invalid(ptr+"/$ref", "bad reference %q", r)
	}
	if id, ok := c.refs[frag]; ok {
		return ref(id), nil
	}
	target, err := resolvePointer(c.doc, frag)
	if err != nil {
		return nil, invalid(ptr+"/$ref", "%v", err)
	}
	id := c.b.rule("ref:" + frag)
	c.refs[frag] = id
	body, err := c.compile(target, frag)
	if err != nil {
		return nil, err
	}
	c.b.define(id, body)
	return ref(id), nil
}

// resolvePointer follows the JSON pointer p in doc.
func resolvePointer(doc any, p string) (any, error) {
	if p == "" {
		return doc, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("reference %q is not a JSON pointer", p)
	}
	cur := doc
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := cur.(type) {
		case *jobj:
			next, ok := v.get(tok)
			if !ok {
				return nil, fmt.Errorf("reference %q: no %q", p, tok)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil, fmt.Errorf("reference %q: no index %q", p, tok)
			}
			cur = v[i]
		default:
			return nil, fmt.Errorf("reference %q does not resolve", p)
		}
	}
	return cur, nil
}

func (c *schemaCompiler) anyOf(v any, ptr string) (*node, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, invalid(ptr, "must be a non-empty array")
	}
	var alts []*node
	for i, sub := range list {
		n, err := c.compile(sub, ptr+"/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	return alt(alts...), nil
}

// enum returns the alternatives of the JSON values vals (those whose type
// is among types, when types is set).
func (c *schemaCompiler) enum(vals []any, types []string, ptr string) (*node, error) {
	var alts []*node
	for _, v := range vals {
		if types != nil && !slices.ContainsFunc(types, func(t string) bool { return jsonTypeIs(v, t) }) {
			continue
		}
		var sb strings.Builder
		encodeCompact(&sb, v)
		alts = append(alts, lit(sb.String()))
	}
	if len(alts) == 0 {
		return nil, invalid(ptr, "no value allowed")
	}
	return alt(alts...), nil
}

// jsonTypeIs reports whether v (as decodeOrdered returns it) has JSON
// schema type t.
func jsonTypeIs(v any, t string) bool {
	switch v := v.(type) {
	case *jobj:
		return t == "object"
	case []any:
		return t == "array"
	case string:
		return t == "string"
	case bool:
		return t == "boolean"
	case nil:
		return t == "null"
	case json.Number:
		if t == "number" {
			return true
		}
		f, err := v.Float64()
		return t == "integer" && err == nil && f == float64(int64(f))
	}
	return false
}
