// Package mmapfile maps model files read-only into memory, for the file
// format readers (runtime/format/gguf, runtime/format/safetensors), which
// keep their own error kinds and messages.
package mmapfile

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is returned for a path that is not a regular file (a
// directory, a device, a pipe) or is too large to map.
var ErrNotRegular = errors.New("not a regular file")

// SmallError is returned for a regular file shorter than the minimum.
type SmallError struct{ Size int64 }

func (e *SmallError) Error() string { return fmt.Sprintf("file of %d bytes", e.Size) }

// Map maps the whole file at path read-only and shared. A file shorter than
// min bytes gives a *SmallError (checked before ErrNotRegular's other
// causes, as the readers report them); open and stat errors come as they
// are, mmap's wrapped with "mmap". Unmap releases the mapping.
func Map(path string, min int64) ([]byte, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, ErrNotRegular
	}
	if st.Size() < min {
		return nil, &SmallError{Size: st.Size()}
	}
	if st.Size() > math.MaxInt {
		return nil, ErrNotRegular
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return data, nil
}

// Unmap releases a mapping Map made.
func Unmap(data []byte) error { return unix.Munmap(data) }
