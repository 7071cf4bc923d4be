package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Cache stores compiled module images on disk, keyed by
// sha256(source, options, target, NVRTC version), so a model's kernels are
// compiled once per machine.
type Cache struct {
	Dir string
	NV  *NVRTC
}

// DefaultCacheDir is os.UserCacheDir()/memra/cubin.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cuda: cache dir: %w", err)
	}
	return filepath.Join(d, "memra", "cubin"), nil
}

// NewCache returns a cache in dir (DefaultCacheDir when empty) that compiles
// with nv.
func NewCache(dir string, nv *NVRTC) (*Cache, error) {
	if dir == "" {
		var err error
		if dir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	return &Cache{Dir: dir, NV: nv}, nil
}

// Key returns the cache key of a compilation.
func (c *Cache) Key(source, arch string, options []string) string {
	h := sha256.New()
	major, minor := c.NV.Version()
	fmt.Fprintf(h, "nvrtc %d.%d\x00target %s\x00", major, minor, arch)
	for _, o := range options {
		fmt.Fprintf(h, "opt %s\x00", o)
	}
	h.Write([]byte(source))
	return hex.EncodeToString(h.Sum(nil))
}

// Compile returns the module image (cubin for sm_XX targets, PTX for
// compute_XX) for source on arch, from the cache or by compiling and storing
// it. hit reports a cache hit. A failure to write the cache is not an error.
func (c *Cache) Compile(source, name, arch string, options []string) (image []byte, hit bool, err error) {
	key := c.Key(source, arch, options)
	ext := ".cubin"
	if strings.HasPrefix(arch, "compute_") {
		ext = ".ptx"
	}
	path := filepath.Join(c.Dir, key[:2], key+ext)
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, true, nil
	}
	opts := append([]string{ArchOption(arch)}, options...)
	out, err := c.NV.Compile(source, name, opts)
	if err != nil {
		return nil, false, err
	}
	image = out.Image()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		tmp := path + ".tmp" + fmt.Sprint(os.Getpid())
		if os.WriteFile(tmp, image, 0o644) == nil {
			_ = os.Rename(tmp, path)
		}
	}
	return image, false, nil
}
