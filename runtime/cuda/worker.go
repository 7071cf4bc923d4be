package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }

// DeviceInfo describes a GPU, read once when it is opened.
type DeviceInfo struct {
	Ordinal            int
	Name               string
	Major, Minor       int   // compute capability
	SMs                int   // multiprocessors
	TotalMem           int64 // bytes
	L2Bytes            int
	MaxSharedPerBlock  int // bytes without opt-in
	MaxSharedOptin     int // bytes a kernel may opt into
	MaxThreadsPerBlock int
	DriverVersion      int // e.g. 13000
}

// Arch returns the NVRTC architecture name of the device, "sm_90a" style for
// 9.x and later (the arch-specific variants memra targets) and "sm_86" for
// older cards.
func (i DeviceInfo) Arch() string {
	if i.Major >= 9 {
		return fmt.Sprintf("sm_%d%da", i.Major, i.Minor)
	}
	return fmt.Sprintf("sm_%d%d", i.Major, i.Minor)
}

// Device is one GPU with its primary context, owned by a GPU worker
// goroutine on a locked OS thread. All methods are safe for concurrent use.
type Device struct {
	info DeviceInfo
	d    *driver
	jobs chan job
	done chan struct{}

	mu     sync.Mutex
	closed bool
}

type job struct {
	fn    func(*Ctx) error
	reply chan error
}

// Ctx gives access to the driver on the worker thread. It is valid only
// inside the Do callback that received it; do not keep it.
type Ctx struct {
	d    *driver
	dev  int32
	ctx  uintptr
	info *DeviceInfo
}

// Open starts the GPU worker for device ordinal, initialises the driver and
// makes the device's primary context current on the worker's thread.
func Open(ordinal int) (*Device, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	dev := &Device{d: d, jobs: make(chan job), done: make(chan struct{})}
	ready := make(chan error, 1)
	go dev.loop(ordinal, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return dev, nil
}

// loop is the worker: it locks its thread, sets up the context and runs jobs
// until the channel is closed.
func (dev *Device) loop(ordinal int, ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(dev.done)
	c, err := dev.setup(ordinal)
	ready <- err
	if err != nil {
		return
	}
	for j := range dev.jobs {
		j.reply <- runJob(c, j.fn)
	}
	_ = c.d.check("cuCtxSynchronize", call(c.d.cuCtxSynchronize))
	_ = c.d.check("cuDevicePrimaryCtxRelease", call(c.d.cuDevicePrimaryCtxRelease, uintptr(c.dev)))
}

// runJob runs fn, turning a panic into an error so the worker survives.
func runJob(c *Ctx, fn func(*Ctx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cuda: panic on the GPU worker: %v", r)
		}
	}()
	return fn(c)
}

func (dev *Device) setup(ordinal int) (*Ctx, error) {
	d := dev.d
	if err := d.check("cuInit", call(d.cuInit, 0)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	var n int32
	if err := d.check("cuDeviceGetCount", call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= int(n) {
		return nil, fmt.Errorf("%w: ordinal %d, %d devices", ErrNoDevice, ordinal, n)
	}
	c := &Ctx{d: d, info: &dev.info}
	if err := d.check("cuDeviceGet", call(d.cuDeviceGet, uintptr(unsafe.Pointer(&c.dev)), uintptr(ordinal))); err != nil {
		return nil, err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", call(d.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c.ctx)), uintptr(c.dev))); err != nil {
		return nil, err
	}
	if err := d.check("cuCtxSetCurrent", call(d.cuCtxSetCurrent, c.ctx)); err != nil {
		return nil, err
	}
	info := DeviceInfo{Ordinal: ordinal}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", call(d.cuDeviceGetName, uintptr(bptr(name)), 256, uintptr(c.dev))); err != nil {
		return nil, err
	}
	info.Name = gostring(uintptr(bptr(name)))
	var total uint64
	if err := d.check("cuDeviceTotalMem", call(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(c.dev))); err != nil {
		return nil, err
	}
	info.TotalMem = int64(total)
	var ver int32
	_ = call(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&ver)))
	info.DriverVersion = int(ver)
	for _, a := range []struct {
		attr int
		dst  *int
	}{
		{attrComputeCapabilityMajor, &info.Major},
		{attrComputeCapabilityMinor, &info.Minor},
		{attrMultiprocessorCount, &info.SMs},
		{attrL2CacheSize, &info.L2Bytes},
		{attrMaxSharedPerBlock, &info.MaxSharedPerBlock},
		{attrMaxSharedPerBlockOptin, &info.MaxSharedOptin},
		{attrMaxThreadsPerBlock, &info.MaxThreadsPerBlock},
	} {
		v, err := c.Attribute(a.attr)
		if err != nil {
			return nil, err
		}
		*a.dst = v
	}
	dev.info = info
	return c, nil
}

// Attribute reads a CUdevice_attribute of the context's device.
func (c *Ctx) Attribute(attr int) (int, error) {
	var v int32
	err := c.d.check("cuDeviceGetAttribute", call(c.d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(c.dev)))
	return int(v), err
}

// Info returns the device's description.
func (dev *Device) Info() DeviceInfo { return dev.info }

// Info returns the description of the context's device.
func (c *Ctx) Info() DeviceInfo { return *c.info }

// Do runs fn on the GPU worker thread and returns its error. Calls from many
// goroutines are serialised. fn must not call Do (it would deadlock).
func (dev *Device) Do(fn func(*Ctx) error) error {
	dev.mu.Lock()
	if dev.closed {
		dev.mu.Unlock()
		return ErrClosed
	}
	reply := make(chan error, 1)
	dev.jobs <- job{fn: fn, reply: reply}
	dev.mu.Unlock()
	return <-reply
}

// Close synchronises the device, releases the primary context and stops the
// worker. Later calls return ErrClosed.
func (dev *Device) Close() error {
	dev.mu.Lock()
	if dev.closed {
		dev.mu.Unlock()
		return ErrClosed
	}
	dev.closed = true
	close(dev.jobs)
	dev.mu.Unlock()
	<-dev.done
	return nil
}
