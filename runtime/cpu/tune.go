package cpu

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/memra-ai/memra/ir/dtype"
)

// ProductClass names the product of a weight of type t, n rows of k
// elements, in the CPU tunedb: "q4_k_n8192_k2048".
func ProductClass(t dtype.Type, n, k int) string {
	return strings.ToLower(t.String()) + "_n" + strconv.Itoa(n) + "_k" + strconv.Itoa(k)
}

// TileArms are the blockings the autotuner tries for a product of type t
// with m tokens: every token block the kernel takes (0, its most, first)
// times every token tile below m (0, all, first). The first is the default.
func TileArms(t dtype.Type, m int) []Tiles {
	most := 8
	if p, err := dtype.NewPacked(t, 1, packCols(t)); err == nil {
		most = p.MaxTokenBlock()
	}
	var out []Tiles
	for b := 0; b < most; b++ { // 0 stands for most
		for _, tt := range []int{0, 16, 32, 64, 128, 256} {
			if tt == 0 || tt < m {
				out = append(out, Tiles{TokenBlock: b, TokenTile: tt})
			}
		}
	}
	return out
}

// packCols is the smallest row the int8 or float product of t takes.
func packCols(t dtype.Type) int {
	for _, k := range []int{4, 32, 256} {
		if dtype.Packable(t, k) {
			return k
		}
	}
	return 256
}

// TimeProduct times the int8 (or float) product of a random weight of
// type t, n rows of k elements, with m random tokens, on the calling
// goroutine's thread, once per arm in turn, reps rounds; it returns each
// arm's median. The time is the thread's CPU time where the system has
// one (Linux), so other load on the machine does not choose the winner.
func TimeProduct(t dtype.Type, n, k, m int, arms []Tiles, reps int) ([]time.Duration, error) {
	r := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	p, err := dtype.NewPacked(t, n, k)
	if err != nil {
		return nil, err
	}
	for i := range p.Data {
		p.Data[i] = byte(r.Uint32())
	}
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	var a dtype.Acts
	if !p.Float() {
		a.Quantize(x, k)
	}
	y := make([]float32, m*n)
	run := func(arm Tiles) {
		tt := arm.TokenTile
		if tt <= 0 {
			tt = m
		}
		for m0 := 0; m0 < m; m0 += tt {
			m1 := min(m0+tt, m)
			if p.Float() {
				p.ProductFloat(x, 0, p.Tiles, m0, m1, arm.TokenBlock, y, n)
			} else {
				p.Product(&a, 0, p.Tiles, m0, m1, arm.TokenBlock, y, n)
			}
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	run(arms[0]) // warm the weights into cache as far as they fit
	times := make([][]time.Duration, len(arms))
	for range max(reps, 1) {
		for i, arm := range arms {
			c0 := threadTime()
			run(arm)
			times[i] = append(times[i], threadTime()-c0)
		}
	}
	out := make([]time.Duration, len(arms))
	for i, ts := range times {
		slices.Sort(ts)
		out[i] = ts[len(ts)/2]
	}
	return out, nil
}

// ModelName is the CPU's model name (/proc/cpuinfo), or GOARCH.
func ModelName() string { return cpuModel() }
