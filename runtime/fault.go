package runtime

import "errors"

// ErrModelFile ends a request whose backend could no longer read the
// model's weights from their memory-mapped file: the file shrank or was
// replaced while it was served (truncate, cp over it). The backend refuses
// every later step; the model must be loaded again. Backends wrap it in
// their own error (cpu.ErrWeightFault), which the scheduler wraps in
// ErrBackend.
var ErrModelFile = errors.New("runtime: the model file changed while it was served; its weights can no longer be read")
