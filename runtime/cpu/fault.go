package cpu

import (
	"fmt"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/memra-ai/memra/runtime"
)

// ErrWeightFault: reading the memory-mapped weights faulted (SIGBUS): the
// model file shrank or was replaced while the backend used it. It wraps
// runtime.ErrModelFile; the backend refuses every later step with it.
var ErrWeightFault = fmt.Errorf("cpu: reading the mapped weights faulted: %w", runtime.ErrModelFile)

// faultAddr is what the Go runtime panics with when a goroutine that set
// debug.SetPanicOnFault faults at a non-nil address.
type faultAddr interface{ Addr() uintptr }

// guarded runs f with memory faults of this goroutine (and of the workers
// parallel starts for it) turned into an error wrapping ErrWeightFault
// when the address lies in a weight; any other panic goes on.
func (e *exec) guarded(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = e.faultError(r)
		}
	}()
	return f()
}

// faultError turns a recovered fault inside a weight into an error naming
// the tensor, and panics again with anything else.
func (e *exec) faultError(r any) error {
	fa, ok := r.(faultAddr)
	if !ok {
		panic(r)
	}
	if w, off := e.weightAt(fa.Addr()); w != nil {
		return fmt.Errorf("%w: tensor %s, byte %d of %d", ErrWeightFault, w.name, off, len(w.data))
	}
	panic(r)
}

// weightAt finds the weight whose bytes hold addr, and the offset in it.
func (e *exec) weightAt(addr uintptr) (*weight, int) {
	for _, w := range e.weights {
		if w == nil || len(w.data) == 0 {
			continue
		}
		start := uintptr(unsafe.Pointer(unsafe.SliceData(w.data)))
		if addr >= start && addr-start < uintptr(len(w.data)) {
			return w, int(addr - start)
		}
	}
	return nil, 0
}

// faultCatcher collects the first memory fault of parallel's workers, so
// that the goroutine that started them can raise it where guarded
// recovers it.
type faultCatcher struct {
	mu    sync.Mutex
	first any
}

// catch, deferred by a worker that set debug.SetPanicOnFault, keeps a
// fault and lets any other panic go on.
func (c *faultCatcher) catch() {
	r := recover()
	if r == nil {
		return
	}
	if _, ok := r.(faultAddr); !ok {
		panic(r)
	}
	c.mu.Lock()
	if c.first == nil {
		c.first = r
	}
	c.mu.Unlock()
}

// raise panics with the kept fault, if any, once the workers are done.
func (c *faultCatcher) raise() {
	if c.first != nil {
		panic(c.first)
	}
}
