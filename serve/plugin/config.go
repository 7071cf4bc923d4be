package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Spec is one --template-plugin MODEL=FILE.wasm or --grammar-plugin
// NAME=FILE.wasm value.
type Spec struct {
	Key  string // the model alias or the grammar plugin's name
	Path string // the .wasm file
}

// ParseSpecs parses the values of one repeated flag (flag names it in
// errors). Each value is KEY=PATH; a key given twice is refused.
func ParseSpecs(flag string, values []string) ([]Spec, error) {
	seen := map[string]bool{}
	var out []Spec
	for _, v := range values {
		key, path, ok := strings.Cut(v, "=")
		key, path = strings.TrimSpace(key), strings.TrimSpace(path)
		if !ok || key == "" || path == "" {
			return nil, fmt.Errorf("%w: --%s %q: want KEY=FILE.wasm", ErrConfig, flag, v)
		}
		if seen[key] {
			return nil, fmt.Errorf("%w: --%s names %q twice", ErrConfig, flag, key)
		}
		seen[key] = true
		out = append(out, Spec{Key: key, Path: path})
	}
	return out, nil
}

// SetConfig is what the CLI passes to Open.
type SetConfig struct {
	Host      Config
	Templates []string // --template-plugin values, MODEL=FILE.wasm
	Grammars  []string // --grammar-plugin values, NAME=FILE.wasm
}

// Set is a server's loaded plugins: template plugins by model alias and
// grammar plugins by name, in one Host.
type Set struct {
	host      *Host
	templates map[string]*TemplatePlugin
	grammars  map[string]*GrammarPlugin
}

// Open parses the flag values and loads every plugin (compiling each,
// checking its ABI). With no plugins configured it returns an empty Set
// and starts no runtime.
func Open(ctx context.Context, cfg SetConfig) (*Set, error) {
	ts, err := ParseSpecs("template-plugin", cfg.Templates)
	if err != nil {
		return nil, err
	}
	gs, err := ParseSpecs("grammar-plugin", cfg.Grammars)
	if err != nil {
		return nil, err
	}
	s := &Set{templates: map[string]*TemplatePlugin{}, grammars: map[string]*GrammarPlugin{}}
	if len(ts)+len(gs) == 0 {
		return s, nil
	}
	if s.host, err = NewHost(ctx, cfg.Host); err != nil {
		return nil, err
	}
	for _, sp := range ts {
		t, err := s.host.LoadTemplateFile(ctx, sp.Key, sp.Path)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("--template-plugin %s=%s: %w", sp.Key, sp.Path, err)
		}
		s.templates[sp.Key] = t
	}
	for _, sp := range gs {
		g, err := s.host.LoadGrammarFile(ctx, sp.Key, sp.Path)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("--grammar-plugin %s=%s: %w", sp.Key, sp.Path, err)
		}
		s.grammars[sp.Key] = g
	}
	return s, nil
}

// Close closes every plugin and the runtime.
func (s *Set) Close() error {
	if s.host == nil {
		return nil
	}
	return s.host.Close()
}

// Template returns the template plugin configured for model, if any.
func (s *Set) Template(model string) (*TemplatePlugin, bool) {
	t, ok := s.templates[model]
	return t, ok
}

// CheckModels refuses a --template-plugin naming a model that is not
// served (models: the served aliases).
func (s *Set) CheckModels(models []string) error {
	for key := range s.templates {
		found := false
		for _, m := range models {
			found = found || m == key
		}
		if !found {
			return fmt.Errorf("%w: --template-plugin names model %q, which is not served (served: %s)",
				ErrConfig, key, strings.Join(models, ", "))
		}
	}
	return nil
}

// Grammar returns the grammar plugin called name, if any.
func (s *Set) Grammar(name string) (*GrammarPlugin, bool) {
	g, ok := s.grammars[name]
	return g, ok
}

// GrammarNames returns the configured grammar plugins' names, sorted.
func (s *Set) GrammarNames() []string {
	var out []string
	for k := range s.grammars {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// GrammarRequest is a request's "grammar": {"plugin": NAME, "source": "…"}.
type GrammarRequest struct {
	Plugin string `json:"plugin"`
	Source string `json:"source"`
}

// ErrBadGrammarRequest: the request's grammar field is malformed; a server
// answers it with 400, as it does ErrUnknown and ErrPluginError.
var ErrBadGrammarRequest = errors.New("plugin: bad grammar request")

// ParseGrammarRequest decodes a request's "grammar" field.
func ParseGrammarRequest(raw json.RawMessage) (GrammarRequest, error) {
	var g GrammarRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return g, fmt.Errorf("%w: %v", ErrBadGrammarRequest, err)
	}
	if g.Plugin == "" {
		return g, fmt.Errorf("%w: \"plugin\" is required", ErrBadGrammarRequest)
	}
	return g, nil
}

// NewMask is the server's hook for a request's grammar field: it parses
// raw, finds the plugin and starts a Matcher over tok, to be set as
// runtime.Request.Mask and closed when the generation ends. Errors:
// ErrBadGrammarRequest, ErrUnknown, ErrPluginError (the plugin refused the
// source), and the call errors (ErrPluginTimeout, ErrPluginTrap, …).
func (s *Set) NewMask(raw json.RawMessage, tok TokenSource) (*Matcher, error) {
	g, err := ParseGrammarRequest(raw)
	if err != nil {
		return nil, err
	}
	p, ok := s.grammars[g.Plugin]
	if !ok {
		names := s.GrammarNames()
		if len(names) == 0 {
			return nil, fmt.Errorf("%w: %q (no grammar plugins are configured; see --grammar-plugin)", ErrUnknown, g.Plugin)
		}
		return nil, fmt.Errorf("%w: %q (configured: %s)", ErrUnknown, g.Plugin, strings.Join(names, ", "))
	}
	return p.NewMatcher(tok, g.Source)
}
