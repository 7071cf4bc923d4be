package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// peerDriver holds the driver entry points of copies between GPUs.
type peerDriver struct {
	cuDeviceCanAccessPeer, cuCtxEnablePeerAccess, cuMemcpyPeerAsync uintptr
}

var (
	peerOnce sync.Once
	peerDrv  *peerDriver
	peerErr  error
)

// loadPeer resolves the peer-to-peer entry points, once per process.
func loadPeer() (*peerDriver, error) {
	peerOnce.Do(func() {
		if _, err := loadDriver(); err != nil {
			peerErr = err
			return
		}
		h, name, err := dlopen(driverNames, nil)
		if err != nil {
			peerErr = err
			return
		}
		p := &peerDriver{}
		peerErr = symbols(h, name, map[string]*uintptr{
			"cuDeviceCanAccessPeer": &p.cuDeviceCanAccessPeer,
			"cuCtxEnablePeerAccess": &p.cuCtxEnablePeerAccess,
			"cuMemcpyPeerAsync":     &p.cuMemcpyPeerAsync,
		})
		if peerErr == nil {
			peerDrv = p
		}
	})
	return peerDrv, peerErr
}

// cudaErrorPeerAccessAlreadyEnabled is CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED.
const cudaErrorPeerAccessAlreadyEnabled = 704

// ctxHandle is a context and its device, as another worker needs them.
type ctxHandle struct {
	ctx uintptr
	dev int32
}

// handle returns the context's handle for peer copies.
func (c *Ctx) handle() ctxHandle { return ctxHandle{ctx: c.ctx, dev: c.dev} }

// CanAccessPeer reports whether the context's device can address peer's
// memory directly (cuDeviceCanAccessPeer).
func (c *Ctx) canAccessPeer(p *peerDriver, peer ctxHandle) (bool, error) {
	var ok int32
	err := c.d.check("cuDeviceCanAccessPeer", call(p.cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(&ok)), uintptr(c.dev), uintptr(peer.dev)))
	return ok != 0, err
}

// enablePeerAccess lets the context address peer's memory (a second call
// is not an error).
func (c *Ctx) enablePeerAccess(p *peerDriver, peer ctxHandle) error {
	r := call(p.cuCtxEnablePeerAccess, peer.ctx, 0)
	if r == cudaErrorPeerAccessAlreadyEnabled {
		return nil
	}
	return c.d.check("cuCtxEnablePeerAccess", r)
}

// copyPeerAsync queues a copy of n bytes from src in this context to dst in
// the context dstCtx on s.
func (c *Ctx) copyPeerAsync(p *peerDriver, dst DevicePtr, dstCtx ctxHandle, src DevicePtr, n int, s Stream) error {
	r := call(p.cuMemcpyPeerAsync, uintptr(dst), dstCtx.ctx, uintptr(src), c.ctx, uintptr(n), uintptr(s))
	if err := c.d.check("cuMemcpyPeerAsync", r); err != nil {
		return fmt.Errorf("peer copy of %d bytes: %w", n, err)
	}
	return nil
}
