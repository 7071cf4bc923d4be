package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/memra-ai/memra/runtime/format/gguf"
)

// Poolings of Model.Pooling: how an embedding model makes one vector of a
// sequence's final hidden states. Empty: the model declares none (a
// generative model).
const (
	PoolMean = "mean"
	PoolCLS  = "cls"
	PoolLast = "last"
)

// ggufPoolings are the values of GGUF's {arch}.pooling_type (llama.cpp's
// numbering): 0 none, 1 mean, 2 cls, 3 last; 4 (rank) is a reranker's
// head, which memra does not build.
var ggufPoolings = map[uint64]string{0: "", 1: PoolMean, 2: PoolCLS, 3: PoolLast}

// ggufPooling reads {arch}.pooling_type.
func ggufPooling(path, arch string, f *gguf.File) (string, error) {
	key := arch + ".pooling_type"
	v, ok := f.Lookup(key)
	if !ok {
		return "", nil
	}
	u, ok := v.Uint()
	if !ok {
		return "", fmt.Errorf("%w: %s: %s: want an integer, have %v", ErrMetadata, path, key, v)
	}
	p, ok := ggufPoolings[u]
	if !ok {
		return "", fmt.Errorf("%w: %s: %s = %d (0 none, 1 mean, 2 cls, 3 last; 4, a reranker's rank head, is not supported)",
			ErrMetadata, path, key, u)
	}
	return p, nil
}

// stModule is one entry of a sentence-transformers modules.json.
type stModule struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// stPooling is a sentence-transformers Pooling module's config.json.
type stPooling struct {
	CLS          bool `json:"pooling_mode_cls_token"`
	Mean         bool `json:"pooling_mode_mean_tokens"`
	Max          bool `json:"pooling_mode_max_tokens"`
	MeanSqrt     bool `json:"pooling_mode_mean_sqrt_len_tokens"`
	WeightedMean bool `json:"pooling_mode_weightedmean_tokens"`
	Last         bool `json:"pooling_mode_lasttoken"`
}

// hfPooling reads the pooling of a sentence-transformers folder: the
// Pooling module that modules.json names, and its config.json. It
// returns "" when the folder has no modules.json or no Pooling module.
func hfPooling(dir string) (string, error) {
	path := filepath.Join(dir, "modules.json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load: %w", err)
	}
	var mods []stModule
	if err := json.Unmarshal(raw, &mods); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMetadata, path, err)
	}
	for _, m := range mods {
		if !strings.HasSuffix(m.Type, ".Pooling") {
			continue
		}
		cfgPath := filepath.Join(dir, filepath.FromSlash(m.Path), "config.json")
		if rel, err := filepath.Rel(dir, cfgPath); err != nil || strings.HasPrefix(rel, "..") {
			return "", fmt.Errorf("%w: %s: the Pooling module's path %q leaves the folder", ErrMetadata, path, m.Path)
		}
		raw, err := os.ReadFile(cfgPath)
		if err != nil {
			return "", fmt.Errorf("%w: %s names a Pooling module: %w", ErrMetadata, path, err)
		}
		var p stPooling
		if err := json.Unmarshal(raw, &p); err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrMetadata, cfgPath, err)
		}
		var on []string
		for _, c := range []struct {
			set  bool
			name string
		}{{p.CLS, PoolCLS}, {p.Mean, PoolMean}, {p.Last, PoolLast}, {p.Max, "max"}, {p.MeanSqrt, "mean_sqrt_len"}, {p.WeightedMean, "weightedmean"}} {
			if c.set {
				on = append(on, c.name)
			}
		}
		switch {
		case len(on) == 1 && (on[0] == PoolCLS || on[0] == PoolMean || on[0] == PoolLast):
			return on[0], nil
		case len(on) == 0:
			return "", fmt.Errorf("%w: %s: no pooling mode is set", ErrMetadata, cfgPath)
		}
		return "", fmt.Errorf("%w: %s: pooling %s (memra pools by one of cls, mean, last)", ErrMetadata, cfgPath, strings.Join(on, " + "))
	}
	return "", nil
}

// flatBackbone reports whether a checkpoint stores its decoder without the
// "model." prefix (embed_tokens.weight, layers.N.…, norm.weight) and
// without an output head: the Qwen3-Embedding layout.
func flatBackbone(names []string) bool {
	flat := false
	for _, n := range names {
		switch {
		case n == "embed_tokens.weight":
			flat = true
		case n == "lm_head.weight", strings.HasPrefix(n, "model."):
			return false
		}
	}
	return flat
}
