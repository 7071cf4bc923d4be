package hub

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/memra-ai/memra/runtime/format/gguf"
)

// folderFiles are the files of a checkpoint folder memra reads besides the
// weights (runtime/load: config, tokenizer, chat template); those absent
// from a repository are skipped.
var folderFiles = []string{
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"special_tokens_map.json", "tokenizer.model", "chat_template.jinja", "chat_template.json",
}

// indexFile is a sharded checkpoint's index (safetensors' weight_map).
const indexFile = "model.safetensors.index.json"

// IsCheckpointFile reports whether a top-level file of a checkpoint folder
// is one a model is made of (what an hf:OWNER/REPO spec fetches): the
// config, tokenizer and template files, the index and the safetensors
// shards. Other files beside them (a README, GGUF files of the same
// repository) are not the model.
func IsCheckpointFile(name string) bool {
	return name == indexFile || strings.HasSuffix(name, ".safetensors") || slices.Contains(folderFiles, name)
}

// selection is what a spec takes from a repository.
type selection struct {
	files []string // repository paths, in download order
	path  string   // what load.Open takes, relative to the snapshot ("" for the folder)
}

// selectFiles picks the files of spec among a repository's files. A
// checkpoint folder with an index needs the index's weight_map: readIndex
// returns the index's bytes (fetching it if need be).
func selectFiles(sp Spec, names []string, readIndex func() ([]byte, error)) (selection, error) {
	has := make(map[string]bool, len(names))
	for _, n := range names {
		has[n] = true
	}
	switch {
	case sp.File != "":
		if !has[sp.File] {
			return selection{}, fmt.Errorf("%w: %s has no file %s%s", ErrNotFound, sp.Repo, sp.File, suggest(names))
		}
		return ggufGroup(sp, sp.File, has)
	case sp.Quant != "":
		return selectQuant(sp, names, has)
	}
	if !has["config.json"] {
		// a repository of GGUF files only: its single model, if it has one
		if groups := ggufModels(names); len(groups) == 1 {
			return ggufGroup(sp, groups[0], has)
		} else if len(groups) > 1 {
			return selection{}, fmt.Errorf("%w: %s has no config.json and %d GGUF models; name one: %s", ErrSelect, sp.Repo, len(groups), quantChoices(sp, groups))
		}
		return selection{}, fmt.Errorf("%w: %s has neither config.json nor a GGUF file", ErrSelect, sp.Repo)
	}
	var sel selection
	for _, f := range folderFiles {
		if has[f] {
			sel.files = append(sel.files, f)
		}
	}
	if has[indexFile] {
		raw, err := readIndex()
		if err != nil {
			return selection{}, err
		}
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return selection{}, fmt.Errorf("%w: %s: %s: %v", ErrSelect, sp.Repo, indexFile, err)
		}
		var shards []string
		for _, f := range idx.WeightMap {
			if strings.Contains(f, "/") || !has[f] {
				return selection{}, fmt.Errorf("%w: %s: %s names %q, which the repository does not have at its top level", ErrSelect, sp.Repo, indexFile, f)
			}
			if !slices.Contains(shards, f) {
				shards = append(shards, f)
			}
		}
		slices.Sort(shards)
		sel.files = append(append(sel.files, indexFile), shards...)
		return sel, nil
	}
	n := len(sel.files)
	for _, f := range names {
		if !strings.Contains(f, "/") && strings.HasSuffix(f, ".safetensors") {
			sel.files = append(sel.files, f)
		}
	}
	if len(sel.files) == n {
		return selection{}, fmt.Errorf("%w: %s has config.json but no top-level *.safetensors file", ErrSelect, sp.Repo)
	}
	return sel, nil
}

// selectQuant picks the GGUF model whose file name carries the
// quantisation as one of its words (split by '-', '.' and '/', compared
// without case): Q4_K matches model.Q4_K.gguf, not model-Q4_K_M.gguf.
func selectQuant(sp Spec, names []string, has map[string]bool) (selection, error) {
	groups := ggufModels(names)
	var hits []string
	for _, g := range groups {
		if slices.ContainsFunc(words(g), func(w string) bool { return strings.EqualFold(w, sp.Quant) }) {
			hits = append(hits, g)
		}
	}
	switch len(hits) {
	case 1:
		return ggufGroup(sp, hits[0], has)
	case 0:
		return selection{}, fmt.Errorf("%w: %s has no GGUF file of quantisation %s; it has: %s", ErrSelect, sp.Repo, sp.Quant, quantChoices(sp, groups))
	}
	return selection{}, fmt.Errorf("%w: %s has %d GGUF models of quantisation %s: %s; name the file (hf:%s:FILE.gguf)",
		ErrSelect, sp.Repo, len(hits), sp.Quant, strings.Join(hits, ", "), sp.Repo)
}

// words splits a file path into the words a quantisation name is matched against.
func words(name string) []string {
	return strings.FieldsFunc(strings.TrimSuffix(strings.ToLower(name), ".gguf"), func(r rune) bool { return r == '-' || r == '.' || r == '/' })
}

// ggufModels lists a repository's GGUF models: each single file, and the
// first shard of each split model. Vision projectors (mmproj*) and
// imatrix files are not models.
func ggufModels(names []string) []string {
	var out []string
	for _, n := range names {
		base := path.Base(n)
		if !strings.HasSuffix(strings.ToLower(n), ".gguf") || strings.HasPrefix(strings.ToLower(base), "mmproj") || strings.Contains(strings.ToLower(base), "imatrix") {
			continue
		}
		if _, i, _, ok := gguf.ParseSplitName(n); ok && i != 0 {
			continue
		}
		out = append(out, n)
	}
	return out
}

// ggufGroup is the selection of a GGUF file: itself, or every shard of
// the split model it belongs to (all of which the repository must have).
func ggufGroup(sp Spec, file string, has map[string]bool) (selection, error) {
	prefix, _, n, ok := gguf.ParseSplitName(file)
	if !ok {
		return selection{files: []string{file}, path: file}, nil
	}
	var sel selection
	for i := range n {
		f := gguf.SplitName(prefix, i, n)
		if !has[f] {
			return selection{}, fmt.Errorf("%w: %s: %s is shard %d of %d; the repository lacks %s", ErrSelect, sp.Repo, file, i+1, n, f)
		}
		sel.files = append(sel.files, f)
	}
	sel.path = sel.files[0]
	return sel, nil
}

// quantChoices names the GGUF models one could ask for instead.
func quantChoices(sp Spec, groups []string) string {
	if len(groups) == 0 {
		return "no GGUF file"
	}
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = Prefix + sp.Repo + ":" + g
	}
	return strings.Join(out, ", ")
}

// suggest lists the GGUF files of a repository after a file was not found.
func suggest(names []string) string {
	if g := ggufModels(names); len(g) > 0 {
		return " (its GGUF files: " + strings.Join(g, ", ") + ")"
	}
	return ""
}
