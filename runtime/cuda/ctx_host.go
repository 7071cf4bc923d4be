package cuda

import "unsafe"

// Page-locked host memory, events without timing and strided copies: what
// a pipelined step (pipeline.go) needs to copy its results to the host
// while the host goes on, and the device address of the upload slots
// (upload.go) the step inputs kernel reads.

// AllocHost allocates n bytes of page-locked host memory, which
// CopyDtoHAsync fills without holding the host until the copy is done.
func (c *Ctx) AllocHost(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := c.d.check("cuMemAllocHost", call(c.d.cuMemAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	return p, err
}

// HostDevicePtr returns the device address of page-locked memory p from
// AllocHost, which kernels read in place (mapped into the device's
// address space: with unified addressing it is p itself).
func (c *Ctx) HostDevicePtr(p unsafe.Pointer) (DevicePtr, error) {
	var d DevicePtr
	err := c.d.check("cuMemHostGetDevicePointer", call(c.d.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&d)), uintptr(p), 0))
	return d, err
}

// FreeHost releases memory from AllocHost.
func (c *Ctx) FreeHost(p unsafe.Pointer) error {
	return c.d.check("cuMemFreeHost", call(c.d.cuMemFreeHost, uintptr(p)))
}

// NewSyncEvent creates an event for EventSync only
// (CU_EVENT_DISABLE_TIMING: recording and waiting cost less).
func (c *Ctx) NewSyncEvent() (Event, error) {
	var e Event
	err := c.d.check("cuEventCreate", call(c.d.cuEventCreate, uintptr(unsafe.Pointer(&e)), 2))
	return e, err
}

// memcpy2D is CUDA_MEMCPY2D.
type memcpy2D struct {
	srcX, srcY uint64
	srcType    uint32
	_          uint32
	srcHost    uintptr
	srcDevice  uint64
	srcArray   uintptr
	srcPitch   uint64
	dstX, dstY uint64
	dstType    uint32
	_          uint32
	dstHost    uintptr
	dstDevice  uint64
	dstArray   uintptr
	dstPitch   uint64
	width      uint64
	height     uint64
}

const (
	memoryTypeHost   = 1 // CU_MEMORYTYPE_HOST
	memoryTypeDevice = 2 // CU_MEMORYTYPE_DEVICE
)

// CopyDtoD2DAsync queues a device-to-device copy of rows rows of width
// bytes, from src every srcPitch bytes to dst every dstPitch bytes, on s.
func (c *Ctx) CopyDtoD2DAsync(dst DevicePtr, dstPitch int, src DevicePtr, srcPitch int, width, rows int, s Stream) error {
	return c.copy2DAsync(memcpy2D{srcType: memoryTypeDevice, srcDevice: uint64(src), srcPitch: uint64(srcPitch)}, dst, dstPitch, width, rows, s)
}

// CopyHtoD2DAsync queues a copy of rows rows of width bytes from host
// memory src (page-locked, from AllocHost), every srcPitch bytes, to dst
// every dstPitch bytes, on s.
func (c *Ctx) CopyHtoD2DAsync(dst DevicePtr, dstPitch int, src unsafe.Pointer, srcPitch int, width, rows int, s Stream) error {
	return c.copy2DAsync(memcpy2D{srcType: memoryTypeHost, srcHost: uintptr(src), srcPitch: uint64(srcPitch)}, dst, dstPitch, width, rows, s)
}

// copy2DAsync queues m, its source set, to device memory dst every
// dstPitch bytes: rows rows of width bytes.
func (c *Ctx) copy2DAsync(m memcpy2D, dst DevicePtr, dstPitch int, width, rows int, s Stream) error {
	m.dstType, m.dstDevice, m.dstPitch = memoryTypeDevice, uint64(dst), uint64(dstPitch)
	m.width, m.height = uint64(width), uint64(rows)
	return c.d.check("cuMemcpy2DAsync", call(c.d.cuMemcpy2DAsync, uintptr(unsafe.Pointer(&m)), uintptr(s)))
}
