// Package cuda drives NVIDIA GPUs through the CUDA driver API and compiles
// CUDA C at run time with NVRTC, without cgo.
//
// Both libraries are found at run time (dlopen through purego), so a memra
// binary built with CGO_ENABLED=0 runs anywhere and uses a GPU where one is
// present. [Available] says why not when there is none.
//
// The CUDA driver binds a context to an OS thread. All driver calls therefore
// run on one GPU worker goroutine locked to its thread: a [Device] owns that
// worker, and [Device.Do] runs a function on it with a [Ctx] whose methods
// make the driver calls. Every exported method of Device is safe to call from
// any goroutine; a Ctx is valid only inside the Do callback that received it.
//
// NVRTC needs no GPU: [LoadNVRTC] and [NVRTC.Compile] work on any machine that
// has the library, which is how CI compiles every generated kernel to PTX.
package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Sentinel errors. Driver and NVRTC failures wrap ErrDriver and ErrNVRTC with
// the function name and the library's own message.
var (
	// ErrNoLibrary means libcuda or libnvrtc could not be loaded.
	ErrNoLibrary = errors.New("cuda: library not found")
	// ErrNoDevice means the driver loaded but reports no usable GPU.
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrDriver is a failed CUDA driver call.
	ErrDriver = errors.New("cuda: driver error")
	// ErrNVRTC is a failed NVRTC call, including a kernel that does not compile.
	ErrNVRTC = errors.New("cuda: nvrtc error")
	// ErrClosed is returned by a Device after Close.
	ErrClosed = errors.New("cuda: device closed")
	// ErrArg is a bad argument (kernel argument type, buffer size, …).
	ErrArg = errors.New("cuda: bad argument")
)

// driverNames are tried in order to load the CUDA driver.
var driverNames = []string{"libcuda.so.1", "libcuda.so"}

// nvrtcNames are tried in order, newest first, by plain name (the loader's
// search path) and then in libDirs.
var nvrtcNames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}

// libDirs returns the extra folders searched for NVRTC: CUDA toolkits under
// /usr/local (newest version last in glob order, so reversed) and Debian's
// multiarch folder.
func libDirs() []string {
	var dirs []string
	if d := os.Getenv("MEMRA_NVRTC_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	matches, _ := filepath.Glob("/usr/local/cuda*/targets/x86_64-linux/lib")
	for i := len(matches) - 1; i >= 0; i-- {
		dirs = append(dirs, matches[i])
	}
	return append(dirs, "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu")
}

// dlopen loads the first library that opens from names, first by plain name,
// then from each of dirs. It returns the handle and the name that worked.
func dlopen(names, dirs []string) (uintptr, string, error) {
	var errs []string
	for _, n := range names {
		cands := []string{n}
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, n))
		}
		for _, c := range cands {
			if strings.Contains(c, "/") {
				if _, err := os.Stat(c); err != nil {
					continue
				}
			}
			h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				return h, c, nil
			}
			errs = append(errs, err.Error())
		}
	}
	msg := "tried " + strings.Join(names, ", ")
	if len(errs) > 0 {
		msg += ": " + errs[len(errs)-1]
	}
	return 0, "", fmt.Errorf("%w: %s", ErrNoLibrary, msg)
}

// symbols resolves each name in the table into its address, trying the
// alternatives (separated by '|') in order. Missing optional symbols (names
// starting with '?') are left zero.
func symbols(h uintptr, lib string, table map[string]*uintptr) error {
	for spec, dst := range table {
		optional := strings.HasPrefix(spec, "?")
		spec = strings.TrimPrefix(spec, "?")
		for _, name := range strings.Split(spec, "|") {
			if p, err := purego.Dlsym(h, name); err == nil && p != 0 {
				*dst = p
				break
			}
		}
		if *dst == 0 && !optional {
			return fmt.Errorf("%w: %s has no symbol %s", ErrNoLibrary, lib, spec)
		}
	}
	return nil
}

// call invokes a C function returning an int status code. Pointers converted
// to uintptr in the call expression are kept alive and on the heap for the
// duration of the call.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int {
	r, _, _ := purego.SyscallN(fn, args...)
	return int(int32(r))
}

// cstring returns a NUL-terminated copy of s.
func cstring(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// gostring copies the NUL-terminated C string at p. p comes from the C
// library and points outside the Go heap.
func gostring(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// bptr returns the address of b's first element, for a call argument.
func bptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// puregoCall calls a C function and returns its raw results.
//
//go:uintptrescapes
func puregoCall(fn uintptr, args ...uintptr) (uintptr, uintptr, uintptr) {
	return purego.SyscallN(fn, args...)
}
