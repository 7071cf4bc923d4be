package dtype

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeMin is the size from which packed weights get memory of their own
// in huge pages.
const hugeMin = 4 << 20

// allocPacked returns n zero bytes for p's tiles. From hugeMin on they are
// an anonymous mapping aligned to 2 MiB and advised to be backed by huge
// pages: a decode step streams every matrix once, and with 4 KiB pages the
// page walks cost a fifth of the bandwidth (two threads streaming Q4_K,
// Q6_K and Q8_0 matrices of 200–360 MB: 20–24 GB/s in 4 KiB pages, 23–30
// in huge pages, on this workplace's Xeon). The mapping is released when p
// is no longer reachable: p.Data must not outlive p.
func allocPacked(p *Packed, n int) []byte {
	const huge = 2 << 20
	if n < hugeMin {
		return make([]byte, n)
	}
	size := (n + huge - 1) &^ (huge - 1)
	m, err := unix.Mmap(-1, 0, size+huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return make([]byte, n)
	}
	off := 0
	if a := int(uintptr(unsafe.Pointer(&m[0])) & (huge - 1)); a != 0 {
		off = huge - a
	}
	_ = unix.Madvise(m[off:off+size], unix.MADV_HUGEPAGE) // best effort: no huge pages is only slower
	runtime.AddCleanup(p, func(m []byte) { _ = unix.Munmap(m) }, m)
	return m[off : off+n : off+n]
}
