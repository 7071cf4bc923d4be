package dtype

import (
	"fmt"
	"strconv"
	"sync/atomic"
)

//go:generate go run ./internal/q8gen -s q8_amd64.s -go q8_kernels_amd64.go

// q8Kernel computes the products of one packed tile (nsb super-blocks of 16
// rows) with the T tokens whose codes start at x, stride bytes apart (their
// groups at g, with the same stride), and stores token t's 16 results at
// out + t·ldo bytes.
type q8Kernel func(tile *byte, nsb int, x *int8, g *ActGroup, stride int, out *float32, ldo int)

// q8KernelSet is one instruction set's kernels: by type, by tokens less one.
type q8KernelSet struct {
	name     string
	kernels  map[Type][]q8Kernel
	quantize func(x *float32, q *int8, groups *ActGroup, n int) // n groups of 32
	floats   map[Type][]floatKernel
}

// q8Portable is the name of the Go kernels.
const q8Portable = "go"

// q8Active is the kernel set Product uses (nil: the portable kernels).
var q8Active atomic.Pointer[q8KernelSet]

func init() {
	if sets := q8KernelSets(); len(sets) > 0 {
		q8Active.Store(&sets[0])
	}
}

// Q8Kernels names the instruction set of the int8 products Product runs:
// "avx512vnni", "avx2" or "go".
func Q8Kernels() string {
	if s := q8Active.Load(); s != nil {
		return s.name
	}
	return q8Portable
}

// Q8KernelSets lists the kernel sets this CPU can run, best first, ending
// with "go".
func Q8KernelSets() []string {
	var out []string
	for _, s := range q8KernelSets() {
		out = append(out, s.name)
	}
	return append(out, q8Portable)
}

// SetQ8Kernels makes Product use the named kernel set (one of
// Q8KernelSets), for every product from then on; benchmarks and tests
// compare them with it.
func SetQ8Kernels(name string) error {
	if name == q8Portable {
		q8Active.Store(nil)
		return nil
	}
	for _, s := range q8KernelSets() {
		if s.name == name {
			q8Active.Store(&s)
			return nil
		}
	}
	return fmt.Errorf("%w: no int8 kernel set %q on this CPU (have %v)", ErrType, name, Q8KernelSets())
}

// MaxTokenBlock is the most tokens one kernel call of p's type takes with
// the active kernel set (the portable kernels take any number; 8 is
// reported for them).
func (p *Packed) MaxTokenBlock() int {
	if s := q8Active.Load(); s != nil {
		if ks := s.kernels[p.Type]; len(ks) > 0 {
			return len(ks)
		}
		if ks := s.floats[p.Type]; len(ks) > 0 {
			return len(ks)
		}
	}
	return 8
}

// Product sets y[m·ldy + 16·i + r] to the product of row 16·i + r of p with
// token m of a, for tiles i in [tile0, tile1), tokens m in [m0, m1) and the
// rows that exist. Tiles are the outer loop: one tile's weights serve all
// the tokens, block tokens at a time (at most MaxTokenBlock; 0 means the
// most), while they stay in cache. a must hold rows of p.Cols elements.
func (p *Packed) Product(a *Acts, tile0, tile1, m0, m1, block int, y []float32, ldy int) {
	if p.Float() {
		panic("BUG: dtype.Packed.Product on " + p.Type.String() + ": use ProductFloat")
	}
	if a.K != p.Cols {
		panic("BUG: dtype.Packed.Product: activations of " + strconv.Itoa(a.K) + " elements for rows of " + strconv.Itoa(p.Cols))
	}
	if m1 > a.M || m0 < 0 || tile1 > p.Tiles {
		panic("BUG: dtype.Packed.Product: tokens or tiles out of range")
	}
	var ks []q8Kernel
	if s := q8Active.Load(); s != nil {
		ks = s.kernels[p.Type]
	}
	maxT := 8
	if len(ks) > 0 {
		maxT = len(ks)
	}
	if block <= 0 || block > maxT {
		block = maxT
	}
	var out [PackRows * 8]float32
	nsb := p.Cols / p.f.sb
	K := a.K
	for i := tile0; i < tile1; i++ {
		tile := p.Tile(i)
		rows := min(PackRows, p.Rows-i*PackRows)
		for m := m0; m < m1; {
			T := min(block, m1-m)
			switch {
			case ks == nil:
				productRef(p, tile, a, m, T, out[:])
			case rows == PackRows:
				// whole tile: straight into y (bounds checked here)
				_ = y[(m+T-1)*ldy+i*PackRows+PackRows-1]
				ks[T-1](&tile[0], nsb, &a.Q[m*K], &a.G[m*K/ActGroupSize], K, &y[m*ldy+i*PackRows], 4*ldy)
				m += T
				continue
			default:
				ks[T-1](&tile[0], nsb, &a.Q[m*K], &a.G[m*K/ActGroupSize], K, &out[0], 4*PackRows)
			}
			for t := range T {
				copy(y[(m+t)*ldy+i*PackRows:(m+t)*ldy+i*PackRows+rows], out[PackRows*t:PackRows*t+rows])
			}
			m += T
		}
	}
}
