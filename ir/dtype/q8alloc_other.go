//go:build !linux

package dtype

// allocPacked returns n zero bytes for p's tiles.
func allocPacked(_ *Packed, n int) []byte { return make([]byte, n) }
