package cpu

import (
	"bufio"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memra-ai/memra/ir/dtype"
)

// Peak is what MeasurePeak measured of this machine: the roofline a CPU
// bench reports its rates against.
type Peak struct {
	Model     string  `json:"cpu"`              // the CPU's model name
	Kernels   string  `json:"int8_kernels"`     // the int8 products' instruction set (dtype.Q8Kernels)
	Threads   int     `json:"threads"`          // threads measured together
	CopyBytes int64   `json:"copy_bytes"`       // bytes of the copy
	CopyBW    float64 `json:"copy_bytes_per_s"` // bytes read + written a second
	FMAUnit   string  `json:"fma_unit"`         // the register of the FMA loop: zmm, ymm or none
	FMAFLOPs  float64 `json:"fma_flops"`        // float32 FMA peak, 2 FLOPs per multiply-add
	Int8Ops   float64 `json:"int8_ops"`         // int8 multiply-add peak of the product kernels' instruction, 2 ops each
}

// MeasurePeak times, on threads threads at once (0: all cores), a copy of
// copyBytes (split between them; read and write bytes counted), a loop of
// independent float32 fused multiply-adds and one of the int8 products'
// multiply-add instruction, each the median of reps runs.
func MeasurePeak(threads int, copyBytes int64, reps int) Peak {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	reps = max(reps, 1)
	p := Peak{Model: cpuModel(), Kernels: dtype.Q8Kernels(), Threads: threads, CopyBytes: copyBytes, FMAUnit: fmaUnit}
	src, dst := make([]byte, copyBytes), make([]byte, copyBytes)
	for i := range src {
		src[i] = byte(i) // touch every page before the clock runs
	}
	copy(dst, src)
	p.CopyBW = medianRate(reps, float64(2*copyBytes), func() {
		onThreads(threads, func(w int) {
			lo, hi := int64(w)*copyBytes/int64(threads), int64(w+1)*copyBytes/int64(threads)
			copy(dst[lo:hi], src[lo:hi])
		})
	})
	// calibrate the loops to about 50 ms a run
	iters := func(loop func(int) float64) (int, float64) {
		n := 1 << 16
		for {
			t0 := time.Now()
			ops := loop(n)
			if d := time.Since(t0); d > 10*time.Millisecond || ops == 0 {
				return max(n, int(float64(n)*float64(50*time.Millisecond)/float64(max(d, 1)))), ops / float64(n)
			}
			n *= 4
		}
	}
	if n, per := iters(fmaLoop); per > 0 {
		p.FMAFLOPs = medianRate(reps, per*float64(n)*float64(threads), func() { onThreads(threads, func(int) { fmaLoop(n) }) })
	}
	if n, per := iters(int8Loop); per > 0 {
		p.Int8Ops = medianRate(reps, per*float64(n)*float64(threads), func() { onThreads(threads, func(int) { int8Loop(n) }) })
	}
	return p
}

// medianRate runs f reps times and returns the median of work/seconds.
func medianRate(reps int, work float64, f func()) float64 {
	rates := make([]float64, reps)
	for i := range rates {
		t0 := time.Now()
		f()
		rates[i] = work / time.Since(t0).Seconds()
	}
	slices.Sort(rates)
	return rates[reps/2]
}

// onThreads runs f(0..n−1) on n goroutines, each locked to its thread.
func onThreads(n int, f func(w int)) {
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f(w)
		}()
	}
	wg.Wait()
}

// cpuModel is the "model name" of /proc/cpuinfo, or GOARCH where there is
// none.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
