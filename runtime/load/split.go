package load

import (
	"fmt"
	"path/filepath"

	"github.com/memra-ai/memra/runtime/format/gguf"
)

// openGGUF opens a GGUF model. A shard of a split model (split.count > 1)
// opens every shard, found beside it by the shards' naming
// (PREFIX-00001-of-00003.gguf …): the model's metadata come from the
// first, its tensors from all of them.
func openGGUF(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	no, count, total, split, err := f.SplitInfo()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !split {
		m, err := fromGGUF(path, f)
		if err != nil {
			f.Close()
			return nil, err
		}
		m.closers = append(m.closers, f)
		return m, nil
	}
	files := make([]*gguf.File, count)
	files[no] = f
	closeAll := func() {
		for _, sf := range files {
			if sf != nil {
				sf.Close()
			}
		}
	}
	dir, base := filepath.Split(path)
	prefix, i, n, ok := gguf.ParseSplitName(base)
	if !ok || i != no || n != count {
		closeAll()
		return nil, fmt.Errorf("%w: %s is shard %d of %d of a split GGUF model, but its name is not %s", ErrFormat, path, no+1, count, gguf.SplitName("PREFIX", no, count))
	}
	tensors := len(f.Tensors)
	for s := range count {
		if s == no {
			continue
		}
		p := filepath.Join(dir, gguf.SplitName(prefix, s, count))
		sf, err := gguf.Open(p)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("split GGUF model %s: shard %d of %d: %w", path, s+1, count, err)
		}
		files[s] = sf
		sno, scount, stotal, ok, err := sf.SplitInfo()
		if err == nil && (!ok || sno != s || scount != count || stotal != total) {
			err = fmt.Errorf("%w: its split keys say shard %d of %d with %d tensors", ErrMetadata, sno+1, scount, stotal)
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("split GGUF model %s: %s: %w", path, p, err)
		}
		tensors += len(sf.Tensors)
	}
	if tensors != total {
		closeAll()
		return nil, fmt.Errorf("%w: split GGUF model %s: its shards hold %d tensors, %s says %d", ErrTensor, path, tensors, gguf.KeySplitTensors, total)
	}
	first := filepath.Join(dir, gguf.SplitName(prefix, 0, count))
	m, err := fromGGUF(first, files[0], files[1:]...)
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, sf := range files {
		m.closers = append(m.closers, sf)
	}
	return m, nil
}
