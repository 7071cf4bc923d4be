package plugin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Limits bound what one plugin call may take. Zero fields take the
// Default* values.
type Limits struct {
	RenderTimeout time.Duration // one memra_render call, with its alloc and free
	StepTimeout   time.Duration // one grammar call (new, step, free)
	InitTimeout   time.Duration // instantiation, _initialize and memra_grammar_set_vocab
	MemoryPages   uint32        // linear memory cap in 64 KiB pages
	MaxOutput     int           // bytes of rendered text (and of error messages)
	MaxInstances  int           // instances per template plugin and per (grammar plugin, vocabulary)
	MaxHandles    int           // sequences per grammar instance before another is started
}

// Defaults of Limits.
const (
	DefaultRenderTimeout = 2 * time.Second
	DefaultStepTimeout   = time.Second
	DefaultInitTimeout   = 10 * time.Second
	DefaultMemoryPages   = 4096 // 256 MiB
	DefaultMaxOutput     = 1 << 20
	DefaultMaxInstances  = 4
	DefaultMaxHandles    = 64
)

func (l Limits) withDefaults() Limits {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.RenderTimeout, DefaultRenderTimeout)
	def(&l.StepTimeout, DefaultStepTimeout)
	def(&l.InitTimeout, DefaultInitTimeout)
	if l.MemoryPages == 0 {
		l.MemoryPages = DefaultMemoryPages
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = DefaultMaxOutput
	}
	if l.MaxInstances <= 0 {
		l.MaxInstances = DefaultMaxInstances
	}
	if l.MaxHandles <= 0 {
		l.MaxHandles = DefaultMaxHandles
	}
	return l
}

// Config configures a Host.
type Config struct {
	Limits Limits
	// CacheDir holds compiled modules between runs; "" = the user cache
	// directory's memra/wazero; NoCache turns the disk cache off.
	CacheDir string
	NoCache  bool
}

// DefaultCacheDir returns where compiled plugins are cached by default.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no user cache directory: %v", ErrConfig, err)
	}
	return filepath.Join(dir, "memra", "wazero"), nil
}

// Host owns the wazero runtime every plugin of a server runs in, its
// compilation cache and its limits. It is safe for concurrent use.
type Host struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
	lim   Limits

	mu      sync.Mutex
	plugins []interface{ Close() error }
	closed  bool
}

// NewHost starts a runtime with the optimizing compiler, the memory cap,
// termination on context end, and WASI with nothing granted (see
// docs/PLUGINS.md for exactly what each WASI function returns).
func NewHost(ctx context.Context, cfg Config) (*Host, error) {
	lim := cfg.Limits.withDefaults()
	rc := wazero.NewRuntimeConfigCompiler().
		WithMemoryLimitPages(lim.MemoryPages).
		WithCloseOnContextDone(true)
	h := &Host{lim: lim}
	if !cfg.NoCache {
		dir := cfg.CacheDir
		if dir == "" {
			var err error
			if dir, err = DefaultCacheDir(); err != nil {
				return nil, err
			}
		}
		c, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			return nil, fmt.Errorf("%w: compilation cache %s: %v", ErrConfig, dir, err)
		}
		h.cache = c
		rc = rc.WithCompilationCache(c)
	}
	h.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, h.rt); err != nil {
		h.Close()
		return nil, fmt.Errorf("%w: WASI: %v", ErrConfig, err)
	}
	return h, nil
}

// Limits returns the limits in force (defaults filled in).
func (h *Host) Limits() Limits { return h.lim }

// Close closes every plugin loaded by h, then the runtime and the cache.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ps := h.plugins
	h.plugins = nil
	h.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
	ctx := context.Background()
	err := h.rt.Close(ctx)
	if h.cache != nil {
		if cerr := h.cache.Close(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

func (h *Host) track(p interface{ Close() error }) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.plugins = append(h.plugins, p)
	return nil
}

// module is one compiled plugin.
type module struct {
	host     *Host
	name     string
	kind     kind
	compiled wazero.CompiledModule
}

var wasmMagic = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

// compile checks wasm is a WebAssembly module that imports nothing but
// WASI and exports what kind needs, then compiles it (through the cache).
func (h *Host) compile(ctx context.Context, name string, k kind, wasm []byte) (*module, error) {
	if !bytes.HasPrefix(wasm, wasmMagic) {
		return nil, fmt.Errorf("%w: %s plugin %q does not start with the wasm header (\\0asm, version 1)", ErrNotWasm, k, name)
	}
	cm, err := h.rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %s plugin %q: %v", ErrInvalidModule, k, name, err)
	}
	m := &module{host: h, name: name, kind: k, compiled: cm}
	if err := m.check(); err != nil {
		cm.Close(ctx)
		return nil, err
	}
	return m, nil
}

func (m *module) check() error {
	for _, imp := range m.compiled.ImportedFunctions() {
		if mod, fn, _ := imp.Import(); mod != wasi_snapshot_preview1.ModuleName {
			return fmt.Errorf("%w: %s plugin %q imports %s.%s; plugins may import only %s",
				ErrInvalidModule, m.kind, m.name, mod, fn, wasi_snapshot_preview1.ModuleName)
		}
	}
	if len(m.compiled.ExportedMemories()) == 0 {
		return fmt.Errorf("%w: %s plugin %q exports no memory", ErrMissingExport, m.kind, m.name)
	}
	fns := m.compiled.ExportedFunctions()
	for _, e := range exports {
		if !e.requiredBy(m.kind) {
			continue
		}
		want := signature(e.params, e.results)
		def, ok := fns[e.name]
		if !ok {
			return fmt.Errorf("%w: %s plugin %q does not export %s %s", ErrMissingExport, m.kind, m.name, e.name, want)
		}
		if !slices.Equal(def.ParamTypes(), e.params) || !slices.Equal(def.ResultTypes(), e.results) {
			return fmt.Errorf("%w: %s plugin %q exports %s as %s; ABI v%d wants %s", ErrMissingExport,
				m.kind, m.name, e.name, signature(def.ParamTypes(), def.ResultTypes()), ABIVersion, want)
		}
	}
	return nil
}

// checkVersion instantiates m once and asks its ABI version; the instance
// is returned for reuse.
func (m *module) checkVersion(ctx context.Context) (*instance, error) {
	in, err := m.instantiate(ctx)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, m.host.lim.InitTimeout)
	defer cancel()
	v, err := in.call(cctx, expABIVersion)
	if err != nil {
		return nil, err
	}
	if int32(v) != ABIVersion {
		in.kill()
		return nil, fmt.Errorf("%w: %s plugin %q speaks ABI v%d; this memra speaks v%d (rebuild it with the matching sdk)",
			ErrABIVersion, m.kind, m.name, int32(v), ABIVersion)
	}
	return in, nil
}

func (m *module) close() { m.compiled.Close(context.Background()) }
