package mmapfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMap(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(path, []byte("hello world"), 0o644))
	data, err := Map(path, 4)
	require.NoError(t, err)
	require.Equal(t, "hello world", string(data))
	require.NoError(t, Unmap(data))

	_, err = Map(path, 12)
	var small *SmallError
	require.True(t, errors.As(err, &small), "%v", err)
	require.EqualValues(t, 11, small.Size)

	_, err = Map(dir, 4)
	require.ErrorIs(t, err, ErrNotRegular)

	_, err = Map(filepath.Join(dir, "missing"), 4)
	require.ErrorIs(t, err, os.ErrNotExist)
}
