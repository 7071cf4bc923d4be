package gguf

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// enc builds GGUF bytes by hand, so tests can write what the Writer refuses.
type enc struct {
	b  []byte
	v1 bool
}

func (e *enc) u32(v uint32) *enc { e.b = binary.LittleEndian.AppendUint32(e.b, v); return e }
func (e *enc) u64(v uint64) *enc { e.b = binary.LittleEndian.AppendUint64(e.b, v); return e }
func (e *enc) word(v uint64) *enc {
	if e.v1 {
		return e.u32(uint32(v))
	}
	return e.u64(v)
}
func (e *enc) str(s string) *enc  { e.word(uint64(len(s))); e.b = append(e.b, s...); return e }
func (e *enc) raw(p ...byte) *enc { e.b = append(e.b, p...); return e }

// tinfo is a tensor info to encode.
type tinfo struct {
	name string
	dims []uint64
	typ  uint32
	off  uint64
}

// build returns a v3 file: the given counts (which may lie), kv bytes,
// tensor infos, padding to 32 and dataLen zero bytes.
func build(nt, nkv uint64, kvs func(e *enc), ts []tinfo, dataLen int) []byte {
	e := &enc{}
	e.u32(Magic).u32(3).u64(nt).u64(nkv)
	if kvs != nil {
		kvs(e)
	}
	for _, t := range ts {
		e.str(t.name).u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			e.u64(d)
		}
		e.u32(t.typ).u64(t.off)
	}
	for len(e.b)%32 != 0 {
		e.b = append(e.b, 0)
	}
	return append(e.b, make([]byte, dataLen)...)
}

func f32Tensor(name string, n, off uint64) tinfo {
	return tinfo{name: name, dims: []uint64{n}, typ: 0, off: off}
}

func TestCorrupt(t *testing.T) {
	two := []tinfo{f32Tensor("a", 8, 0), f32Tensor("b", 8, 32)}
	kv := func(key string, typ uint32, val func(e *enc)) func(e *enc) {
		return func(e *enc) { e.str(key).u32(typ); val(e) }
	}
	cases := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"valid", build(2, 0, nil, two, 64), nil, ""},
		{"bad magic", append([]byte("GGML"), build(0, 0, nil, nil, 0)[4:]...), ErrMagic, "magic"},
		{"short magic", []byte("GG"), ErrTruncated, "magic"},
		{"version 0", (&enc{}).u32(Magic).u32(0).u64(0).u64(0).b, ErrVersion, "0"},
		{"version 4", (&enc{}).u32(Magic).u32(4).u64(0).u64(0).b, ErrVersion, "4"},
		{"big endian", (&enc{}).u32(Magic).raw(0, 0, 0, 3).u64(0).u64(0).b, ErrBigEndian, "0x3000000"},
		{"huge tensor count", build(1<<60, 0, nil, nil, 0), ErrTruncated, "tensor_count 1152921504606846976"},
		{"huge kv count", build(0, 1<<60, nil, nil, 0), ErrTruncated, "kv_count"},
		{"counts together too big", build(1, 2, kv("k", 0, func(e *enc) { e.raw(1) }), nil, 0), ErrTruncated, "tensor infos"},
		{"huge key length", build(0, 1, func(e *enc) { e.u64(1 << 60) }, nil, 64), ErrTruncated, "key 0 length"},
		{"huge string value", build(0, 1, kv("k", 8, func(e *enc) { e.u64(1 << 60) }), nil, 64), ErrTruncated, `key "k" length`},
		{"huge array count", build(0, 1, kv("k", 9, func(e *enc) { e.u32(0).u64(1 << 40) }), nil, 64), ErrTruncated, "array count 1099511627776"},
		{"huge string array", build(0, 1, kv("k", 9, func(e *enc) { e.u32(8).u64(1 << 40) }), nil, 64), ErrTruncated, "array count"},
		{"huge nested array", build(0, 1, kv("k", 9, func(e *enc) { e.u32(9).u64(1 << 40) }), nil, 64), ErrTruncated, "array count"},
		{"huge tensor name", build(1, 0, func(e *enc) { e.u64(1 << 60) }, nil, 64), ErrTruncated, "tensor 0 name length"},
		{"unknown value type", build(0, 1, kv("k", 13, func(e *enc) { e.u64(0) }), nil, 0), ErrValueType, `key "k": value type 13 at offset 33`},
		{"unknown element type", build(0, 1, kv("k", 9, func(e *enc) { e.u32(99).u64(0) }), nil, 0), ErrValueType, "element type 99"},
		{"bad bool", build(0, 1, kv("k", 7, func(e *enc) { e.raw(2) }), nil, 0), ErrCorrupt, "bool byte 2"},
		{"bad bool in array", build(0, 1, kv("k", 9, func(e *enc) { e.u32(7).u64(2).raw(1, 5) }), nil, 0), ErrCorrupt, "k\"[1]"},
		{"empty key", build(0, 1, kv("", 0, func(e *enc) { e.raw(1) }), nil, 0), ErrCorrupt, "empty"},
		{"duplicate key", build(0, 2, func(e *enc) { e.str("k").u32(0).raw(1).str("k").u32(0).raw(2) }, nil, 0), ErrDuplicate, `"k"`},
		{"too deep", build(0, 1, kv("k", 9, func(e *enc) {
			for range 20 {
				e.u32(9).u64(1)
			}
		}), nil, 0), ErrCorrupt, "nested"},
		{"alignment not power of two", build(0, 1, kv(KeyAlignment, 4, func(e *enc) { e.u32(48) }), nil, 0), ErrAlignment, "48"},
		{"alignment zero", build(0, 1, kv(KeyAlignment, 4, func(e *enc) { e.u32(0) }), nil, 0), ErrAlignment, "power of two"},
		{"alignment not u32", build(0, 1, kv(KeyAlignment, 10, func(e *enc) { e.u64(64) }), nil, 0), ErrAlignment, "u64"},
		{"offset past end", build(1, 0, nil, []tinfo{f32Tensor("blk.3.attn_q.weight", 8, 1024)}, 32), ErrRange,
			`tensor "blk.3.attn_q.weight": data [1120, 1152) past end of file (128 bytes)`},
		{"huge offset", build(1, 0, nil, []tinfo{f32Tensor("t", 8, 1<<63+1<<62)}, 32), ErrRange, "past end of file"},
		{"size past end", build(1, 0, nil, []tinfo{f32Tensor("t", 9, 0)}, 32), ErrRange, "past end"},
		{"misaligned offset", build(2, 0, nil, []tinfo{f32Tensor("a", 1, 0), f32Tensor("b", 1, 4)}, 64), ErrAlignment, `tensor "b": offset 4`},
		{"overlap", build(2, 0, nil, []tinfo{f32Tensor("a", 16, 0), f32Tensor("b", 8, 32)}, 96), ErrOverlap, `"a" [96, 160) and tensor "b" [128, 160)`},
		{"same offset", build(2, 0, nil, []tinfo{f32Tensor("a", 1, 0), f32Tensor("b", 1, 0)}, 64), ErrOverlap, `"a"`},
		{"duplicate tensor", build(2, 0, nil, []tinfo{f32Tensor("a", 1, 0), f32Tensor("a", 1, 32)}, 64), ErrDuplicate, `"a"`},
		{"five dims", build(1, 0, nil, []tinfo{{"t", []uint64{1, 1, 1, 1, 1}, 0, 0}}, 32), ErrShape, "5 dimensions"},
		{"zero n_dims", build(1, 0, nil, []tinfo{{"t", nil, 0, 0}}, 32), ErrShape, "0 dimensions"},
		{"zero dim", build(1, 0, nil, []tinfo{{"t", []uint64{4, 0}, 0, 0}}, 32), ErrShape, "dimension 1 is zero"},
		{"dims overflow", build(1, 0, nil, []tinfo{{"t", []uint64{1 << 40, 1 << 40}, 0, 0}}, 32), ErrShape, "overflow"},
		{"bytes overflow", build(1, 0, nil, []tinfo{{"t", []uint64{1 << 62, 1}, 0, 0}}, 32), ErrShape, "overflow"},
		{"not whole blocks", build(1, 0, nil, []tinfo{{"t", []uint64{16, 2}, 2, 0}}, 32), ErrShape, "Q4_0"},
		{"unknown tensor type", build(1, 0, nil, []tinfo{{"t", []uint64{32}, 4, 0}}, 32), ErrTensorType, `tensor "t": type 4`},
		{"empty tensor name", build(1, 0, nil, []tinfo{f32Tensor("", 1, 0)}, 32), ErrCorrupt, "empty name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse(c.data)
			if c.want == nil {
				require.NoError(t, err)
				require.NotNil(t, f)
				return
			}
			require.ErrorIs(t, err, c.want)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestV1Strings(t *testing.T) {
	e := &enc{v1: true}
	e.u32(Magic).u32(1).u32(1).u32(2)
	e.str("name").u32(8).str("v1 file")
	e.str("list").u32(9).u32(8).u32(2).str("a").str("bc")
	e.str("w").u32(2).u32(2).u32(3).u32(0).u64(0)
	for len(e.b)%32 != 0 {
		e.raw(0)
	}
	e.raw(make([]byte, 24)...)
	f, err := Parse(e.b)
	require.NoError(t, err)
	s, _ := f.String("name")
	require.Equal(t, "v1 file", s)
	l, _ := f.Strings("list")
	require.Equal(t, []string{"a", "bc"}, l)
	require.Equal(t, []uint64{2, 3}, f.Tensors[0].Dims)
	// A v1 array count of 2^31 must not allocate either.
	e = &enc{v1: true}
	e.u32(Magic).u32(1).u32(0).u32(1).str("k").u32(9).u32(6).u32(1 << 31)
	_, err = Parse(e.b)
	require.ErrorIs(t, err, ErrTruncated)
}

// TestHugeArrayDoesNotAllocate parses headers that claim 2^40-element
// arrays and checks that the failed parse allocated almost nothing.
func TestHugeArrayDoesNotAllocate(t *testing.T) {
	for _, elem := range []uint32{0, 4, 8, 9, 12} {
		data := build(0, 1, func(e *enc) { e.str("k").u32(9).u32(elem).u64(1 << 40) }, nil, 4096)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Parse(data)
		runtime.ReadMemStats(&after)
		require.ErrorIs(t, err, ErrTruncated)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "element type %d", elem)
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []string{storiesPath, tinyPath, spmPath} {
		raw, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(raw[:min(len(raw), 12<<10)])
	}
	f.Add(build(2, 0, nil, []tinfo{f32Tensor("a", 8, 0), f32Tensor("b", 8, 32)}, 64))
	f.Add(build(0, 2, func(e *enc) {
		e.str("a").u32(9).u32(9).u64(1).u32(8).u64(1).str("x")
		e.str(KeyAlignment).u32(4).u32(64)
	}, nil, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses must expose valid tensors and survive a rewrite.
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			d, err := file.TensorData(ti)
			if err != nil || uint64(len(d)) != ti.Bytes() {
				t.Fatalf("tensor %q: %d bytes, err %v", ti.Name, len(d), err)
			}
		}
		for _, kv := range file.KVs {
			_, _ = file.Uint(kv.Key)
			_, _ = file.Int32s(kv.Key)
			_, _ = file.Float32s(kv.Key)
			_ = kv.Value.String()
		}
		// Rewriting it gives a file that reads back the same: writing the
		// reread file again gives the same bytes (NaN-safe, unlike comparing
		// values).
		first := rewrite(t, file)
		again, err := Parse(first)
		require.NoError(t, err)
		require.Len(t, again.KVs, len(file.KVs))
		require.Len(t, again.Tensors, len(file.Tensors))
		require.True(t, bytes.Equal(first, rewrite(t, again)))
	})
}

// rewrite copies f through the Writer.
func rewrite(t *testing.T, f *File) []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, kv := range f.KVs {
		w.AddKV(kv.Key, kv.Value)
	}
	for _, ti := range f.Tensors {
		w.AddTensor(ti.Name, ti.Type, ti.Dims, int64(ti.Bytes()))
	}
	require.NoError(t, w.WriteHeader())
	for i := range f.Tensors {
		d, err := f.TensorData(&f.Tensors[i])
		require.NoError(t, err)
		require.NoError(t, w.WriteTensorData(f.Tensors[i].Name, d))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// TestOpenNotAFile: a directory and a file shorter than the magic give the
// package's error kinds, naming the path.
func TestOpenNotAFile(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	require.ErrorIs(t, err, ErrMagic)
	require.ErrorContains(t, err, "not a regular file")
	short := dir + "/short.gguf"
	require.NoError(t, os.WriteFile(short, []byte("GG"), 0o644))
	_, err = Open(short)
	require.ErrorIs(t, err, ErrTruncated)
	require.ErrorContains(t, err, "file of 2 bytes")
}
