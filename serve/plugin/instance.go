package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// stderrTail is how much of a guest's stderr is kept to explain a trap (a
// Go guest prints its panic there).
const stderrTail = 1024

// tail keeps the last stderrTail bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTail:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// instance is one instantiated plugin. Calls must be serialised by the
// owner; after any failed call the instance is dead (closed) and must be
// dropped.
type instance struct {
	m      *module
	mod    api.Module
	mem    api.Memory
	fns    [numExports]api.Function
	stderr *tail
	stack  [2]uint64
	dead   atomic.Bool // read without the owner's lock by Matchers sharing the instance
}

// instantiate starts a fresh instance of m and runs _initialize. Standard
// output is discarded; standard error is kept (its tail) for trap messages.
func (m *module) instantiate(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, m.host.lim.InitTimeout)
	defer cancel()
	in := &instance{m: m, stderr: &tail{}}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions("_initialize").
		WithStderr(in.stderr)
	mod, err := m.host.rt.InstantiateModule(ctx, m.compiled, cfg)
	if err != nil {
		if mod != nil {
			mod.Close(context.Background())
		}
		return nil, in.classify(ctx, "instantiation", err)
	}
	in.mod = mod
	in.mem = mod.Memory()
	for i, e := range exports {
		in.fns[i] = mod.ExportedFunction(e.name)
	}
	if in.mem == nil {
		in.kill()
		return nil, fmt.Errorf("%w: %s plugin %q exports no memory", ErrMissingExport, m.kind, m.name)
	}
	return in, nil
}

// kill closes the instance; it is idempotent.
func (in *instance) kill() {
	if in.dead.Swap(true) {
		return
	}
	if in.mod != nil {
		in.mod.Close(context.Background())
	}
}

// call invokes export e with args under ctx and returns its one result
// (0 for none). Any failure kills the instance and is classified.
func (in *instance) call(ctx context.Context, e export, args ...uint64) (uint64, error) {
	if in.dead.Load() {
		return 0, fmt.Errorf("%w: %s plugin %q: instance already discarded", ErrPluginTrap, in.m.kind, in.m.name)
	}
	f := in.fns[e]
	if f == nil {
		return 0, fmt.Errorf("%w: %s plugin %q does not export %s", ErrMissingExport, in.m.kind, in.m.name, exports[e].name)
	}
	stack := in.stack[:]
	copy(stack, args)
	if err := f.CallWithStack(ctx, stack); err != nil {
		in.kill()
		return 0, in.classify(ctx, exports[e].name, err)
	}
	return stack[0], nil
}

// classify turns a failed call into ErrPluginTimeout, ErrPluginMemory or
// ErrPluginTrap, with the guest's last stderr lines.
func (in *instance) classify(ctx context.Context, what string, err error) error {
	m := in.m
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s plugin %q: %s: %v (instance discarded)", ErrPluginTimeout, m.kind, m.name, what, ctx.Err())
	}
	msg := err.Error()
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		msg = fmt.Sprintf("exited with code %d", exit.ExitCode())
	}
	if s := in.stderr.String(); s != "" {
		msg += "; stderr: " + s
	}
	sentinel := ErrPluginTrap
	if in.nearMemoryCap() || strings.Contains(msg, "out of memory") {
		sentinel = ErrPluginMemory
	}
	return fmt.Errorf("%w: %s plugin %q: %s: %s (instance discarded)", sentinel, m.kind, m.name, what, msg)
}

// nearMemoryCap reports whether the memory is within 1/16 of the cap (Go
// guests grow their heap in multi-MiB steps, so a refused grow leaves some
// room).
func (in *instance) nearMemoryCap() bool {
	if in.mem == nil {
		return false
	}
	limit := uint64(in.m.host.lim.MemoryPages) * 65536
	return uint64(in.mem.Size()) >= limit-limit/16
}

// write copies data into a fresh guest buffer and returns its address; the
// caller frees it.
func (in *instance) write(ctx context.Context, data []byte) (uint32, error) {
	if len(data) > 1<<30 {
		return 0, fmt.Errorf("%w: %d bytes of input", ErrConfig, len(data))
	}
	v, err := in.call(ctx, expAlloc, uint64(len(data)))
	if err != nil {
		return 0, err
	}
	ptr := uint32(v)
	if ptr == 0 || !in.mem.Write(ptr, data) {
		in.kill()
		return 0, fmt.Errorf("%w: %s plugin %q: memra_alloc(%d) gave a bad address %#x (instance discarded)",
			ErrPluginOutput, in.m.kind, in.m.name, len(data), ptr)
	}
	return ptr, nil
}

// read returns a view of n guest bytes at ptr (valid until the next call),
// killing the instance when the range is outside its memory.
func (in *instance) read(what string, ptr, n uint32) ([]byte, error) {
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		in.kill()
		return nil, fmt.Errorf("%w: %s plugin %q: %s (%#x, %d bytes) is outside its memory of %d bytes (instance discarded)",
			ErrPluginOutput, in.m.kind, in.m.name, what, ptr, n, in.mem.Size())
	}
	return b, nil
}

// lastError fetches memra_last_error's message, capped at MaxOutput.
func (in *instance) lastError(ctx context.Context) string {
	v, err := in.call(ctx, expLastError)
	if err != nil {
		return "(no message: " + err.Error() + ")"
	}
	ptr, n := unpack(v)
	n = min(n, uint32(in.m.host.lim.MaxOutput))
	b, err := in.read("memra_last_error", ptr, n)
	if err != nil {
		return "(no message: " + err.Error() + ")"
	}
	return string(b)
}
