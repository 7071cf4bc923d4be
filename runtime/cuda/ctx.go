package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// DevicePtr is a device memory address (CUdeviceptr).
type DevicePtr uint64

// Stream is a CUDA stream; 0 is the legacy default stream.
type Stream uintptr

// Event is a CUDA event.
type Event uintptr

// Module is a loaded CUDA module (cubin or PTX).
type Module uintptr

// Function is a kernel entry point of a loaded module.
type Function uintptr

// Graph is a captured CUDA graph.
type Graph uintptr

// GraphExec is an instantiated, launchable CUDA graph.
type GraphExec uintptr

// Alloc allocates n bytes of device memory.
func (c *Ctx) Alloc(n int) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("%w: alloc of %d bytes", ErrArg, n)
	}
	var p DevicePtr
	err := c.d.check("cuMemAlloc", call(c.d.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	return p, err
}

// Free releases device memory from Alloc.
func (c *Ctx) Free(p DevicePtr) error {
	return c.d.check("cuMemFree", call(c.d.cuMemFree, uintptr(p)))
}

// MemInfo returns the free and total device memory in bytes.
func (c *Ctx) MemInfo() (free, total int64, err error) {
	var f, t uint64
	err = c.d.check("cuMemGetInfo", call(c.d.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))))
	return int64(f), int64(t), err
}

// Memset sets n bytes at p to v.
func (c *Ctx) Memset(p DevicePtr, v byte, n int) error {
	return c.d.check("cuMemsetD8", call(c.d.cuMemsetD8, uintptr(p), uintptr(v), uintptr(n)))
}

// CopyHtoD copies src to device memory at dst (synchronous).
func (c *Ctx) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	r := call(c.d.cuMemcpyHtoD, uintptr(dst), uintptr(bptr(src)), uintptr(len(src)))
	return c.d.check("cuMemcpyHtoD", r)
}

// CopyDtoH copies len(dst) bytes from device memory at src (synchronous).
func (c *Ctx) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	r := call(c.d.cuMemcpyDtoH, uintptr(bptr(dst)), uintptr(src), uintptr(len(dst)))
	return c.d.check("cuMemcpyDtoH", r)
}

// CopyDtoD copies n bytes between device buffers.
func (c *Ctx) CopyDtoD(dst, src DevicePtr, n int) error {
	return c.d.check("cuMemcpyDtoD", call(c.d.cuMemcpyDtoD, uintptr(dst), uintptr(src), uintptr(n)))
}

// CopyHtoDAsync queues a copy of src to dst on s. src must stay unchanged
// and reachable until the stream has passed the copy (synchronise s first).
func (c *Ctx) CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	r := call(c.d.cuMemcpyHtoDAsync, uintptr(dst), uintptr(bptr(src)), uintptr(len(src)), uintptr(s))
	return c.d.check("cuMemcpyHtoDAsync", r)
}

// CopyDtoHAsync queues a copy from src into dst on s; dst is valid after the
// stream is synchronised.
func (c *Ctx) CopyDtoHAsync(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	r := call(c.d.cuMemcpyDtoHAsync, uintptr(bptr(dst)), uintptr(src), uintptr(len(dst)), uintptr(s))
	return c.d.check("cuMemcpyDtoHAsync", r)
}

// CopyDtoDAsync queues a device-to-device copy of n bytes on s.
func (c *Ctx) CopyDtoDAsync(dst, src DevicePtr, n int, s Stream) error {
	return c.d.check("cuMemcpyDtoDAsync", call(c.d.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// Synchronize waits for all work on the context.
func (c *Ctx) Synchronize() error {
	return c.d.check("cuCtxSynchronize", call(c.d.cuCtxSynchronize))
}

// NewStream creates a non-blocking stream (CU_STREAM_NON_BLOCKING).
func (c *Ctx) NewStream() (Stream, error) {
	var s Stream
	err := c.d.check("cuStreamCreate", call(c.d.cuStreamCreate, uintptr(unsafe.Pointer(&s)), 1))
	return s, err
}

// DestroyStream destroys s.
func (c *Ctx) DestroyStream(s Stream) error {
	return c.d.check("cuStreamDestroy", call(c.d.cuStreamDestroy, uintptr(s)))
}

// StreamSync waits for all work queued on s.
func (c *Ctx) StreamSync(s Stream) error {
	return c.d.check("cuStreamSynchronize", call(c.d.cuStreamSynchronize, uintptr(s)))
}

// NewEvent creates an event that records timing.
func (c *Ctx) NewEvent() (Event, error) {
	var e Event
	err := c.d.check("cuEventCreate", call(c.d.cuEventCreate, uintptr(unsafe.Pointer(&e)), 0))
	return e, err
}

// DestroyEvent destroys e.
func (c *Ctx) DestroyEvent(e Event) error {
	return c.d.check("cuEventDestroy", call(c.d.cuEventDestroy, uintptr(e)))
}

// Record records e on s.
func (c *Ctx) Record(e Event, s Stream) error {
	return c.d.check("cuEventRecord", call(c.d.cuEventRecord, uintptr(e), uintptr(s)))
}

// EventSync waits for e.
func (c *Ctx) EventSync(e Event) error {
	return c.d.check("cuEventSynchronize", call(c.d.cuEventSynchronize, uintptr(e)))
}

// Elapsed returns the milliseconds between two recorded, completed events.
func (c *Ctx) Elapsed(start, end Event) (float32, error) {
	var ms float32
	err := c.d.check("cuEventElapsedTime", call(c.d.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)))
	return ms, err
}

// LoadModule loads a cubin or a NUL-terminated PTX image.
func (c *Ctx) LoadModule(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("%w: empty module image", ErrArg)
	}
	var m Module
	err := c.d.check("cuModuleLoadData", call(c.d.cuModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(bptr(image))))
	runtime.KeepAlive(image)
	return m, err
}

// UnloadModule unloads m.
func (c *Ctx) UnloadModule(m Module) error {
	return c.d.check("cuModuleUnload", call(c.d.cuModuleUnload, uintptr(m)))
}

// Function looks up the kernel name in m.
func (c *Ctx) Function(m Module, name string) (Function, error) {
	var f Function
	cname := cstring(name)
	r := call(c.d.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(bptr(cname)))
	if err := c.d.check("cuModuleGetFunction", r); err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	return f, nil
}

// SetMaxDynamicShared lets f use up to n bytes of dynamic shared memory
// (needed above 48 KB).
func (c *Ctx) SetMaxDynamicShared(f Function, n int) error {
	const attrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	return c.d.check("cuFuncSetAttribute", call(c.d.cuFuncSetAttribute, uintptr(f), attrMaxDynamicShared, uintptr(n)))
}

// LaunchConfig is the geometry and options of one kernel launch.
type LaunchConfig struct {
	Grid, Block [3]uint32
	Shared      uint32 // dynamic shared memory bytes
	Stream      Stream
	// PDL launches with programmatic stream serialisation (sm_90+): the
	// kernel may start before its predecessor finishes and must execute
	// griddepcontrol.wait before reading the predecessor's output.
	PDL bool
}

// params packs kernel arguments into the void** array cuLaunchKernel takes.
// Each argument gets its own 8-byte heap slot. Supported types: DevicePtr,
// int32, uint32, int64, uint64, float32, int (as int32).
type params struct {
	slots []uint64
	ptrs  []unsafe.Pointer
}

func packParams(args []any) (*params, error) {
	p := &params{slots: make([]uint64, len(args)+1), ptrs: make([]unsafe.Pointer, len(args)+1)}
	for i, a := range args {
		var v uint64
		switch x := a.(type) {
		case DevicePtr:
			v = uint64(x)
		case int32:
			v = uint64(uint32(x))
		case int:
			if x < math.MinInt32 || x > math.MaxInt32 {
				return nil, fmt.Errorf("%w: argument %d: int %d does not fit int32", ErrArg, i, x)
			}
			v = uint64(uint32(int32(x)))
		case uint32:
			v = uint64(x)
		case int64:
			v = uint64(x)
		case uint64:
			v = x
		case float32:
			v = uint64(math.Float32bits(x))
		default:
			return nil, fmt.Errorf("%w: argument %d has unsupported type %T", ErrArg, i, a)
		}
		p.slots[i] = v
		p.ptrs[i] = unsafe.Pointer(&p.slots[i])
	}
	return p, nil
}

// launchConfig mirrors CUlaunchConfig; launchAttr mirrors CUlaunchAttribute.
type launchConfig struct {
	grid, block [3]uint32
	shared      uint32
	stream      uintptr
	attrs       unsafe.Pointer
	numAttrs    uint32
	_           uint32
}

type launchAttr struct {
	id    uint32
	_     uint32
	value [64]byte
}

// attrProgrammaticStreamSerialization is CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const attrProgrammaticStreamSerialization = 6

// Launch launches f with cfg and the kernel arguments args (see params for
// the accepted types). With cfg.PDL it uses cuLaunchKernelEx.
func (c *Ctx) Launch(f Function, cfg LaunchConfig, args ...any) error {
	p, err := packParams(args)
	if err != nil {
		return err
	}
	var r int
	if cfg.PDL {
		if c.d.cuLaunchKernelEx == 0 {
			return fmt.Errorf("%w: driver has no cuLaunchKernelEx (PDL needs CUDA 12)", ErrDriver)
		}
		attr := &launchAttr{id: attrProgrammaticStreamSerialization}
		attr.value[0] = 1 // programmaticStreamSerializationAllowed = 1
		lc := &launchConfig{grid: cfg.Grid, block: cfg.Block, shared: cfg.Shared, stream: uintptr(cfg.Stream),
			attrs: unsafe.Pointer(attr), numAttrs: 1}
		r = call(c.d.cuLaunchKernelEx, uintptr(unsafe.Pointer(lc)), uintptr(f), uintptr(unsafe.Pointer(&p.ptrs[0])), 0)
		runtime.KeepAlive(attr)
		runtime.KeepAlive(lc)
	} else {
		r = call(c.d.cuLaunchKernel, uintptr(f),
			uintptr(cfg.Grid[0]), uintptr(cfg.Grid[1]), uintptr(cfg.Grid[2]),
			uintptr(cfg.Block[0]), uintptr(cfg.Block[1]), uintptr(cfg.Block[2]),
			uintptr(cfg.Shared), uintptr(cfg.Stream), uintptr(unsafe.Pointer(&p.ptrs[0])), 0)
	}
	runtime.KeepAlive(p)
	return c.d.check("cuLaunchKernel", r)
}

// BeginCapture starts capturing the work queued on s into a graph
// (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).
func (c *Ctx) BeginCapture(s Stream) error {
	const modeThreadLocal = 1
	return c.d.check("cuStreamBeginCapture", call(c.d.cuStreamBeginCapture, uintptr(s), modeThreadLocal))
}

// EndCapture ends the capture on s and returns the graph.
func (c *Ctx) EndCapture(s Stream) (Graph, error) {
	var g Graph
	err := c.d.check("cuStreamEndCapture", call(c.d.cuStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g))))
	return g, err
}

// Instantiate makes a launchable graph from g.
func (c *Ctx) Instantiate(g Graph) (GraphExec, error) {
	var e GraphExec
	err := c.d.check("cuGraphInstantiate", call(c.d.cuGraphInstantiate, uintptr(unsafe.Pointer(&e)), uintptr(g), 0))
	return e, err
}

// LaunchGraph queues one replay of e on s.
func (c *Ctx) LaunchGraph(e GraphExec, s Stream) error {
	return c.d.check("cuGraphLaunch", call(c.d.cuGraphLaunch, uintptr(e), uintptr(s)))
}

// DestroyGraph destroys g.
func (c *Ctx) DestroyGraph(g Graph) error {
	return c.d.check("cuGraphDestroy", call(c.d.cuGraphDestroy, uintptr(g)))
}

// DestroyGraphExec destroys e.
func (c *Ctx) DestroyGraphExec(e GraphExec) error {
	return c.d.check("cuGraphExecDestroy", call(c.d.cuGraphExecDestroy, uintptr(e)))
}
