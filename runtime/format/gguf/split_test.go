package gguf

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitNames(t *testing.T) {
	require.Equal(t, "m-Q4_K_M-00002-of-00003.gguf", SplitName("m-Q4_K_M", 1, 3))
	cases := []struct {
		name   string
		prefix string
		i, n   int
		ok     bool
	}{
		{"m-Q4_K_M-00002-of-00003.gguf", "m-Q4_K_M", 1, 3, true},
		{"a/b-00001-of-00001.gguf", "a/b", 0, 1, true},
		{"m-00004-of-00003.gguf", "", 0, 0, false},
		{"m-00000-of-00003.gguf", "", 0, 0, false},
		{"m-0001-of-0003.gguf", "", 0, 0, false},
		{"m.gguf", "", 0, 0, false},
	}
	for _, c := range cases {
		prefix, i, n, ok := ParseSplitName(c.name)
		require.Equal(t, c.ok, ok, c.name)
		if ok {
			require.Equal(t, []any{c.prefix, c.i, c.n}, []any{prefix, i, n}, c.name)
		}
	}
}

func TestWriteSplitBalances(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.AddKV("general.architecture", "llama")
	sizes := []int{400, 16, 16, 16, 400, 16}
	for i, s := range sizes {
		w.AddTensor(string(rune('a'+i)), 0, []uint64{uint64(s / 4)}, int64(s)) // F32
	}
	require.NoError(t, w.WriteHeader())
	for i, s := range sizes {
		require.NoError(t, w.WriteTensorData(string(rune('a'+i)), make([]byte, s)))
	}
	require.NoError(t, w.Close())
	f, err := Parse(buf.Bytes())
	require.NoError(t, err)
	for n := 2; n <= len(sizes); n++ {
		shards := make([]*bytes.Buffer, n)
		require.NoError(t, WriteSplit(f, n, func(i int) (io.Writer, error) {
			shards[i] = &bytes.Buffer{}
			return shards[i], nil
		}))
		seen := 0
		for i, b := range shards {
			sf, err := Parse(b.Bytes())
			require.NoError(t, err)
			no, count, total, ok, err := sf.SplitInfo()
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []int{i, n, len(sizes)}, []int{no, count, total})
			require.NotEmpty(t, sf.Tensors, "shard %d of %d", i, n)
			for _, ti := range sf.Tensors {
				require.Equal(t, string(rune('a'+seen)), ti.Name, "tensors stay in order")
				seen++
			}
		}
		require.Equal(t, len(sizes), seen)
	}
	require.Error(t, WriteSplit(f, 1, nil))
	require.Error(t, WriteSplit(f, len(sizes)+1, nil))
}
