package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

func f32Bytes(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func sample() []Tensor {
	return []Tensor{
		{Name: "model.embed_tokens.weight", DType: "F32", Shape: []int{2, 3}, Data: f32Bytes(1, 2, 3, 4, 5, 6)},
		{Name: "ids", DType: "I64", Shape: []int{1}, Data: make([]byte, 8)},
		{Name: "half", DType: "BF16", Shape: []int{2}, Data: []byte{0x80, 0x3f, 0x00, 0x40}},
		{Name: "empty", DType: "F16", Shape: []int{0, 4}, Data: nil},
		{Name: "scalar", DType: "U8", Shape: []int{}, Data: []byte{7}},
	}
}

func written(t testing.TB, ts []Tensor, meta map[string]string) []byte {
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, ts, meta))
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	meta := map[string]string{"format": "pt"}
	raw := written(t, sample(), meta)
	require.Zero(t, (len(raw)-8-sumLen(sample()))%8, "header padded to 8")
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, meta, f.Metadata)
	require.Len(t, f.Tensors, len(sample()))
	for _, want := range sample() {
		ti, ok := f.Tensor(want.Name)
		require.True(t, ok, want.Name)
		require.Equal(t, want.DType, ti.DType)
		require.Equal(t, want.Shape, ti.Shape)
		got, err := f.TensorData(ti)
		require.NoError(t, err)
		require.Equal(t, len(want.Data), len(got))
		if len(want.Data) > 0 {
			require.Equal(t, want.Data, got)
		}
	}
	emb, _ := f.Tensor("model.embed_tokens.weight")
	ty, ok := emb.Type()
	require.True(t, ok)
	require.Equal(t, dtype.F32, ty)
	half, _ := f.Tensor("half")
	d, _ := f.TensorData(half)
	vals, err := Float32s(half, d)
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2}, vals)
	require.NoError(t, f.Close())
	_, err = f.TensorData(emb)
	require.ErrorIs(t, err, ErrClosed)
}

func sumLen(ts []Tensor) int {
	n := 0
	for _, t := range ts {
		n += len(t.Data)
	}
	return n
}

// withHeader builds a file from a raw JSON header and dataLen bytes.
func withHeader(h string, dataLen int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	b = append(b, h...)
	return append(b, make([]byte, dataLen)...)
}

func TestCorrupt(t *testing.T) {
	huge := binary.LittleEndian.AppendUint64(nil, 1<<62)
	cases := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"valid", withHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  `, 8), nil, ""},
		{"short", []byte{1, 2, 3}, ErrTruncated, "header length"},
		{"header over cap", append(huge, make([]byte, 64)...), ErrHeader, "cap"},
		{"header past end", withHeader(`{}`, 0)[:9], ErrTruncated, "header of 2 bytes"},
		{"not json", withHeader(`hello`, 0), ErrHeader, "object"},
		{"array header", withHeader(`[1]`, 0), ErrHeader, "object"},
		{"broken json", withHeader(`{"a":{"dtype":"F32"`, 0), ErrHeader, `"a"`},
		{"trailing garbage", withHeader(`{} x`, 0), ErrHeader, "after the JSON"},
		{"unknown field", withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4), ErrHeader, "unknown field"},
		{"unknown dtype", withHeader(`{"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}`, 1), ErrDType, `"F4"`},
		{"missing offsets", withHeader(`{"a":{"dtype":"F32","shape":[1]}}`, 4), ErrHeader, "data_offsets"},
		{"negative shape", withHeader(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), ErrShape, "shape"},
		{"shape overflow", withHeader(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), ErrShape, "shape"},
		{"size mismatch", withHeader(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), ErrShape, "needs 12"},
		{"reversed offsets", withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`, 8), ErrShape, "[8, 4)"},
		{"negative offset", withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, 8), ErrHeader, `"a"`},
		{"offset too big", withHeader(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}}`, 8), ErrRange, "data_offsets"},
		{"past end", withHeader(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8), ErrRange, `tensor "a": data [0, 16) past the end of the data section (8 bytes`},
		{"overlap", withHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12), ErrOverlap, `"a" [0, 8) and tensor "b" [4, 12)`},
		{"duplicate", withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), ErrDuplicate, `"a"`},
		{"metadata not strings", withHeader(`{"__metadata__":{"x":1}}`, 0), ErrHeader, "__metadata__"},
		{"metadata twice", withHeader(`{"__metadata__":{},"__metadata__":{}}`, 0), ErrDuplicate, "__metadata__"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.data)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.want)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}

// TestEveryPrefix: every strict prefix of a written file must fail.
func TestEveryPrefix(t *testing.T) {
	raw := written(t, sample(), map[string]string{"format": "pt"})
	for n := range len(raw) {
		_, err := Parse(raw[:n])
		require.Error(t, err, "prefix %d", n)
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrRange) && !errors.Is(err, ErrHeader) {
			t.Fatalf("prefix %d: unexpected error %v", n, err)
		}
	}
	_, err := Parse(raw)
	require.NoError(t, err)
}

func TestWriteErrors(t *testing.T) {
	cases := map[string][]Tensor{
		"size":      {{Name: "a", DType: "F32", Shape: []int{2}, Data: make([]byte, 4)}},
		"dtype":     {{Name: "a", DType: "Q4", Shape: []int{2}, Data: make([]byte, 4)}},
		"duplicate": {{Name: "a", DType: "U8", Shape: []int{1}, Data: []byte{1}}, {Name: "a", DType: "U8", Shape: []int{1}, Data: []byte{1}}},
		"negative":  {{Name: "a", DType: "U8", Shape: []int{-1}}},
	}
	for name, ts := range cases {
		t.Run(name, func(t *testing.T) {
			require.Error(t, Write(&bytes.Buffer{}, ts, nil))
		})
	}
}

func TestSharded(t *testing.T) {
	dir := t.TempDir()
	s1 := []Tensor{{Name: "a", DType: "F32", Shape: []int{1}, Data: f32Bytes(1)}}
	s2 := []Tensor{{Name: "b", DType: "F32", Shape: []int{2}, Data: f32Bytes(2, 3)}}
	require.NoError(t, WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), s1, nil))
	require.NoError(t, WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), s2, nil))
	index := `{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, IndexName), []byte(index), 0o644))
	s, err := OpenDir(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, s.Names())
	d, err := s.Data("b")
	require.NoError(t, err)
	require.Equal(t, f32Bytes(2, 3), d)
	_, err = s.Data("c")
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, s.Close())

	bad := []struct{ name, index string }{
		{"wrong shard", `{"weight_map":{"a":"model-00002-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`},
		{"path escape", `{"weight_map":{"a":"../x.safetensors"}}`},
		{"empty", `{"weight_map":{}}`},
		{"not json", `{`},
	}
	for _, c := range bad {
		require.NoError(t, os.WriteFile(filepath.Join(dir, IndexName), []byte(c.index), 0o644))
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, ErrIndex, c.name)
	}

	// Without an index every file is opened; a name in two files is an error.
	require.NoError(t, os.Remove(filepath.Join(dir, IndexName)))
	require.NoError(t, WriteFile(filepath.Join(dir, "model-extra.safetensors"), s1, nil))
	_, err = OpenDir(dir)
	require.ErrorIs(t, err, ErrDuplicate)
	_, err = OpenDir(t.TempDir())
	require.ErrorIs(t, err, ErrNotFound)
}

func FuzzParse(f *testing.F) {
	f.Add(written(f, sample(), map[string]string{"k": "v"}))
	f.Add(withHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Add(withHeader(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}`, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			d, err := file.TensorData(ti)
			if err != nil || len(d) != ti.Elements()*ElemSize(ti.DType) {
				t.Fatalf("tensor %q: %d bytes, err %v", ti.Name, len(d), err)
			}
		}
	})
}

// TestOpenNotAFile: a directory and a file shorter than the header length
// give the package's error kinds, naming the path.
func TestOpenNotAFile(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	require.ErrorIs(t, err, ErrHeader)
	require.ErrorContains(t, err, dir)
	short := filepath.Join(dir, "short.safetensors")
	require.NoError(t, os.WriteFile(short, []byte{1, 2, 3}, 0o644))
	_, err = Open(short)
	require.ErrorIs(t, err, ErrTruncated)
	require.ErrorContains(t, err, "3 bytes")
}
