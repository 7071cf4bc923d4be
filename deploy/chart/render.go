// Package chart renders a Helm chart the way `helm template` does, for
// the subset of Helm that memra's chart (deploy/helm/memra) uses, so that
// `make test` can render and check it with no helm binary: Go's
// text/template over every file of templates/ (files starting with "_"
// only define named templates), .Values (values.yaml deep-merged with
// overrides), .Release and .Chart, the documents split at "---", and the
// functions below with Helm's and sprig's semantics. A template that calls
// any other function does not parse, so the chart cannot drift outside the
// subset unnoticed.
package chart

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

// ErrRender is a chart that does not render: a parse or execution error,
// or a required value left empty.
var ErrRender = errors.New("chart: render failed")

// Release describes the release being rendered (helm template NAME -n NAMESPACE).
type Release struct {
	Name      string
	Namespace string
}

// Document is one rendered object: its source template and its YAML.
type Document struct {
	Template string
	YAML     string
}

// Chart is a loaded chart.
type Chart struct {
	Dir      string
	Meta     map[string]any // Chart.yaml
	Defaults map[string]any // values.yaml
	files    map[string]string
}

// Load reads a chart folder: Chart.yaml, values.yaml and templates/.
func Load(dir string) (*Chart, error) {
	c := &Chart{Dir: dir, files: map[string]string{}}
	if err := readYAML(filepath.Join(dir, "Chart.yaml"), &c.Meta); err != nil {
		return nil, err
	}
	if err := readYAML(filepath.Join(dir, "values.yaml"), &c.Defaults); err != nil {
		return nil, err
	}
	tdir := filepath.Join(dir, "templates")
	err := filepath.WalkDir(tdir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := filepath.Ext(p)
		if ext != ".yaml" && ext != ".tpl" && ext != ".yml" {
			return nil // NOTES.txt and the like render no objects
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		c.files[filepath.ToSlash(filepath.Join(c.name(), rel))] = string(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRender, err)
	}
	return c, nil
}

func (c *Chart) name() string { s, _ := c.Meta["name"].(string); return s }

func readYAML(path string, out *map[string]any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRender, err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRender, path, err)
	}
	if *out == nil {
		*out = map[string]any{}
	}
	return nil
}

// ParseValues reads a values file's YAML (helm -f).
func ParseValues(data []byte) (map[string]any, error) {
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%w: values: %v", ErrRender, err)
	}
	return v, nil
}

// Merge returns base with over merged in, as Helm merges -f files:
// maps merge key by key, anything else in over replaces base's, and a
// null in over deletes the key.
func Merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = Merge(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

// Render renders every template with the chart's values merged with
// overrides and returns the documents in template-name order.
func (c *Chart) Render(rel Release, overrides map[string]any) ([]Document, error) {
	values := Merge(c.Defaults, overrides)
	meta := map[string]any{}
	for k, v := range c.Meta { // Helm exposes Chart.yaml's keys capitalised
		meta[strings.ToUpper(k[:1])+k[1:]] = v
	}
	top := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": rel.Name, "Namespace": rel.Namespace, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
		"Chart":   meta,
	}
	root := template.New("chart").Option("missingkey=zero")
	root.Funcs(funcs(root))
	names := make([]string, 0, len(c.files))
	for n := range c.files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if _, err := root.New(n).Parse(c.files[n]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRender, err)
		}
	}
	var docs []Document
	for _, n := range names {
		if strings.HasPrefix(filepath.Base(n), "_") {
			continue
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, n, top); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRender, err)
		}
		out := strings.ReplaceAll(buf.String(), "<no value>", "")
		for _, part := range splitDocs(out) {
			docs = append(docs, Document{Template: n, YAML: part})
		}
	}
	return docs, nil
}

// splitDocs cuts a rendered file at its "---" lines and drops documents
// with nothing but comments and blank lines.
func splitDocs(s string) []string {
	var out []string
	var cur []string
	flush := func() {
		for _, line := range cur {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				out = append(out, strings.TrimRight(strings.TrimLeft(strings.Join(cur, "\n"), "\n"), "\n ")+"\n")
				break
			}
		}
		cur = cur[:0]
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "---" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return out
}

// funcs are Helm's template functions that the chart may use.
func funcs(root *template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var buf bytes.Buffer
			err := root.ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		"required": func(msg string, v any) (any, error) {
			if empty(v) {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"fail":    func(msg string) (string, error) { return "", errors.New(msg) },
		"toYaml":  toYAML,
		"indent":  indent,
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"default": func(def any, given ...any) any {
			if len(given) == 0 || empty(given[0]) {
				return def
			}
			return given[0]
		},
		"empty":    empty,
		"quote":    func(v ...any) string { return joinMap(v, strconv.Quote) },
		"squote":   func(v ...any) string { return joinMap(v, func(s string) string { return "'" + s + "'" }) },
		"toString": toString,
		"int":      toInt,
		"add":      func(a ...any) int { return fold(a, func(x, y int) int { return x + y }) },
		"mul":      func(a ...any) int { return fold(a, func(x, y int) int { return x * y }) },
		"div": func(a, b any) (int, error) {
			if toInt(b) == 0 {
				return 0, errors.New("div: by zero")
			}
			return toInt(a) / toInt(b), nil
		},
		"trunc":      func(n int, s string) string { return s[:min(n, len(s))] },
		"trimSuffix": func(suf, s string) string { return strings.TrimSuffix(s, suf) },
		"lower":      strings.ToLower,
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"contains":   func(sub, s string) bool { return strings.Contains(s, sub) },
		"hasPrefix":  func(pre, s string) bool { return strings.HasPrefix(s, pre) },
		"join": func(sep string, v any) string {
			var parts []string
			for _, x := range toList(v) {
				parts = append(parts, toString(x))
			}
			return strings.Join(parts, sep)
		},
		"b64enc": func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"hasKey": func(m map[string]any, k string) bool { _, ok := m[k]; return ok },
		"list":   func(v ...any) []any { return v },
		"dict": func(kv ...any) (map[string]any, error) {
			if len(kv)%2 != 0 {
				return nil, errors.New("dict: odd number of arguments")
			}
			m := map[string]any{}
			for i := 0; i < len(kv); i += 2 {
				m[toString(kv[i])] = kv[i+1]
			}
			return m, nil
		},
	}
}

// empty is sprig's: nil, false, 0, "" and empty collections.
func empty(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return r.Len() == 0
	case reflect.Bool:
		return !r.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return r.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return r.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return r.Float() == 0
	case reflect.Pointer, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// toYAML is Helm's toYaml: the value as YAML without the final newline.
func toYAML(v any) (string, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// indent prefixes every line of s with n spaces.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

func toString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case float64:
		return int(x)
	case string:
		n, _ := strconv.Atoi(x)
		return n
	case bool:
		if x {
			return 1
		}
	}
	return 0
}

func fold(a []any, f func(x, y int) int) int {
	if len(a) == 0 {
		return 0
	}
	acc := toInt(a[0])
	for _, x := range a[1:] {
		acc = f(acc, toInt(x))
	}
	return acc
}

func toList(v any) []any {
	r := reflect.ValueOf(v)
	if r.Kind() != reflect.Slice && r.Kind() != reflect.Array {
		return []any{v}
	}
	out := make([]any, r.Len())
	for i := range out {
		out[i] = r.Index(i).Interface()
	}
	return out
}

func joinMap(v []any, f func(string) string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = f(toString(x))
	}
	return strings.Join(parts, " ")
}
