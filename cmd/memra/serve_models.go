package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/serve"
)

// parsePoolings reads --pooling: entries "mean" (every model) or
// "alias=mean" (one served model), by alias ("" for every model).
func parsePoolings(flags, aliases []string) (map[string]runtime.Pooling, error) {
	out := map[string]runtime.Pooling{}
	for _, f := range flags {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		alias, name, ok := strings.Cut(f, "=")
		if !ok {
			alias, name = "", f
		} else if !slices.Contains(aliases, alias) {
			return nil, fmt.Errorf("--pooling %s: model %q is not served (served: %s)", f, alias, strings.Join(aliases, ", "))
		}
		p, err := runtime.ParsePooling(name)
		if err != nil {
			return nil, fmt.Errorf("--pooling %s: want mean, cls, last or none", f)
		}
		if _, dup := out[alias]; dup {
			return nil, fmt.Errorf("--pooling %s: given twice for %s", f, map[bool]string{true: "every model", false: alias}[alias == ""])
		}
		out[alias] = p
	}
	return out, nil
}

// servedPooling is a model's pooling: --pooling for its alias, else
// --pooling for every model, else what the model declares.
func servedPooling(m *load.Model, alias string, poolings map[string]runtime.Pooling) (runtime.Pooling, error) {
	if p, ok := poolings[alias]; ok {
		return p, nil
	}
	if p, ok := poolings[""]; ok {
		return p, nil
	}
	if m.Pooling == "" {
		return runtime.PoolNone, nil
	}
	return runtime.ParsePooling(m.Pooling)
}

// modelFacts describes m's file for Ollama's /api/tags and /api/show.
func modelFacts(m *load.Model) serve.ModelFacts {
	f := serve.ModelFacts{Path: m.Path, Format: m.Format, Quantization: m.FileType}
	for _, t := range m.Tensors {
		f.Parameters += t.Elements()
		f.Size += t.Bytes()
	}
	if st, err := os.Stat(m.Path); err == nil {
		f.Modified = st.ModTime()
	}
	return f
}
