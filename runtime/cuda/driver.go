package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// driver holds the resolved CUDA driver entry points.
type driver struct {
	lib string

	cuInit, cuDriverGetVersion, cuGetErrorString                          uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName                        uintptr
	cuDeviceGetAttribute, cuDeviceTotalMem                                uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease                   uintptr
	cuCtxSetCurrent, cuCtxSynchronize                                     uintptr
	cuMemAlloc, cuMemFree, cuMemsetD8, cuMemGetInfo                       uintptr
	cuMemcpyHtoD, cuMemcpyDtoH, cuMemcpyDtoD                              uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync               uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize                  uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord                          uintptr
	cuEventSynchronize, cuEventElapsedTime                                uintptr
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction                 uintptr
	cuFuncSetAttribute, cuLaunchKernel, cuLaunchKernelEx                  uintptr
	cuStreamBeginCapture, cuStreamEndCapture                              uintptr
	cuGraphInstantiate, cuGraphLaunch, cuGraphDestroy, cuGraphExecDestroy uintptr
	cuMemAllocHost, cuMemFreeHost, cuMemHostGetDevicePointer              uintptr
}

var (
	drvOnce sync.Once
	drv     *driver
	drvErr  error
)

// loadDriver dlopens libcuda and resolves its symbols, once per process.
func loadDriver() (*driver, error) {
	drvOnce.Do(func() {
		h, name, err := dlopen(driverNames, nil)
		if err != nil {
			drvErr = err
			return
		}
		d := &driver{lib: name}
		err = symbols(h, name, map[string]*uintptr{
			"cuInit":                   &d.cuInit,
			"cuDriverGetVersion":       &d.cuDriverGetVersion,
			"cuGetErrorString":         &d.cuGetErrorString,
			"cuDeviceGetCount":         &d.cuDeviceGetCount,
			"cuDeviceGet":              &d.cuDeviceGet,
			"cuDeviceGetName":          &d.cuDeviceGetName,
			"cuDeviceGetAttribute":     &d.cuDeviceGetAttribute,
			"cuDeviceTotalMem_v2":      &d.cuDeviceTotalMem,
			"cuDevicePrimaryCtxRetain": &d.cuDevicePrimaryCtxRetain,
			"cuDevicePrimaryCtxRelease_v2|cuDevicePrimaryCtxRelease": &d.cuDevicePrimaryCtxRelease,
			"cuCtxSetCurrent":                          &d.cuCtxSetCurrent,
			"cuCtxSynchronize":                         &d.cuCtxSynchronize,
			"cuMemAlloc_v2":                            &d.cuMemAlloc,
			"cuMemFree_v2":                             &d.cuMemFree,
			"cuMemsetD8_v2":                            &d.cuMemsetD8,
			"cuMemGetInfo_v2":                          &d.cuMemGetInfo,
			"cuMemcpyHtoD_v2":                          &d.cuMemcpyHtoD,
			"cuMemcpyDtoH_v2":                          &d.cuMemcpyDtoH,
			"cuMemcpyDtoD_v2":                          &d.cuMemcpyDtoD,
			"cuMemcpyHtoDAsync_v2":                     &d.cuMemcpyHtoDAsync,
			"cuMemcpyDtoHAsync_v2":                     &d.cuMemcpyDtoHAsync,
			"cuMemcpyDtoDAsync_v2":                     &d.cuMemcpyDtoDAsync,
			"cuStreamCreate":                           &d.cuStreamCreate,
			"cuStreamDestroy_v2":                       &d.cuStreamDestroy,
			"cuStreamSynchronize":                      &d.cuStreamSynchronize,
			"cuEventCreate":                            &d.cuEventCreate,
			"cuEventDestroy_v2":                        &d.cuEventDestroy,
			"cuEventRecord":                            &d.cuEventRecord,
			"cuEventSynchronize":                       &d.cuEventSynchronize,
			"cuEventElapsedTime_v2|cuEventElapsedTime": &d.cuEventElapsedTime,
			"cuModuleLoadData":                         &d.cuModuleLoadData,
			"cuModuleUnload":                           &d.cuModuleUnload,
			"cuModuleGetFunction":                      &d.cuModuleGetFunction,
			"cuFuncSetAttribute":                       &d.cuFuncSetAttribute,
			"cuLaunchKernel":                           &d.cuLaunchKernel,
			"?cuLaunchKernelEx":                        &d.cuLaunchKernelEx,
			"cuStreamBeginCapture_v2":                  &d.cuStreamBeginCapture,
			"cuStreamEndCapture":                       &d.cuStreamEndCapture,
			"cuGraphInstantiateWithFlags":              &d.cuGraphInstantiate,
			"cuGraphLaunch":                            &d.cuGraphLaunch,
			"cuGraphDestroy":                           &d.cuGraphDestroy,
			"cuGraphExecDestroy":                       &d.cuGraphExecDestroy,
			"cuMemAllocHost_v2":                        &d.cuMemAllocHost,
			"cuMemFreeHost":                            &d.cuMemFreeHost,
			"cuMemHostGetDevicePointer_v2":             &d.cuMemHostGetDevicePointer,
		})
		if err != nil {
			drvErr = err
			return
		}
		drv = d
	})
	return drv, drvErr
}

// check turns a CUresult into an error naming the call.
func (d *driver) check(fn string, r int) error {
	if r == 0 {
		return nil
	}
	var s uintptr
	msg := "unknown error"
	if call(d.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&s))) == 0 && s != 0 {
		msg = gostring(s)
	}
	return fmt.Errorf("%w: %s: %s (CUresult %d)", ErrDriver, fn, msg, r)
}

// Device attributes (CUdevice_attribute) memra reads.
const (
	attrMaxThreadsPerBlock     = 1
	attrMaxSharedPerBlock      = 8
	attrMultiprocessorCount    = 16
	attrL2CacheSize            = 38
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrMaxSharedPerBlockOptin = 97
)

// Available reports whether a CUDA GPU can be used, and if not, why: no
// driver library, or the driver found no device. It initialises the driver
// on a throwaway locked thread.
func Available() error {
	d, err := loadDriver()
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		lockThread()
		defer unlockThread()
		if err := d.check("cuInit", call(d.cuInit, 0)); err != nil {
			errc <- fmt.Errorf("%w: %w", ErrNoDevice, err)
			return
		}
		var n int32
		if err := d.check("cuDeviceGetCount", call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
			errc <- fmt.Errorf("%w: %w", ErrNoDevice, err)
			return
		}
		if n == 0 {
			errc <- fmt.Errorf("%w: driver %s reports 0 devices", ErrNoDevice, d.lib)
			return
		}
		errc <- nil
	}()
	return <-errc
}
