package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// IndexName is the file name of a sharded checkpoint's index.
const IndexName = "model.safetensors.index.json"

// Set is the tensors of one checkpoint, from one file or several shards,
// addressed by name.
type Set struct {
	Files []*File
	where map[string]tensorRef
	names []string
}

type tensorRef struct {
	file *File
	i    int
}

// OpenDir opens the checkpoint in folder dir: the shards listed by
// model.safetensors.index.json when it exists, otherwise every *.safetensors
// file in the folder.
func OpenDir(dir string) (*Set, error) {
	idx := filepath.Join(dir, IndexName)
	if _, err := os.Stat(idx); err == nil {
		return OpenIndex(idx)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no *.safetensors file in %s", ErrNotFound, dir)
	}
	slices.Sort(paths)
	return OpenFiles(paths...)
}

// OpenFiles opens the given files as one set; tensor names must be unique
// across them.
func OpenFiles(paths ...string) (*Set, error) {
	s := &Set{where: map[string]tensorRef{}}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Files = append(s.Files, f)
		for i := range f.Tensors {
			name := f.Tensors[i].Name
			if prev, dup := s.where[name]; dup {
				s.Close()
				return nil, fmt.Errorf("%w: %q is in both %s and %s", ErrDuplicate, name, prev.file.Path, p)
			}
			s.where[name] = tensorRef{f, i}
			s.names = append(s.names, name)
		}
	}
	slices.Sort(s.names)
	return s, nil
}

// OpenIndex opens a sharded checkpoint from its index file. Every tensor
// the weight_map names must be in the shard it names.
func OpenIndex(indexPath string) (*Set, error) {
	raw, err := os.ReadFile(indexPath)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrIndex, indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%w: %s: empty weight_map", ErrIndex, indexPath)
	}
	dir := filepath.Dir(indexPath)
	var shards []string
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard || strings.HasPrefix(shard, ".") {
			return nil, fmt.Errorf("%w: %s: tensor %q maps to shard %q (want a file name in the same folder)", ErrIndex, indexPath, name, shard)
		}
		p := filepath.Join(dir, shard)
		if !slices.Contains(shards, p) {
			shards = append(shards, p)
		}
	}
	slices.Sort(shards)
	s, err := OpenFiles(shards...)
	if err != nil {
		return nil, err
	}
	for name, shard := range idx.WeightMap {
		ref, ok := s.where[name]
		if !ok || filepath.Base(ref.file.Path) != shard {
			s.Close()
			return nil, fmt.Errorf("%w: %s: tensor %q is not in shard %s", ErrIndex, indexPath, name, shard)
		}
	}
	return s, nil
}

// Close closes every file of the set.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.Files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// Names returns every tensor name, sorted.
func (s *Set) Names() []string { return s.names }

// Tensor returns the named tensor's info and the file holding it.
func (s *Set) Tensor(name string) (*TensorInfo, *File, bool) {
	ref, ok := s.where[name]
	if !ok {
		return nil, nil, false
	}
	return &ref.file.Tensors[ref.i], ref.file, true
}

// Data returns the bytes of the named tensor.
func (s *Set) Data(name string) ([]byte, error) {
	t, f, ok := s.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return f.TensorData(t)
}
