package cuda

import "unsafe"

// Page-locked host memory and events without timing: what a pipelined
// step (pipeline.go) needs to copy its results to the host while the host
// goes on, and the device address of the upload slots (upload.go) the step
// inputs kernel reads.

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
