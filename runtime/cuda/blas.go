package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// cuBLASLt, found at run time like the driver and NVRTC: the matrix library
// one arm of the prefill product runs on (prefill.go), and the reference
// bf16 product of `memra bench --roofline`.

// ErrBLAS is a failed cuBLASLt call.
var ErrBLAS = errors.New("cuda: cublasLt error")

// blasNames are tried in order, newest first, by plain name and then in
// blasDirs.
var blasNames = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}

// blasDirs is MEMRA_CUBLAS_DIR first, then the folders searched for NVRTC.
func blasDirs() []string {
	var dirs []string
	if d := os.Getenv("MEMRA_CUBLAS_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	return append(dirs, libDirs()...)
}

// The values of cuBLASLt's enums that memra uses (cublasLt.h, library_types.h).
const (
	blasR32F           = 0  // CUDA_R_32F
	blasR16F           = 2  // CUDA_R_16F
	blasR16BF          = 14 // CUDA_R_16BF
	blasCompute32F     = 68 // CUBLAS_COMPUTE_32F
	blasOpN            = 0  // CUBLAS_OP_N
	blasOpT            = 1  // CUBLAS_OP_T
	blasDescTransA     = 3  // CUBLASLT_MATMUL_DESC_TRANSA
	blasDescTransB     = 4  // CUBLASLT_MATMUL_DESC_TRANSB
	blasPrefWorkspace  = 1  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	blasHeuristicBytes = 96 // cublasLtMatmulHeuristicResult_t: algo (64), workspace size, state, waves, reserved
)

// BLASWorkspace is the workspace cuBLASLt's algorithms may use.
const BLASWorkspace = 32 << 20

type blasLib struct {
	lib                                                 string
	create, destroy, statusString                       uintptr
	descCreate, descDestroy, descSet                    uintptr
	layoutCreate, layoutDestroy                         uintptr
	prefCreate, prefDestroy, prefSet, heuristic, matmul uintptr
}

var (
	blasOnce sync.Once
	blasL    *blasLib
	blasErr  error
)

// loadBLAS dlopens cuBLASLt and resolves its symbols, once per process.
func loadBLAS() (*blasLib, error) {
	blasOnce.Do(func() {
		h, name, err := dlopen(blasNames, blasDirs())
		if err != nil {
			blasErr = err
			return
		}
		l := &blasLib{lib: name}
		blasErr = symbols(h, name, map[string]*uintptr{
			"cublasLtCreate":                       &l.create,
			"cublasLtDestroy":                      &l.destroy,
			"cublasLtGetStatusString":              &l.statusString,
			"cublasLtMatmulDescCreate":             &l.descCreate,
			"cublasLtMatmulDescDestroy":            &l.descDestroy,
			"cublasLtMatmulDescSetAttribute":       &l.descSet,
			"cublasLtMatrixLayoutCreate":           &l.layoutCreate,
			"cublasLtMatrixLayoutDestroy":          &l.layoutDestroy,
			"cublasLtMatmulPreferenceCreate":       &l.prefCreate,
			"cublasLtMatmulPreferenceDestroy":      &l.prefDestroy,
			"cublasLtMatmulPreferenceSetAttribute": &l.prefSet,
			"cublasLtMatmulAlgoGetHeuristic":       &l.heuristic,
			"cublasLtMatmul":                       &l.matmul,
		})
		if blasErr == nil {
			blasL = l
		}
	})
	return blasL, blasErr
}

// BLASAvailable reports why cuBLASLt cannot be used (nil when it can).
func BLASAvailable() error {
	_, err := loadBLAS()
	return err
}

// check turns a cublasStatus_t into an error naming the call.
func (l *blasLib) check(fn string, status int) error {
	if status == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s (status %d)", ErrBLAS, fn, gostring(uintptr(callPtr(l.statusString, uintptr(status)))), status)
}

// callPtr calls a C function returning a pointer.
//
//go:uintptrescapes
func callPtr(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := puregoCall(fn, args...)
	return r
}

// blas is a cuBLASLt handle with its workspace and the plans of the
// products it has run, on the GPU worker's thread only.
type blas struct {
	l      *blasLib
	handle uintptr
	ws     DevicePtr
	plans  map[blasKey]*blasPlan
	// pinM, when positive, makes every product of a shape run the
	// algorithm cuBLASLt chooses for pinM rows, whatever its own rows: an
	// algorithm computes each row in an order that does not depend on the
	// others, so a row's result does not depend on how many rows share the
	// product (the batch-invariant configuration). A size the algorithm
	// refuses falls back to its own choice.
	pinM int
}

// blasKey is a product's shape: y[m][n] (+)= x[m][k] · W[n][k]ᵀ.
type blasKey struct {
	m, n, k  int
	residual bool
	f16      bool // f16 operands (else bf16)
}

// blasPlan is a product's descriptors and the algorithm cuBLASLt chose.
type blasPlan struct {
	desc, a, b, c uintptr
	algo          [blasHeuristicBytes]byte
	pinned        bool // algo is the pinM plan's, not chosen for this size
}

// newBLAS creates a handle; ws is BLASWorkspace bytes of device memory
// the caller owns.
func newBLAS(ws DevicePtr) (*blas, error) {
	l, err := loadBLAS()
	if err != nil {
		return nil, err
	}
	b := &blas{l: l, ws: ws, plans: map[blasKey]*blasPlan{}}
	if err := l.check("cublasLtCreate", call(l.create, uintptr(unsafe.Pointer(&b.handle)))); err != nil {
		return nil, err
	}
	return b, nil
}

// plan returns the descriptors and algorithm of key, choosing them on first
// use: A the weights (bf16 or f16 rows of k, transposed), B the
// activations (rows of k of the same type), C and D the f32 output rows
// of n; compute and scale f32.
func (b *blas) plan(key blasKey) (*blasPlan, error) {
	if p, ok := b.plans[key]; ok {
		return p, nil
	}
	l := b.l
	p := &blasPlan{}
	if err := l.check("cublasLtMatmulDescCreate", call(l.descCreate, uintptr(unsafe.Pointer(&p.desc)), blasCompute32F, blasR32F)); err != nil {
		return nil, err
	}
	opT, opN := int32(blasOpT), int32(blasOpN)
	if err := l.check("cublasLtMatmulDescSetAttribute", call(l.descSet, p.desc, blasDescTransA, uintptr(unsafe.Pointer(&opT)), 4)); err != nil {
		return nil, err
	}
	if err := l.check("cublasLtMatmulDescSetAttribute", call(l.descSet, p.desc, blasDescTransB, uintptr(unsafe.Pointer(&opN)), 4)); err != nil {
		return nil, err
	}
	// column-major views: W is k×n (ld k), x is k×m (ld k), y is n×m (ld n)
	op := blasR16BF
	if key.f16 {
		op = blasR16F
	}
	for _, m := range []struct {
		dst            *uintptr
		typ            int
		rows, cols, ld int
	}{{&p.a, op, key.k, key.n, key.k}, {&p.b, op, key.k, key.m, key.k}, {&p.c, blasR32F, key.n, key.m, key.n}} {
		if err := l.check("cublasLtMatrixLayoutCreate", call(l.layoutCreate, uintptr(unsafe.Pointer(m.dst)), uintptr(m.typ), uintptr(m.rows), uintptr(m.cols), uintptr(m.ld))); err != nil {
			return nil, err
		}
	}
	var pref uintptr
	if err := l.check("cublasLtMatmulPreferenceCreate", call(l.prefCreate, uintptr(unsafe.Pointer(&pref)))); err != nil {
		return nil, err
	}
	defer call(l.prefDestroy, pref)
	ws := uint64(BLASWorkspace)
	if err := l.check("cublasLtMatmulPreferenceSetAttribute", call(l.prefSet, pref, blasPrefWorkspace, uintptr(unsafe.Pointer(&ws)), 8)); err != nil {
		return nil, err
	}
	if b.pinM > 0 && key.m != b.pinM {
		ref := key
		ref.m = b.pinM
		rp, err := b.plan(ref)
		if err != nil {
			return nil, err
		}
		p.algo, p.pinned = rp.algo, true
		b.plans[key] = p
		return p, nil
	}
	if err := b.heuristic(key, p, pref); err != nil {
		return nil, err
	}
	b.plans[key] = p
	return p, nil
}

// heuristic has cuBLASLt choose p's algorithm for key's size.
func (b *blas) heuristic(key blasKey, p *blasPlan, pref uintptr) error {
	l := b.l
	var found int32
	if err := l.check("cublasLtMatmulAlgoGetHeuristic", call(l.heuristic, b.handle, p.desc, p.a, p.b, p.c, p.c, pref, 1,
		uintptr(unsafe.Pointer(&p.algo[0])), uintptr(unsafe.Pointer(&found)))); err != nil {
		return err
	}
	if found < 1 {
		return fmt.Errorf("%w: no cublasLt algorithm for %d×%d×%d (f16 %v)", ErrBLAS, key.m, key.n, key.k, key.f16)
	}
	return nil
}

// unpin gives p the algorithm cuBLASLt chooses for its own size (the
// pinned one refused it).
func (b *blas) unpin(key blasKey, p *blasPlan) error {
	l := b.l
	var pref uintptr
	if err := l.check("cublasLtMatmulPreferenceCreate", call(l.prefCreate, uintptr(unsafe.Pointer(&pref)))); err != nil {
		return err
	}
	defer call(l.prefDestroy, pref)
	ws := uint64(BLASWorkspace)
	if err := l.check("cublasLtMatmulPreferenceSetAttribute", call(l.prefSet, pref, blasPrefWorkspace, uintptr(unsafe.Pointer(&ws)), 8)); err != nil {
		return err
	}
	if err := b.heuristic(key, p, pref); err != nil {
		return err
	}
	p.pinned = false
	return nil
}

// matmul queues y (+)= x · wᵀ on s: w [n][k] and x [m][k] bf16 (f16 with key.f16), y f32 [m][n].
func (b *blas) matmul(key blasKey, w, x, y DevicePtr, s Stream) error {
	p, err := b.plan(key)
	if err != nil {
		return err
	}
	alpha, beta := float32(1), float32(0)
	if key.residual {
		beta = 1
	}
	l := b.l
	run := func() error {
		return l.check("cublasLtMatmul", call(l.matmul, b.handle, p.desc, uintptr(unsafe.Pointer(&alpha)), uintptr(w), p.a, uintptr(x), p.b,
			uintptr(unsafe.Pointer(&beta)), uintptr(y), p.c, uintptr(y), p.c, uintptr(unsafe.Pointer(&p.algo[0])), uintptr(b.ws), BLASWorkspace, uintptr(s)))
	}
	err = run()
	if err != nil && p.pinned {
		// the pinned algorithm refused this size (checked before anything
		// ran): this size's own algorithm, and a second class for it
		if err = b.unpin(key, p); err == nil {
			err = run()
		}
	}
	return err
}

// close releases the plans and the handle (not the workspace).
func (b *blas) close() error {
	var errs []error
	for _, p := range b.plans {
		errs = append(errs, b.l.check("cublasLtMatmulDescDestroy", call(b.l.descDestroy, p.desc)))
		for _, m := range []uintptr{p.a, p.b, p.c} {
			errs = append(errs, b.l.check("cublasLtMatrixLayoutDestroy", call(b.l.layoutDestroy, m)))
		}
	}
	b.plans = nil
	if b.handle != 0 {
		errs = append(errs, b.l.check("cublasLtDestroy", call(b.l.destroy, b.handle)))
		b.handle = 0
	}
	return errors.Join(errs...)
}

// BLASThroughput times cuBLASLt's bf16 product with f32 accumulation and
// output at m×n×k, in the layout the prefill arm uses (bf16 operands, f32
// output): the median of reps products after a warm-up.
func BLASThroughput(dev *Device, m, n, k, reps int) (MatmulResult, error) {
	r := MatmulResult{Kernel: "cublasLt bf16", M: m, N: n, K: k, FLOPs: 2 * float64(m) * float64(n) * float64(k)}
	if m <= 0 || n <= 0 || k <= 0 || reps <= 0 {
		return r, fmt.Errorf("%w: matmul %d×%d×%d, %d repetitions", ErrArg, m, n, k, reps)
	}
	err := dev.Do(func(c *Ctx) (err error) {
		alloc, free := operands(c)
		defer func() { err = errors.Join(err, free()) }()
		ws, err := alloc(BLASWorkspace)
		if err != nil {
			return err
		}
		w, err := alloc(2 * n * k)
		if err != nil {
			return err
		}
		x, err := alloc(2 * m * k)
		if err != nil {
			return err
		}
		y, err := alloc(4 * m * n)
		if err != nil {
			return err
		}
		bl, err := newBLAS(ws)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, bl.close()) }()
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, c.DestroyStream(s)) }()
		key := blasKey{m: m, n: n, k: k}
		secs, err := timed(c, s, reps, func() error { return bl.matmul(key, w, x, y, s) })
		if err != nil {
			return err
		}
		r.Seconds = median(secs)
		return nil
	})
	return r, err
}
