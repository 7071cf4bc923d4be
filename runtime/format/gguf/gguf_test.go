package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

const (
	storiesPath = "../../../testdata/models/tinyllamas-stories-260k-f32.gguf"
	tinyPath    = "../../../testdata/models/llama-2-tiny-random.gguf"
	spmPath     = "../../../testdata/vocab/ggml-vocab-llama-spm.gguf"
	gpt2Path    = "../../../testdata/vocab/ggml-vocab-gpt-2.gguf"
)

func TestFixtures(t *testing.T) {
	type tensor struct {
		name string
		typ  dtype.Type
		dims []uint64
	}
	cases := []struct {
		path       string
		version    uint32
		kvs        int
		tensors    int
		dataOffset int64
		strs       map[string]string
		uints      map[string]uint64
		arrays     map[string]int // key → element count
		some       []tensor
	}{
		{
			path: storiesPath, version: 1, kvs: 18, tensors: 48, dataOffset: 11456,
			strs:   map[string]string{"general.architecture": "llama", "general.name": "tinyllamas-stories-260k", "tokenizer.ggml.model": "llama"},
			uints:  map[string]uint64{"llama.embedding_length": 64, "llama.block_count": 5, "llama.feed_forward_length": 172, "llama.attention.head_count": 8, "llama.attention.head_count_kv": 4, "llama.context_length": 512, "tokenizer.ggml.bos_token_id": 1},
			arrays: map[string]int{"tokenizer.ggml.tokens": 512, "tokenizer.ggml.scores": 512, "tokenizer.ggml.token_type": 512},
			some: []tensor{
				{"token_embd.weight", dtype.F32, []uint64{64, 512}},
				{"blk.0.attn_k.weight", dtype.F32, []uint64{64, 32}},
				{"blk.4.ffn_down.weight", dtype.F32, []uint64{172, 64}},
				{"output.weight", dtype.F32, []uint64{64, 512}},
			},
		},
		{
			path: tinyPath, version: 3, kvs: 18, tensors: 12, dataOffset: 724416,
			strs:   map[string]string{"general.architecture": "llama", "general.name": "LLaMA v2"},
			uints:  map[string]uint64{"llama.embedding_length": 8, "llama.rope.dimension_count": 4, "general.file_type": 1, "llama.context_length": 4096},
			arrays: map[string]int{"tokenizer.ggml.tokens": 32000},
			some: []tensor{
				{"token_embd.weight", dtype.F16, []uint64{8, 32000}},
				{"blk.0.ffn_down.weight", dtype.F16, []uint64{32, 8}},
				{"output_norm.weight", dtype.F32, []uint64{8}},
			},
		},
		{
			path: spmPath, version: 3, kvs: 22, tensors: 0, dataOffset: 723872,
			strs:   map[string]string{"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default"},
			uints:  map[string]uint64{"llama.vocab_size": 32000, "tokenizer.ggml.eos_token_id": 2},
			arrays: map[string]int{"tokenizer.ggml.tokens": 32000, "tokenizer.ggml.scores": 32000},
		},
		{
			path: gpt2Path, version: 3, kvs: 16, tensors: 0, dataOffset: 1766816,
			strs:   map[string]string{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2"},
			uints:  map[string]uint64{"tokenizer.ggml.bos_token_id": 50256},
			arrays: map[string]int{"tokenizer.ggml.tokens": 50257, "tokenizer.ggml.merges": 50000},
		},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			f, err := Open(c.path)
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, c.version, f.Version)
			require.Len(t, f.KVs, c.kvs)
			require.Len(t, f.Tensors, c.tensors)
			require.Equal(t, c.dataOffset, f.DataOffset)
			require.EqualValues(t, 32, f.Alignment)
			for k, want := range c.strs {
				got, ok := f.String(k)
				require.True(t, ok, k)
				require.Equal(t, want, got, k)
			}
			for k, want := range c.uints {
				got, ok := f.Uint(k)
				require.True(t, ok, k)
				require.Equal(t, want, got, k)
			}
			for k, n := range c.arrays {
				v, ok := f.Lookup(k)
				require.True(t, ok, k)
				require.Equal(t, n, v.Len(), k)
			}
			for _, want := range c.some {
				ti, ok := f.Tensor(want.name)
				require.True(t, ok, want.name)
				require.Equal(t, want.typ, ti.Type)
				require.Equal(t, want.dims, ti.Dims)
			}
			raw, err := os.ReadFile(c.path)
			require.NoError(t, err)
			for i := range f.Tensors {
				ti := &f.Tensors[i]
				got, err := f.TensorData(ti)
				require.NoError(t, err)
				start := uint64(f.DataOffset) + ti.Offset
				require.Equal(t, raw[start:start+ti.Bytes()], got, ti.Name)
			}
		})
	}
}

func TestGetters(t *testing.T) {
	f, err := Open(storiesPath)
	require.NoError(t, err)
	eps, ok := f.Float("llama.attention.layer_norm_rms_epsilon")
	require.True(t, ok)
	require.InDelta(t, 1e-5, eps, 1e-12)
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	require.True(t, ok)
	require.Equal(t, "<s>", toks[1])
	scores, ok := f.Float32s("tokenizer.ggml.scores")
	require.True(t, ok)
	require.Len(t, scores, 512)
	types, ok := f.Int32s("tokenizer.ggml.token_type")
	require.True(t, ok)
	require.EqualValues(t, 3, types[1])   // <s> is a control token
	_, ok = f.String("llama.block_count") // wrong type
	require.False(t, ok)
	_, ok = f.Uint("general.name")
	require.False(t, ok)
	_, ok = f.Bool("missing")
	require.False(t, ok)

	require.NoError(t, f.Close())
	require.NoError(t, f.Close())
	_, err = f.TensorData(&f.Tensors[0])
	require.ErrorIs(t, err, ErrClosed)
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "missing.gguf"))
	require.ErrorIs(t, err, os.ErrNotExist)
	empty := filepath.Join(dir, "empty.gguf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = Open(empty)
	require.ErrorIs(t, err, ErrTruncated)
	_, err = Open(dir)
	require.Error(t, err)
	bad := filepath.Join(dir, "bad.gguf")
	require.NoError(t, os.WriteFile(bad, []byte("GGML\x03\x00\x00\x00"), 0o644))
	_, err = Open(bad)
	require.ErrorIs(t, err, ErrMagic)
	require.Contains(t, err.Error(), bad)
}

// TestEveryPrefix cuts each fixture at every byte of its header (for the
// big vocabulary headers: the first 16 KiB, the last 1 KiB and a stride in
// between) and at a stride through the data: every cut must fail with a
// truncation or range error, except cuts after the last tensor's data
// (inside trailing padding), which are complete files.
func TestEveryPrefix(t *testing.T) {
	for _, path := range []string{storiesPath, tinyPath, spmPath, gpt2Path} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			full, err := Parse(raw)
			require.NoError(t, err)
			dataEnd := int64(len(raw))
			if len(full.Tensors) > 0 {
				dataEnd = 0
				for i := range full.Tensors {
					ti := &full.Tensors[i]
					dataEnd = max(dataEnd, full.DataOffset+int64(ti.Offset+ti.Bytes()))
				}
			}
			hdr := min(full.DataOffset, int64(len(raw)))
			var cuts []int64
			for n := int64(0); n < hdr; n++ {
				if hdr < 64<<10 || n < 16<<10 || n >= hdr-1<<10 || n%997 == 0 {
					cuts = append(cuts, n)
				}
			}
			for n := hdr; n < int64(len(raw)); n += 997 {
				cuts = append(cuts, n)
			}
			cuts = append(cuts, int64(len(raw))-1)
			for _, n := range cuts {
				_, err := Parse(raw[:n])
				if n >= dataEnd {
					require.NoError(t, err, "prefix %d", n)
					continue
				}
				require.Error(t, err, "prefix %d", n)
				if !(errors.Is(err, ErrTruncated) || errors.Is(err, ErrRange)) {
					t.Fatalf("prefix %d: unexpected error %v", n, err)
				}
			}
		})
	}
}

func TestRangeErrorMessage(t *testing.T) {
	raw, err := os.ReadFile(storiesPath)
	require.NoError(t, err)
	_, err = Parse(raw[:152000])
	require.ErrorIs(t, err, ErrRange)
	require.Contains(t, err.Error(), `tensor "blk.0.attn_q.weight": data [142528, 158912) past end of file (152000 bytes)`)
}

func TestRoundTrip(t *testing.T) {
	nested := []Value{mustValue(t, []uint32{1, 2}), mustValue(t, []string{"a", ""}),
		mustValue(t, []Value{mustValue(t, []float64{1.5})})}
	kvs := []KV{
		{"general.alignment", mustValue(t, uint32(64))},
		{"u8", mustValue(t, uint8(200))}, {"i8", mustValue(t, int8(-3))},
		{"u16", mustValue(t, uint16(60000))}, {"i16", mustValue(t, int16(-30000))},
		{"u32", mustValue(t, uint32(4e9))}, {"i32", mustValue(t, int32(-2e9))},
		{"f32", mustValue(t, float32(3.25))}, {"bool", mustValue(t, true)},
		{"string", mustValue(t, "héllo")}, {"u64", mustValue(t, uint64(1<<63))},
		{"i64", mustValue(t, int64(-1<<62))}, {"f64", mustValue(t, 2.5e300)},
		{"int", mustValue(t, 7)},
		{"a.u8", mustValue(t, []uint8{1, 2, 3})}, {"a.i8", mustValue(t, []int8{-1, 1})},
		{"a.u16", mustValue(t, []uint16{1, 65535})}, {"a.i16", mustValue(t, []int16{-1})},
		{"a.u32", mustValue(t, []uint32{})}, {"a.i32", mustValue(t, []int32{-5, 5})},
		{"a.f32", mustValue(t, []float32{0.5, -0.25})}, {"a.bool", mustValue(t, []bool{true, false, true})},
		{"a.string", mustValue(t, []string{"x", "", "yz"})}, {"a.u64", mustValue(t, []uint64{1 << 40})},
		{"a.i64", mustValue(t, []int64{-1 << 40})}, {"a.f64", mustValue(t, []float64{1e-300})},
		{"a.nested", mustValue(t, nested)},
	}
	type tensor struct {
		name string
		typ  dtype.Type
		dims []uint64
	}
	tensors := []tensor{
		{"a", dtype.F32, []uint64{3, 5}},
		{"b", dtype.Q4_0, []uint64{64, 2}},
		{"c", dtype.F16, []uint64{7}},
		{"d", dtype.Q6_K, []uint64{256, 1, 2, 1}},
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, kv := range kvs {
		w.AddKV(kv.Key, kv.Value)
	}
	datas := make([][]byte, len(tensors))
	for i, tt := range tensors {
		n := int64(tensorBytesMust(t, tt.typ, tt.dims))
		w.AddTensor(tt.name, tt.typ, tt.dims, n)
		datas[i] = make([]byte, n)
		for j := range datas[i] {
			datas[i][j] = byte(j*7 + i)
		}
	}
	require.NoError(t, w.WriteHeader())
	for i, tt := range tensors {
		require.NoError(t, w.WriteTensorData(tt.name, datas[i]))
	}
	require.NoError(t, w.Close())

	f, err := Parse(buf.Bytes())
	require.NoError(t, err)
	require.EqualValues(t, 3, f.Version)
	require.EqualValues(t, 64, f.Alignment)
	require.Zero(t, f.DataOffset%64)
	require.Equal(t, kvs, f.KVs)
	require.Len(t, f.Tensors, len(tensors))
	for i, tt := range tensors {
		ti := f.Tensors[i]
		require.Equal(t, tt.name, ti.Name)
		require.Equal(t, tt.typ, ti.Type)
		require.Equal(t, tt.dims, ti.Dims)
		require.Zero(t, ti.Offset%64)
		got, err := f.TensorData(&ti)
		require.NoError(t, err)
		require.Equal(t, datas[i], got)
	}
}

// TestRewriteFixture copies the v1 stories file through the writer and
// checks that the v3 copy holds the same metadata and tensors.
func TestRewriteFixture(t *testing.T) {
	src, err := Open(storiesPath)
	require.NoError(t, err)
	defer src.Close()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, kv := range src.KVs {
		w.AddKV(kv.Key, kv.Value)
	}
	for _, ti := range src.Tensors {
		w.AddTensor(ti.Name, ti.Type, ti.Dims, int64(ti.Bytes()))
	}
	require.NoError(t, w.WriteHeader())
	for i := range src.Tensors {
		d, err := src.TensorData(&src.Tensors[i])
		require.NoError(t, err)
		require.NoError(t, w.WriteTensorData(src.Tensors[i].Name, d))
	}
	require.NoError(t, w.Close())
	dst, err := Parse(buf.Bytes())
	require.NoError(t, err)
	require.EqualValues(t, 3, dst.Version)
	require.Equal(t, src.KVs, dst.KVs)
	require.Len(t, dst.Tensors, len(src.Tensors))
	for i := range src.Tensors {
		a, b := &src.Tensors[i], &dst.Tensors[i]
		require.Equal(t, a.Name, b.Name)
		require.Equal(t, a.Dims, b.Dims)
		da, _ := src.TensorData(a)
		db, _ := dst.TensorData(b)
		require.Equal(t, da, db)
	}
}

func TestWriterMisuse(t *testing.T) {
	cases := []struct {
		name string
		run  func(w *Writer) error
	}{
		{"duplicate key", func(w *Writer) error { w.AddKV("k", "a"); w.AddKV("k", "b"); return w.WriteHeader() }},
		{"empty key", func(w *Writer) error { w.AddKV("", "a"); return w.WriteHeader() }},
		{"bad go type", func(w *Writer) error { w.AddKV("k", struct{}{}); return w.WriteHeader() }},
		{"int too big", func(w *Writer) error { w.AddKV("k", 1<<40); return w.WriteHeader() }},
		{"bad alignment", func(w *Writer) error { w.AddKV(KeyAlignment, uint32(48)); return w.WriteHeader() }},
		{"alignment wrong type", func(w *Writer) error { w.AddKV(KeyAlignment, uint64(64)); return w.WriteHeader() }},
		{"wrong size", func(w *Writer) error { w.AddTensor("t", dtype.F32, []uint64{4}, 15); return w.WriteHeader() }},
		{"bad shape", func(w *Writer) error { w.AddTensor("t", dtype.Q4_0, []uint64{16}, 9); return w.WriteHeader() }},
		{"duplicate tensor", func(w *Writer) error {
			w.AddTensor("t", dtype.F32, []uint64{1}, 4)
			w.AddTensor("t", dtype.F32, []uint64{1}, 4)
			return w.WriteHeader()
		}},
		{"out of order", func(w *Writer) error {
			w.AddTensor("a", dtype.F32, []uint64{1}, 4)
			w.AddTensor("b", dtype.F32, []uint64{1}, 4)
			_ = w.WriteHeader()
			return w.WriteTensorData("b", make([]byte, 4))
		}},
		{"data size", func(w *Writer) error {
			w.AddTensor("a", dtype.F32, []uint64{1}, 4)
			_ = w.WriteHeader()
			return w.WriteTensorData("a", make([]byte, 3))
		}},
		{"data before header", func(w *Writer) error {
			w.AddTensor("a", dtype.F32, []uint64{1}, 4)
			return w.WriteTensorData("a", make([]byte, 4))
		}},
		{"missing data", func(w *Writer) error {
			w.AddTensor("a", dtype.F32, []uint64{1}, 4)
			_ = w.WriteHeader()
			return w.Close()
		}},
		{"kv after header", func(w *Writer) error { _ = w.WriteHeader(); w.AddKV("k", "v"); return w.Close() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Error(t, c.run(NewWriter(&bytes.Buffer{})))
		})
	}
}

func mustValue(t *testing.T, x any) Value {
	t.Helper()
	v, err := ValueOf(x)
	require.NoError(t, err)
	return v
}

func tensorBytesMust(t *testing.T, typ dtype.Type, dims []uint64) uint64 {
	t.Helper()
	n, err := tensorBytes(typ, dims)
	require.NoError(t, err)
	return n
}
