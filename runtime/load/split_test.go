package load

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/format/gguf"
)

// writeSplit writes the GGUF file at src as n shards PREFIX-0000i-of-0000n.gguf in dir.
func writeSplit(t *testing.T, src, dir, prefix string, n int) []string {
	t.Helper()
	f, err := gguf.Open(src)
	require.NoError(t, err)
	defer f.Close()
	var paths []string
	var files []*os.File
	err = gguf.WriteSplit(f, n, func(i int) (io.Writer, error) {
		p := filepath.Join(dir, gguf.SplitName(prefix, i, n))
		paths = append(paths, p)
		fd, err := os.Create(p)
		files = append(files, fd)
		return fd, err
	})
	for _, fd := range files {
		require.NoError(t, fd.Close())
	}
	require.NoError(t, err)
	return paths
}

func TestSplitGGUF(t *testing.T) {
	whole, err := Open(storiesPath)
	require.NoError(t, err)
	defer whole.Close()
	for _, n := range []int{2, 3} {
		dir := t.TempDir()
		paths := writeSplit(t, storiesPath, dir, "stories", n)
		require.Len(t, paths, n)
		for _, p := range paths { // any shard opens the whole model
			m, err := Open(p)
			require.NoError(t, err, p)
			require.Equal(t, paths[0], m.Path)
			require.Equal(t, whole.HParams, m.HParams)
			require.Equal(t, whole.Names(), m.Names())
			for _, name := range whole.Names() {
				a, err := whole.Tensors[name].Data()
				require.NoError(t, err)
				b, err := m.Tensors[name].Data()
				require.NoError(t, err)
				require.Equal(t, a, b, name)
			}
			require.NotNil(t, m.Tokenizer)
			require.NoError(t, m.Close())
		}
		// every shard carries only its own tensors
		total := 0
		for i, p := range paths {
			f, err := gguf.Open(p)
			require.NoError(t, err)
			no, count, tensors, ok, err := f.SplitInfo()
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []int{i, n, len(whole.Names())}, []int{no, count, tensors})
			require.NotEmpty(t, f.Tensors)
			total += len(f.Tensors)
			if i > 0 {
				_, has := f.String("general.architecture")
				require.False(t, has, "metadata only in the first shard")
			}
			f.Close()
		}
		require.Equal(t, len(whole.Names()), total)
	}
}

func TestSplitGGUFErrors(t *testing.T) {
	t.Run("missing shard", func(t *testing.T) {
		dir := t.TempDir()
		paths := writeSplit(t, storiesPath, dir, "m", 3)
		require.NoError(t, os.Remove(paths[2]))
		_, err := Open(paths[0])
		require.ErrorContains(t, err, "shard 3 of 3")
	})
	t.Run("renamed shard", func(t *testing.T) {
		dir := t.TempDir()
		paths := writeSplit(t, storiesPath, dir, "m", 2)
		renamed := filepath.Join(dir, "model.gguf")
		require.NoError(t, os.Rename(paths[0], renamed))
		_, err := Open(renamed)
		require.ErrorIs(t, err, ErrFormat)
	})
	t.Run("shards of two models", func(t *testing.T) {
		dir := t.TempDir()
		a := writeSplit(t, storiesPath, dir, "a", 2)
		other := writeSplit(t, storiesPath, t.TempDir(), "b", 3)
		require.NoError(t, os.Rename(other[1], a[1])) // shard 2 of 3 in place of shard 2 of 2
		_, err := Open(a[0])
		require.ErrorIs(t, err, ErrMetadata)
	})
}
