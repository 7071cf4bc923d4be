package check

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime/cuda"
)

// Device runs cases on one GPU, compiling through the on-disk NVRTC cache.
type Device struct {
	Dev   *cuda.Device
	Cache *cuda.Cache
	Arch  string // NVRTC target, e.g. "sm_90a"
	// RotateBytes is the least total size of the rotating input copies a
	// timing sample runs over (default: twice the device's L2).
	RotateBytes int64
	// MaxRotate caps the number of rotating copies (default 256).
	MaxRotate int

	mu     sync.Mutex
	images map[string][]byte // kernel name → module image
}

// NewDevice wraps an open device and a compile cache.
func NewDevice(dev *cuda.Device, cache *cuda.Cache) *Device {
	info := dev.Info()
	return &Device{Dev: dev, Cache: cache, Arch: info.Arch(), RotateBytes: 2 * int64(info.L2Bytes), MaxRotate: 256,
		images: map[string][]byte{}}
}

// Result is one checked, timed run of an arm.
type Result struct {
	Kernel  string    // the first kernel's name
	RelErr  float64   // against the CPU reference
	Tol     float64   // the family's tolerance
	TimeUS  float64   // median µs per run of the launch's kernels
	Samples []float64 // µs of each sample, sorted
	Rotate  int       // rotating input copies per sample
}

// Pass reports whether the output was within tolerance.
func (r Result) Pass() bool { return r.RelErr <= r.Tol && !math.IsNaN(r.RelErr) }

// Compile compiles (or finds in the cache) every kernel of arm for c. It is
// safe to call from several goroutines.
func (d *Device) Compile(c *Case, arm codegen.Point) error {
	ks, err := c.Kernels(arm)
	if err != nil {
		return err
	}
	for _, k := range ks {
		if _, err := d.image(k); err != nil {
			return err
		}
	}
	return nil
}

func (d *Device) image(k *codegen.Kernel) ([]byte, error) {
	d.mu.Lock()
	img, ok := d.images[k.Name]
	d.mu.Unlock()
	if ok {
		return img, nil
	}
	img, _, err := d.Cache.Compile(k.Source, k.Name+".cu", d.Arch, nil)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.images[k.Name] = img
	d.mu.Unlock()
	return img, nil
}

// Run runs arm for c: once on the case's inputs, compared with the
// reference; then, when reps > 0, two warm-up samples and reps timed
// samples, each a CUDA graph of the launch repeated over rotating copies of
// its buffers (together at least RotateBytes, so inputs come from memory,
// not L2), timed with events. TimeUS is the median per launch.
func (d *Device) Run(c *Case, arm codegen.Point, reps int) (Result, error) {
	res, outs, err := d.run(c, arm, reps)
	if err != nil {
		return res, err
	}
	if res.RelErr, err = c.Compare(outs); err != nil {
		return res, err
	}
	if len(res.Samples) > 0 {
		sort.Float64s(res.Samples)
		res.TimeUS = median(res.Samples)
	}
	return res, nil
}

// Outputs runs arm once on the case's inputs and returns its outputs as
// the device wrote them, for comparisons of arms bit for bit.
func (d *Device) Outputs(c *Case, arm codegen.Point) ([][]byte, error) {
	_, outs, err := d.run(c, arm, 0)
	return outs, err
}

// run launches arm on the case's inputs, reads its outputs back and, for
// reps > 0, times it.
func (d *Device) run(c *Case, arm codegen.Point, reps int) (Result, [][]byte, error) {
	l, err := c.Launch(arm)
	if err != nil {
		return Result{}, nil, err
	}
	res := Result{Kernel: l.Kernels[0].Name, Tol: c.TolOf(arm)}
	images := make([][]byte, len(l.Kernels))
	for i, k := range l.Kernels {
		if images[i], err = d.image(k); err != nil {
			return res, nil, err
		}
	}
	var outs [][]byte
	err = d.Dev.Do(func(x *cuda.Ctx) error {
		r := &run{x: x, l: l}
		defer r.free()
		if err := r.load(images); err != nil {
			return err
		}
		if err := r.upload(); err != nil {
			return err
		}
		if err := r.launchSet(0, 0); err != nil {
			return err
		}
		if err := x.Synchronize(); err != nil {
			return err
		}
		var err error
		if outs, err = r.readOuts(); err != nil {
			return err
		}
		if reps <= 0 {
			return nil
		}
		res.Rotate = rotations(r.setBytes, d.RotateBytes, d.MaxRotate)
		res.Samples, err = r.time(res.Rotate, reps)
		return err
	})
	if err != nil {
		return res, nil, fmt.Errorf("%s: %w", res.Kernel, err)
	}
	return res, outs, nil
}

// rotations is how many copies of a set of setBytes make at least want
// bytes, between 1 and limit.
func rotations(setBytes, want int64, limit int) int {
	if setBytes <= 0 {
		return 1
	}
	n := (want + setBytes - 1) / setBytes
	return int(max(1, min(n, int64(max(1, limit)))))
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
