// Package check runs one kernel family with one arm at one shape on a CUDA
// device against the CPU reference: relative error, pass, and timing (a
// warm-up, then CUDA-event timing of a graph of launches over rotating
// copies of the inputs larger than L2, median of N samples). It backs
// `memra kernel-check` and implements autotune.Runner for `memra autotune`.
package check

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// ErrCase is returned for a case that cannot be set up (bad shape or type).
var ErrCase = errors.New("check: bad case")

// Buf is a host buffer uploaded to the device. Kernels of one Launch that
// take the same *Buf share one device buffer.
type Buf struct{ Data []byte }

// Arg is a kernel argument: a buffer or a scalar (int, float32, …).
type Arg struct {
	Buf    *Buf
	Scalar any
}

// Launch is what runs for one arm: kernels in order with their arguments,
// the launch dims, and the buffers read back after the first run.
type Launch struct {
	Kernels []*codegen.Kernel
	Dims    codegen.Dims
	Args    [][]Arg // per kernel
	Outs    []*Buf
}

// inputs are a case's random inputs: how to lay them out for an arm and how
// to compare the outputs with the reference.
type inputs struct {
	launch  func(arm codegen.Point) (*Launch, error)
	compare func(outs [][]byte) (float64, error)
}

// Case is one kernel family at one shape with fixed random inputs and its
// CPU reference. Inputs are made on first use, the reference on first
// comparison; both are shared by every arm.
type Case struct {
	Family string  // codegen family, e.g. "gemv"
	Label  string  // the kernel-check family column, e.g. "gemv/qkv"
	Shape  string  // shape name (preset or model)
	DType  string  // the dtype column, e.g. "q4_k" or "f16 cache"
	Class  string  // shape class: the kernel identity without its arm
	Use    string  // what a model uses it for ("qkv", "down", …); may be empty
	Tol    float64 // the family's tolerance on RelErr (TolOf: an arm's)
	// ExtraArms are arms kernel-check runs besides the space's default.
	ExtraArms []codegen.Point
	// K is a product's row length and N its weight rows (gemv, mma; 0
	// for other families).
	K, N int
	// AnyGEMVArm says the case runs any GEMV arm of its weight type (the
	// plain products of repacked types), so kernel-check may add its
	// --gemv-arms; the fused-prologue cases take only their own arms.
	AnyGEMVArm bool

	kernels func(arm codegen.Point) ([]*codegen.Kernel, error)
	setup   func(r *rand.Rand) (*inputs, error)
	seed    uint64
	// space, when set, replaces the family's search space (gemv: the
	// layout knob restricted to the case's weight type)
	space *codegen.Space
	// capacity, when positive, is the key count decode attention's splits
	// cover (the lowering's context) instead of the longest sequence.
	capacity int

	once sync.Once
	in   *inputs
	err  error
}

// ID is "family/class", the autotune task ID.
func (c *Case) ID() string { return c.Family + "/" + c.Class }

// Space returns the family's search space.
func (c *Case) Space() codegen.Space {
	if c.space != nil {
		return *c.space
	}
	s, err := codegen.SpaceByName(c.Family)
	if err != nil {
		panic("BUG: check case of unknown family " + c.Family)
	}
	return s
}

// Kernels returns the kernels arm generates for the case.
func (c *Case) Kernels(arm codegen.Point) ([]*codegen.Kernel, error) {
	if err := c.Space().Valid(arm); err != nil {
		return nil, err
	}
	return c.kernels(arm)
}

// prepare makes the inputs once.
func (c *Case) prepare() (*inputs, error) {
	c.once.Do(func() {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", c.Label, c.Shape, c.DType, c.Class)
		c.in, c.err = c.setup(rand.New(rand.NewPCG(c.seed, h.Sum64())))
	})
	return c.in, c.err
}

// Prepare makes the case's inputs now (they are made once, on first use
// otherwise). It is safe to call from several goroutines.
func (c *Case) Prepare() error {
	_, err := c.prepare()
	return err
}

// Launch returns the launch of arm on the case's inputs.
func (c *Case) Launch(arm codegen.Point) (*Launch, error) {
	in, err := c.prepare()
	if err != nil {
		return nil, err
	}
	return in.launch(arm)
}

// Compare returns the relative error of outs (the Launch's Outs, read back)
// against the reference.
func (c *Case) Compare(outs [][]byte) (float64, error) {
	in, err := c.prepare()
	if err != nil {
		return 0, err
	}
	return in.compare(outs)
}

// ---- host data helpers ----

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func i32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func randn(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func fbuf(v []float32) *Buf { return &Buf{Data: f32Bytes(v)} }
func ibuf(v []int32) *Buf   { return &Buf{Data: i32Bytes(v)} }
func b(p *Buf) Arg          { return Arg{Buf: p} }
func s(v any) Arg           { return Arg{Scalar: v} }

// cacheValues stores v as a KV cache of type t and returns the bytes and
// the values the cache holds.
func cacheValues(t dtype.Type, kvw int, v []float32) ([]byte, []float32, error) {
	q, err := codegen.EncodeCache(t, kvw, v)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cache: %w", ErrCase, err)
	}
	back, err := codegen.DecodeCache(t, kvw, q)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cache: %w", ErrCase, err)
	}
	return q, back, nil
}

// randWeights returns n random rows of k elements stored as type t, made
// in parallel chunks of rows (rows are independent in every GGUF layout).
func randWeights(t dtype.Type, n, k int, seed uint64) ([]byte, error) {
	rowBytes, err := t.RowBytes(k)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCase, err)
	}
	out := make([]byte, n*rowBytes)
	workers := max(1, min(runtime.GOMAXPROCS(0), n/64))
	per := (n + workers - 1) / workers
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		r0, r1 := w*per, min(n, (w+1)*per)
		if r0 >= r1 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := dtype.Quantize(t, randn(rand.New(rand.NewPCG(seed, uint64(w))), (r1-r0)*k))
			if err != nil {
				errs[w] = fmt.Errorf("%w: weights: %w", ErrCase, err)
				return
			}
			copy(out[r0*rowBytes:], q)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// refMatMul is codegen.RefMatMul split over chunks of weight rows in
// parallel (the reference of a large product is otherwise slow).
func refMatMul(t dtype.Type, n, k int, W []byte, x []float32, m int, y0 []float32, bf16 bool) ([]float32, error) {
	rowBytes, err := t.RowBytes(k)
	if err != nil {
		return nil, err
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), n/32))
	per := (n + workers - 1) / workers
	y := make([]float32, m*n)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		c0, c1 := w*per, min(n, (w+1)*per)
		if c0 >= c1 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := c1 - c0
			var y0c []float32
			if y0 != nil {
				y0c = make([]float32, m*nc)
				for r := range m {
					copy(y0c[r*nc:], y0[r*n+c0:r*n+c1])
				}
			}
			yc, err := codegen.RefMatMul(t, nc, k, W[c0*rowBytes:c1*rowBytes], x, m, y0c, bf16)
			if err != nil {
				errs[w] = err
				return
			}
			for r := range m {
				copy(y[r*n+c0:r*n+c1], yc[r*nc:])
			}
		}()
	}
	wg.Wait()
	return y, errors.Join(errs...)
}

// TolOf is the tolerance of arm: the family's, or codegen.XQTol for the
// GEMV and MoE arms that quantise activations to int8 and codegen.HalfTol for
// those that round weights and activations to f16 (XQ 4), their own
// numerical classes.
func (c *Case) TolOf(arm codegen.Point) float64 {
	switch {
	case c.Family == "gemv" && arm["xq"] == 4:
		return max(c.Tol, codegen.HalfTol)
	case (c.Family == "gemv" || c.Family == "moe_gemv") && arm["xq"] != 0:
		return max(c.Tol, codegen.XQTol)
	}
	return c.Tol
}
