package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// stderrKeep is how much of a guest's stderr is kept, at its start and at
// its end, to explain a trap: a Go guest prints its panic message there,
// then its stack trace.
const stderrKeep = 1024

// stderrLog keeps the first and the last stderrKeep bytes a guest wrote to
// stderr since its current call began.
type stderrLog struct {
	mu         sync.Mutex
	head, tail []byte
	cut        bool // bytes between head and tail were dropped
}

func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if room := stderrKeep - len(l.head); room > 0 {
		k := min(room, len(p))
		l.head, p = append(l.head, p[:k]...), p[k:]
	}
	l.tail = append(l.tail, p...)
	if len(l.tail) > stderrKeep {
		l.tail = append(l.tail[:0], l.tail[len(l.tail)-stderrKeep:]...)
		l.cut = true
	}
	return n, nil
}

// reset forgets what was written, at the start of a call.
func (l *stderrLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.head, l.tail, l.cut = l.head[:0], l.tail[:0], false
}

func (l *stderrLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := string(l.head)
	if l.cut {
		s += "\n[…]\n"
	}
	return strings.TrimSpace(s + string(l.tail))
}

// instance is one instantiated plugin. Calls must be serialised by the
// owner; after any failed call the instance is dead (closed) and must be
// dropped.
type instance struct {
	m      *module
	mod    api.Module
	mem    api.Memory
	fns    [numExports]api.Function
	stderr *stderrLog
	stack  [2]uint64
	dead   atomic.Bool // read without the owner's lock by Matchers sharing the instance
}

// instantiate starts a fresh instance of m and runs _initialize. Standard
// output is discarded; standard error is kept (its start and its end) for
// trap messages.
func (m *module) instantiate(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, m.host.lim.InitTimeout)
	defer cancel()
	in := &instance{m: m, stderr: &stderrLog{}}
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
	in.stderr.reset()
	if err := f.CallWithStack(ctx, stack); err != nil {
		in.kill()
		return 0, in.classify(ctx, exports[e].name, err)
	}
	return stack[0], nil
}

// classify turns a failed call into ErrPluginTimeout, ErrPluginMemory or
// ErrPluginTrap. The error's text has the failure's first line and the
// guest's message (a Go panic's); the whole failure with the guest's
// stderr tail (its stack trace) is its Trace, for the server log.
func (in *instance) classify(ctx context.Context, what string, err error) error {
	m := in.m
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s plugin %q: %s: %v (instance discarded)", ErrPluginTimeout, m.kind, m.name, what, ctx.Err())
	}
	full, stderr := err.Error(), in.stderr.String()
	msg, _, _ := strings.Cut(full, "\n") // wazero appends the wasm stack trace
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		msg = fmt.Sprintf("exited with code %d", exit.ExitCode())
	}
	if g := guestMessage(stderr); g != "" {
		msg += "; " + g
	}
	sentinel := ErrPluginTrap
	if in.nearMemoryCap() || strings.Contains(full, "out of memory") || strings.Contains(stderr, "out of memory") {
		sentinel = ErrPluginMemory
	}
	trace := full
	if stderr != "" {
		trace += "\nstderr:\n" + stderr
	}
	return &CrashError{err: fmt.Errorf("%w: %s plugin %q: %s: %s (instance discarded)", sentinel, m.kind, m.name, what, msg),
		trace: trace}
}

// CrashError is a plugin call that trapped or ran out of memory. Its text
// says which plugin, what failed and the guest's own message, and is what
// a client may see; Trace has the rest (the wasm stack, the guest's stderr
// with its stack trace), for the server log only.
type CrashError struct {
	err   error
	trace string
}

func (e *CrashError) Error() string { return e.err.Error() }
func (e *CrashError) Unwrap() error { return e.err }

// Trace returns the failure's whole text and the guest's last stderr.
func (e *CrashError) Trace() string { return e.trace }

// Trace returns the trace of the CrashError in err's chain ("" if none).
func Trace(err error) string {
	var ce *CrashError
	if errors.As(err, &ce) {
		return ce.trace
	}
	return ""
}

// maxGuestMessage bounds the guest message quoted in an error.
const maxGuestMessage = 256

// guestMessage is the guest's own message in its stderr: the paragraph
// of a Go panic or fatal error ("panic: …"), else the first paragraph,
// without the stack trace that follows it.
func guestMessage(stderr string) string {
	lines := strings.Split(stderr, "\n")
	start := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			start = i
			break
		}
	}
	var para []string
	for _, l := range lines[start:] {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "goroutine ") {
			if len(para) > 0 {
				break
			}
			continue
		}
		para = append(para, l)
	}
	msg := strings.Join(para, " ")
	if len(msg) > maxGuestMessage {
		cut := maxGuestMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
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
