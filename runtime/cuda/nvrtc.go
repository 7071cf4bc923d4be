package cuda

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// NVRTC is a loaded NVRTC library. Its methods are safe for concurrent use.
type NVRTC struct {
	lib          string
	major, minor int

	parallel bool       // Concurrent
	mu       sync.Mutex // serialises compilations where !Concurrent()

	nvrtcVersion, nvrtcGetErrorString          uintptr
	nvrtcCreateProgram, nvrtcDestroyProgram    uintptr
	nvrtcCompileProgram                        uintptr
	nvrtcGetProgramLogSize, nvrtcGetProgramLog uintptr
	nvrtcGetPTXSize, nvrtcGetPTX               uintptr
	nvrtcGetCUBINSize, nvrtcGetCUBIN           uintptr
}

var (
	nvOnce sync.Once
	nv     *NVRTC
	nvErr  error
)

// LoadNVRTC loads the newest NVRTC it finds (libnvrtc.so.13, .12, .11.2,
// unversioned), once per process. MEMRA_NVRTC_DIR adds a folder to search;
// MEMRA_NO_NVRTC=1 finds none (a process serving a compiled artifact can
// prove it compiles nothing).
func LoadNVRTC() (*NVRTC, error) {
	nvOnce.Do(func() {
		if os.Getenv("MEMRA_NO_NVRTC") == "1" {
			nvErr = fmt.Errorf("%w: NVRTC is turned off (MEMRA_NO_NVRTC=1)", ErrNoLibrary)
			return
		}
		h, name, err := dlopen(nvrtcNames, libDirs())
		if err != nil {
			nvErr = err
			return
		}
		n := &NVRTC{lib: name}
		err = symbols(h, name, map[string]*uintptr{
			"nvrtcVersion":           &n.nvrtcVersion,
			"nvrtcGetErrorString":    &n.nvrtcGetErrorString,
			"nvrtcCreateProgram":     &n.nvrtcCreateProgram,
			"nvrtcDestroyProgram":    &n.nvrtcDestroyProgram,
			"nvrtcCompileProgram":    &n.nvrtcCompileProgram,
			"nvrtcGetProgramLogSize": &n.nvrtcGetProgramLogSize,
			"nvrtcGetProgramLog":     &n.nvrtcGetProgramLog,
			"nvrtcGetPTXSize":        &n.nvrtcGetPTXSize,
			"nvrtcGetPTX":            &n.nvrtcGetPTX,
			"?nvrtcGetCUBINSize":     &n.nvrtcGetCUBINSize,
			"?nvrtcGetCUBIN":         &n.nvrtcGetCUBIN,
		})
		if err != nil {
			nvErr = err
			return
		}
		var major, minor int32
		if r := call(n.nvrtcVersion, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))); r != 0 {
			nvErr = n.check("nvrtcVersion", r)
			return
		}
		n.major, n.minor = int(major), int(minor)
		switch v := os.Getenv("MEMRA_NVRTC_PARALLEL"); v {
		case "", "0":
		case "1":
			n.parallel = n.major >= 12
		default:
			nvErr = fmt.Errorf("%w: MEMRA_NVRTC_PARALLEL=%q: want 0 or 1", ErrArg, v)
			return
		}
		nv = n
	})
	return nv, nvErr
}

// Version returns NVRTC's major and minor version (e.g. 11, 8).
func (n *NVRTC) Version() (major, minor int) { return n.major, n.minor }

// Concurrent reports whether Compile runs compilations from several
// goroutines at once (the autotuner's --parallel) instead of one at a
// time: with MEMRA_NVRTC_PARALLEL=1 and NVRTC 12 or later, whose programs
// are meant to compile independently on separate threads. NVRTC 11.x
// (CI's Debian 11.8) makes no such promise and always compiles one
// program at a time. Off by default until it has run on a GPU machine
// (scripts/gpu-battery.sh tune runs its test first).
func (n *NVRTC) Concurrent() bool { return n.parallel }

// Library returns the path or name the library was loaded from.
func (n *NVRTC) Library() string { return n.lib }

func (n *NVRTC) check(fn string, r int) error {
	if r == 0 {
		return nil
	}
	r2, _, _ := puregoCall(n.nvrtcGetErrorString, uintptr(r))
	return fmt.Errorf("%w: %s: %s (nvrtcResult %d)", ErrNVRTC, fn, gostring(r2), r)
}

// Compiled is the output of one NVRTC compilation.
type Compiled struct {
	PTX   []byte // NUL-terminated PTX text
	CUBIN []byte // machine code; nil for a virtual (compute_XX) target
	Log   string // compiler log (warnings), possibly empty
}

// Image returns what cuModuleLoadData should load: the cubin when there is
// one, else the PTX.
func (c *Compiled) Image() []byte {
	if len(c.CUBIN) > 0 {
		return c.CUBIN
	}
	return c.PTX
}

// ArchOption returns the NVRTC option selecting arch: "sm_90a" compiles to a
// cubin for that GPU, "compute_90" to PTX only.
func ArchOption(arch string) string { return "--gpu-architecture=" + arch }

// Compile compiles CUDA C source (named name in messages) with options, for
// example ArchOption("sm_90a") and "--std=c++17". A compile error returns
// ErrNVRTC with the log.
func (n *NVRTC) Compile(source, name string, options []string) (*Compiled, error) {
	if !n.Concurrent() {
		n.mu.Lock()
		defer n.mu.Unlock()
	}
	src, cname := cstring(source), cstring(name)
	var prog uintptr
	r := call(n.nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)), uintptr(bptr(src)), uintptr(bptr(cname)), 0, 0, 0)
	if err := n.check("nvrtcCreateProgram", r); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer call(n.nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog)))

	opts := make([][]byte, len(options))
	optPtrs := make([]unsafe.Pointer, len(options)+1)
	for i, o := range options {
		opts[i] = cstring(o)
		optPtrs[i] = bptr(opts[i])
	}
	rc := call(n.nvrtcCompileProgram, prog, uintptr(len(options)), uintptr(unsafe.Pointer(&optPtrs[0])))
	runtime.KeepAlive(opts)
	out := &Compiled{Log: n.log(prog)}
	if err := n.check("nvrtcCompileProgram", rc); err != nil {
		return out, fmt.Errorf("%s (%s): %w\n%s", name, strings.Join(options, " "), err, out.Log)
	}
	var size uint64
	if err := n.check("nvrtcGetPTXSize", call(n.nvrtcGetPTXSize, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return out, err
	}
	out.PTX = make([]byte, size)
	if err := n.check("nvrtcGetPTX", call(n.nvrtcGetPTX, prog, uintptr(bptr(out.PTX)))); err != nil {
		return out, err
	}
	if n.nvrtcGetCUBINSize != 0 {
		size = 0
		if call(n.nvrtcGetCUBINSize, prog, uintptr(unsafe.Pointer(&size))) == 0 && size > 0 {
			out.CUBIN = make([]byte, size)
			if err := n.check("nvrtcGetCUBIN", call(n.nvrtcGetCUBIN, prog, uintptr(bptr(out.CUBIN)))); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

func (n *NVRTC) log(prog uintptr) string {
	var size uint64
	if call(n.nvrtcGetProgramLogSize, prog, uintptr(unsafe.Pointer(&size))) != 0 || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	if call(n.nvrtcGetProgramLog, prog, uintptr(bptr(b))) != 0 {
		return ""
	}
	return strings.TrimRight(string(b), "\x00\n ")
}

// CompileGateNotice is the line `make test` prints when NVRTC cannot be
// loaded here, which made the NVRTC compile gate (the kernel compile tests
// of codegen and runtime/cuda) skip: go test shows skips only with -v.
// It is "" when NVRTC loads.
func CompileGateNotice() string {
	_, err := LoadNVRTC()
	return compileGateNotice(err)
}

// compileGateNotice is CompileGateNotice for LoadNVRTC's error.
func compileGateNotice(err error) string {
	if err == nil {
		return ""
	}
	reason := strings.ReplaceAll(err.Error(), "\n", " ")
	return "make test: the NVRTC compile gate was skipped (" + reason + "); " +
		".ci/run installs Debian's libnvrtc11.2 (non-free) to run it, or set MEMRA_NVRTC_DIR to a folder with libnvrtc.so"
}
