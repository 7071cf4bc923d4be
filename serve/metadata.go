package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
)

// ErrMetadata: the model metadata file is unreadable, malformed, or names
// something the server does not know; the error gives the file and line.
var ErrMetadata = errors.New("serve: bad model metadata")

// Metadata is a model metadata file (--model-metadata): prices, modalities,
// display names and limits per served model, and the provider serving
// them. /v1/models renders it; usage can carry the cost computed from the
// same prices (Config.UsageCost).
type Metadata struct {
	Path     string
	Currency string // ISO 4217 code of the prices; default USD
	Provider *Provider
	Models   map[string]*ModelMeta // by served alias
}

// Provider describes who serves the models.
type Provider struct {
	Name      string            `json:"name,omitempty"`
	StatusURL string            `json:"status_url,omitempty"`
	Contacts  map[string]string `json:"contacts,omitempty"` // role ("support", "security", …) → an email address or a URL
	Regions   []string          `json:"regions,omitempty"`
}

// ModelMeta is one model's entry.
type ModelMeta struct {
	DisplayName      string
	Pricing          *Pricing
	InputModalities  []string
	OutputModalities []string
	ContextLength    int // 0: the engine's
	MaxOutputTokens  int // 0: not stated
	line             int // of the entry's key, for errors found later
}

// Pricing is a model's price per token, by kind of token, as exact
// decimals; a kind the file leaves out has no price.
type Pricing struct {
	Input, Output, CacheRead, CacheWrite *decimal
}

// modalities a model may name.
var modalities = []string{"text", "image", "audio", "video", "file", "embedding"}

// LoadMetadata reads and checks a metadata file. Unknown keys, values of
// the wrong type, malformed prices and unknown modalities are errors
// naming the file and the line.
func LoadMetadata(path string) (*Metadata, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMetadata, err)
	}
	return ParseMetadata(path, data)
}

// ParseMetadata is LoadMetadata of data read from path.
func ParseMetadata(path string, data []byte) (*Metadata, error) {
	root, err := parseLines(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s:%v", ErrMetadata, path, err)
	}
	md := &Metadata{Path: path, Currency: "USD", Models: map[string]*ModelMeta{}}
	fail := func(n *jnode, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrMetadata, path, n.line, fmt.Sprintf(format, args...))
	}
	if err := root.object(fail, "the file", func(key string, v *jnode) error {
		switch key {
		case "currency":
			s, err := v.text(fail, key)
			if err != nil {
				return err
			}
			if len(s) != 3 || strings.ToUpper(s) != s {
				return fail(v, "currency %q is not a three-letter ISO 4217 code such as USD", s)
			}
			md.Currency = s
		case "provider":
			p, err := parseProvider(v, fail)
			md.Provider = p
			return err
		case "models":
			return v.object(fail, key, func(alias string, e *jnode) error {
				mm, err := parseModelMeta(e, fail)
				if err == nil {
					mm.line = e.line
					md.Models[alias] = mm
				}
				return err
			})
		default:
			return fail(v, "unknown key %q (want currency, provider, models)", key)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return md, nil
}

type failFunc func(n *jnode, format string, args ...any) error

func parseProvider(n *jnode, fail failFunc) (*Provider, error) {
	p := &Provider{}
	err := n.object(fail, "provider", func(key string, v *jnode) error {
		var err error
		switch key {
		case "name":
			p.Name, err = v.text(fail, key)
		case "status_url":
			if p.StatusURL, err = v.text(fail, key); err == nil {
				if u, perr := url.Parse(p.StatusURL); perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
					return fail(v, "status_url %q is not an http(s) URL", p.StatusURL)
				}
			}
		case "contacts":
			p.Contacts = map[string]string{}
			err = v.object(fail, key, func(role string, c *jnode) error {
				s, err := c.text(fail, "contacts."+role)
				p.Contacts[role] = s
				return err
			})
		case "regions":
			p.Regions, err = v.texts(fail, key)
		default:
			return fail(v, "unknown provider key %q (want name, status_url, contacts, regions)", key)
		}
		return err
	})
	return p, err
}

func parseModelMeta(n *jnode, fail failFunc) (*ModelMeta, error) {
	m := &ModelMeta{}
	err := n.object(fail, "a model", func(key string, v *jnode) error {
		var err error
		switch key {
		case "display_name":
			m.DisplayName, err = v.text(fail, key)
		case "pricing":
			m.Pricing, err = parsePricing(v, fail)
		case "input_modalities", "output_modalities":
			var list []string
			if list, err = v.texts(fail, key); err == nil {
				for _, x := range list {
					if !slices.Contains(modalities, x) {
						return fail(v, "%s: unknown modality %q (want %s)", key, x, strings.Join(modalities, ", "))
					}
				}
			}
			if key == "input_modalities" {
				m.InputModalities = list
			} else {
				m.OutputModalities = list
			}
		case "context_length":
			m.ContextLength, err = v.count(fail, key)
		case "max_output_tokens":
			m.MaxOutputTokens, err = v.count(fail, key)
		default:
			return fail(v, "unknown model key %q (want display_name, pricing, input_modalities, output_modalities, context_length, max_output_tokens)", key)
		}
		return err
	})
	return m, err
}

func parsePricing(n *jnode, fail failFunc) (*Pricing, error) {
	p := &Pricing{}
	err := n.object(fail, "pricing", func(key string, v *jnode) error {
		dst := map[string]**decimal{"input": &p.Input, "output": &p.Output, "cache_read": &p.CacheRead, "cache_write": &p.CacheWrite}[key]
		if dst == nil {
			return fail(v, "unknown price %q (want input, output, cache_read, cache_write: prices per token)", key)
		}
		if v.kind != 's' {
			return fail(v, "pricing.%s must be a string holding a decimal price per token (\"0.0000001\"), not JSON %s", key, v.kindName())
		}
		d, err := parseDecimal(v.str)
		if err != nil {
			return fail(v, "pricing.%s: %v", key, err)
		}
		*dst = &d
		return nil
	})
	return p, err
}

// jnode is a JSON value with the line it starts on.
type jnode struct {
	line  int
	kind  byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' boolean, 'z' null
	str   string
	keys  []string
	vals  []*jnode
	items []*jnode
}

func (n *jnode) kindName() string {
	return map[byte]string{'o': "object", 'a': "array", 's': "string", 'n': "number", 'b': "boolean", 'z': "null"}[n.kind]
}

// object calls f for each member of an object node, in order.
func (n *jnode) object(fail failFunc, what string, f func(key string, v *jnode) error) error {
	if n.kind != 'o' {
		return fail(n, "%s must be an object, not JSON %s", what, n.kindName())
	}
	for i, k := range n.keys {
		if err := f(k, n.vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (n *jnode) text(fail failFunc, what string) (string, error) {
	if n.kind != 's' {
		return "", fail(n, "%s must be a string, not JSON %s", what, n.kindName())
	}
	return n.str, nil
}

func (n *jnode) texts(fail failFunc, what string) ([]string, error) {
	if n.kind != 'a' {
		return nil, fail(n, "%s must be an array of strings, not JSON %s", what, n.kindName())
	}
	var out []string
	for _, it := range n.items {
		s, err := it.text(fail, what+" entries")
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// count reads a positive integer.
func (n *jnode) count(fail failFunc, what string) (int, error) {
	var v int64
	if n.kind == 'n' {
		if _, err := fmt.Sscan(n.str, &v); err != nil || fmt.Sprint(v) != n.str {
			v = 0
		}
	}
	if v < 1 || v > 1<<31 {
		if n.kind == 'n' {
			return 0, fail(n, "%s must be a positive integer, not %s", what, n.str)
		}
		return 0, fail(n, "%s must be a positive integer, not JSON %s", what, n.kindName())
	}
	return int(v), nil
}

// parseLines parses data into nodes that know their lines; duplicate keys
// are errors. Errors start with the line (":LINE: …").
func parseLines(data []byte) (*jnode, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	lineAt := func(off int64) int {
		o := int(min(off, int64(len(data))))
		for o < len(data) && strings.ContainsRune(" \t\r\n,:", rune(data[o])) {
			o++
		}
		return 1 + bytes.Count(data[:o], []byte{'\n'})
	}
	var value func() (*jnode, error)
	value = func() (*jnode, error) {
		line := lineAt(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxErr(err, data, line)
		}
		n := &jnode{line: line}
		switch t := tok.(type) {
		case json.Delim:
			if t == '[' {
				n.kind = 'a'
				for dec.More() {
					it, err := value()
					if err != nil {
						return nil, err
					}
					n.items = append(n.items, it)
				}
			} else {
				n.kind = 'o'
				for dec.More() {
					kline := lineAt(dec.InputOffset())
					k, err := dec.Token()
					if err != nil {
						return nil, syntaxErr(err, data, kline)
					}
					key := k.(string)
					if slices.Contains(n.keys, key) {
						return nil, fmt.Errorf("%d: key %q appears twice", kline, key)
					}
					v, err := value()
					if err != nil {
						return nil, err
					}
					v.line = kline
					n.keys, n.vals = append(n.keys, key), append(n.vals, v)
				}
			}
			if _, err := dec.Token(); err != nil { // the closing delimiter
				return nil, syntaxErr(err, data, line)
			}
		case string:
			n.kind, n.str = 's', t
		case json.Number:
			n.kind, n.str = 'n', string(t)
		case bool:
			n.kind, n.str = 'b', fmt.Sprint(t)
		case nil:
			n.kind = 'z'
		}
		return n, nil
	}
	root, err := value()
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%d: text after the JSON value", lineAt(dec.InputOffset()))
	}
	return root, nil
}

// syntaxErr gives a decoding error its line: the syntax error's own, or
// line (where the value began).
func syntaxErr(err error, data []byte, line int) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line = 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte{'\n'})
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		line = 1 + bytes.Count(data, []byte{'\n'})
		err = errors.New("unexpected end of the file")
	}
	return fmt.Errorf("%d: %v", line, err)
}

// checkModels refuses metadata for models the server does not serve and
// limits beyond what a model's engine holds, naming the file and line.
func (md *Metadata) checkModels(models []*Model) error {
	served := map[string]*Model{}
	var ids []string
	for _, m := range models {
		served[m.ID] = m
		ids = append(ids, m.ID)
	}
	aliases := make([]string, 0, len(md.Models))
	for a := range md.Models {
		aliases = append(aliases, a)
	}
	slices.Sort(aliases)
	for _, a := range aliases {
		mm := md.Models[a]
		m := served[a]
		if m == nil {
			return fmt.Errorf("%w: %s:%d: model %q is not served (served: %s)", ErrMetadata, md.Path, mm.line, a, strings.Join(ids, ", "))
		}
		ctx := m.Engine.Info().ContextLength
		if mm.ContextLength > 0 && ctx > 0 && mm.ContextLength > ctx {
			return fmt.Errorf("%w: %s:%d: model %q: context_length %d is more than the %d positions it is served with",
				ErrMetadata, md.Path, mm.line, a, mm.ContextLength, ctx)
		}
		if mm.MaxOutputTokens > 0 && ctx > 0 && mm.MaxOutputTokens > max(ctx, mm.ContextLength) {
			return fmt.Errorf("%w: %s:%d: model %q: max_output_tokens %d is more than its context of %d",
				ErrMetadata, md.Path, mm.line, a, mm.MaxOutputTokens, ctx)
		}
	}
	return nil
}

// cost is the price of a request's tokens under m's pricing: prompt tokens
// not read from the prefix cache at the input price, cached ones at the
// cache-read price (the input price where the file gives none), completion
// tokens at the output price. Nil when m has no pricing, or a kind of
// token the request used has no price. Writing the prefix cache costs
// nothing beyond the input price: memra's cache is automatic, so the
// cache_write price is shown, never charged.
func (m *Model) cost(prompt, cached, completion int) *costValue {
	if m.Meta == nil || m.Meta.Pricing == nil {
		return nil
	}
	p := m.Meta.Pricing
	read := p.CacheRead
	if read == nil {
		read = p.Input
	}
	total := decimal{}
	for _, part := range []struct {
		n     int
		price *decimal
	}{{prompt - cached, p.Input}, {cached, read}, {completion, p.Output}} {
		if part.n == 0 {
			continue
		}
		if part.price == nil {
			return nil
		}
		total = total.add(part.price.mulInt(int64(part.n)))
	}
	return &costValue{total}
}
