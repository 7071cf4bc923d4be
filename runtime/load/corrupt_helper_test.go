package load

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/gguf"
)

// ggufTensor is one tensor of a rewritten GGUF file.
type ggufTensor struct {
	Name string
	Type dtype.Type
	Dims []uint64
	Data []byte
}

// ggufParts are the metadata and tensors of a GGUF file, to edit.
type ggufParts struct {
	KVs     []gguf.KV
	Tensors []ggufTensor
}

// setKV replaces (or appends) key's value.
func (p *ggufParts) setKV(key string, v any) {
	val, err := gguf.ValueOf(v)
	if err != nil {
		panic(err)
	}
	for i := range p.KVs {
		if p.KVs[i].Key == key {
			p.KVs[i].Value = val
			return
		}
	}
	p.KVs = append(p.KVs, gguf.KV{Key: key, Value: val})
}

// dropKV removes key.
func (p *ggufParts) dropKV(key string) {
	p.KVs = slices.DeleteFunc(p.KVs, func(kv gguf.KV) bool { return kv.Key == key })
}

// tensor returns the named tensor for editing.
func (p *ggufParts) tensor(name string) *ggufTensor {
	for i := range p.Tensors {
		if p.Tensors[i].Name == name {
			return &p.Tensors[i]
		}
	}
	panic("no tensor " + name)
}

// readParts parses the GGUF file at path into editable parts.
func readParts(t testing.TB, path string) *ggufParts {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := gguf.Parse(raw)
	require.NoError(t, err)
	p := &ggufParts{KVs: slices.Clone(f.KVs)}
	p.dropKV(gguf.KeyAlignment)
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data, err := f.TensorData(ti)
		require.NoError(t, err)
		p.Tensors = append(p.Tensors, ggufTensor{Name: ti.Name, Type: ti.Type, Dims: slices.Clone(ti.Dims), Data: slices.Clone(data)})
	}
	return p
}

// encode writes the parts as a GGUF file image.
func (p *ggufParts) encode(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	for _, kv := range p.KVs {
		w.AddKV(kv.Key, kv.Value)
	}
	for _, ts := range p.Tensors {
		w.AddTensor(ts.Name, ts.Type, ts.Dims, int64(len(ts.Data)))
	}
	require.NoError(t, w.WriteHeader())
	for _, ts := range p.Tensors {
		require.NoError(t, w.WriteTensorData(ts.Name, ts.Data))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// writeFile writes data to name in a fresh temporary folder.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}
