package cuda

import (
	"errors"
	"fmt"
	"slices"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// Device returns the GPU the backend runs on, for measurements beside it.
func (b *Backend) Device() *Device { return b.dev }

// median returns the median of v (sorted in place).
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// timed runs work reps times on stream s between CUDA events (after one
// untimed run) and returns the seconds of each run.
func timed(c *Ctx, s Stream, reps int, work func() error) ([]float64, error) {
	start, err := c.NewEvent()
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.DestroyEvent(start) }()
	end, err := c.NewEvent()
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.DestroyEvent(end) }()
	if err := work(); err != nil {
		return nil, err
	}
	var secs []float64
	for range reps {
		if err := c.Record(start, s); err != nil {
			return nil, err
		}
		if err := work(); err != nil {
			return nil, err
		}
		if err := c.Record(end, s); err != nil {
			return nil, err
		}
		if err := c.EventSync(end); err != nil {
			return nil, err
		}
		ms, err := c.Elapsed(start, end)
		if err != nil {
			return nil, err
		}
		secs = append(secs, float64(ms)/1e3)
	}
	return secs, nil
}

// CopyBandwidth measures device-to-device copy bandwidth: cuMemcpyDtoDAsync
// of n bytes (at least 2 GiB is the roofline convention), timed with CUDA
// events, counting read plus write bytes (2n per copy). It returns the
// median over reps copies (after a warm-up copy) in bytes per second.
func CopyBandwidth(dev *Device, n int64, reps int) (float64, error) {
	if n <= 0 || reps <= 0 {
		return 0, fmt.Errorf("%w: copy of %d bytes, %d repetitions", ErrArg, n, reps)
	}
	var bw float64
	err := dev.Do(func(c *Ctx) (err error) {
		src, err := c.Alloc(int(n))
		if err != nil {
			return fmt.Errorf("%w: copy source of %d bytes: %w", ErrMemory, n, err)
		}
		defer func() { err = errors.Join(err, c.Free(src)) }()
		dst, err := c.Alloc(int(n))
		if err != nil {
			return fmt.Errorf("%w: copy destination of %d bytes: %w", ErrMemory, n, err)
		}
		defer func() { err = errors.Join(err, c.Free(dst)) }()
		if err := c.Memset(src, 0x5a, int(n)); err != nil {
			return err
		}
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, c.DestroyStream(s)) }()
		secs, err := timed(c, s, reps, func() error { return c.CopyDtoDAsync(dst, src, int(n), s) })
		if err != nil {
			return err
		}
		bw = 2 * float64(n) / median(secs)
		return nil
	})
	return bw, err
}

// operands returns an allocator of device buffers filled with 0x3c bytes,
// small normal numbers in bf16, f16 and f32 alike (nonzero operands, so a
// timing is not that of zeros), and the function that frees them.
func operands(c *Ctx) (alloc func(n int) (DevicePtr, error), free func() error) {
	var bufs []DevicePtr
	alloc = func(n int) (DevicePtr, error) {
		p, err := c.Alloc(n)
		if err != nil {
			return 0, fmt.Errorf("%w: %d bytes: %w", ErrMemory, n, err)
		}
		bufs = append(bufs, p)
		return p, c.Memset(p, 0x3c, n)
	}
	free = func() error {
		var errs []error
		for _, p := range bufs {
			errs = append(errs, c.Free(p))
		}
		return errors.Join(errs...)
	}
	return alloc, free
}

// MatmulResult is what MatmulThroughput measured.
type MatmulResult struct {
	Kernel  string  // the kernel's name
	M, N, K int     // y[M][N] = x[M][K]·W[N][K]ᵀ
	FLOPs   float64 // 2·M·N·K
	Seconds float64 // median seconds per product
}

// TFLOPs is the achieved rate in TFLOP/s.
func (r MatmulResult) TFLOPs() float64 { return r.FLOPs / r.Seconds / 1e12 }

// MatmulThroughput times the tensor-core product family the backend uses
// for prompt processing (codegen.MatMulMMA, mma.sync bf16 with f32
// accumulation, BF16 weights) with arm (zero: the default arm) at m×n×k:
// the median of reps products after a warm-up. cacheDir is the NVRTC
// cubin cache ("" for the default).
func MatmulThroughput(dev *Device, m, n, k, reps int, arm codegen.MMAArm, cacheDir string) (MatmulResult, error) {
	r := MatmulResult{M: m, N: n, K: k, FLOPs: 2 * float64(m) * float64(n) * float64(k)}
	if m <= 0 || n <= 0 || k <= 0 || reps <= 0 {
		return r, fmt.Errorf("%w: matmul %d×%d×%d, %d repetitions", ErrArg, m, n, k, reps)
	}
	if arm == (codegen.MMAArm{}) {
		arm = codegen.DefaultMMAArm
	}
	kern, err := codegen.MatMulMMA(dtype.BF16, n, k, false, arm.ForK(k))
	if err != nil {
		return r, err
	}
	r.Kernel = kern.Name
	nv, err := LoadNVRTC()
	if err != nil {
		return r, err
	}
	cache, err := NewCache(cacheDir, nv)
	if err != nil {
		return r, err
	}
	img, _, err := cache.Compile(kern.Source, kern.Name+".cu", dev.Info().Arch(), nil)
	if err != nil {
		return r, fmt.Errorf("kernel %s: %w", kern.Name, err)
	}
	geo := kern.Launch(codegen.Dims{Tokens: m, Seqs: 1})
	err = dev.Do(func(c *Ctx) (err error) {
		mod, err := c.LoadModule(img)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, c.UnloadModule(mod)) }()
		f, err := c.Function(mod, kern.Name)
		if err != nil {
			return err
		}
		if geo.SharedOverDefault() {
			if err := c.SetMaxDynamicShared(f, int(geo.Shared)); err != nil {
				return err
			}
		}
		alloc, free := operands(c)
		defer func() { err = errors.Join(err, free()) }()
		w, err := alloc(2 * n * k)
		if err != nil {
			return err
		}
		x, err := alloc(4 * m * k)
		if err != nil {
			return err
		}
		y, err := alloc(4 * m * n)
		if err != nil {
			return err
		}
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, c.DestroyStream(s)) }()
		cfg := LaunchConfig{Grid: geo.Grid, Block: geo.Block, Shared: geo.Shared, Stream: s}
		secs, err := timed(c, s, reps, func() error { return c.Launch(f, cfg, w, x, y, int32(m)) })
		if err != nil {
			return err
		}
		r.Seconds = median(secs)
		return nil
	})
	return r, err
}
