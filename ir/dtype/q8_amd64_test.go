//go:build amd64 && !purego

package dtype

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/require"
)

// TestQ8KernelsNoDiff runs every assembly kernel this CPU has (each kernel
// set, each token count) against the portable kernels and requires the
// same bits: random and extreme blocks, rows that are not a whole tile,
// one to five super-blocks, activations of varied scale, and token blocks
// of every size up to the kernel's.
func TestQ8KernelsNoDiff(t *testing.T) {
	sets := q8KernelSets()
	if len(sets) == 0 {
		t.Skip("CPU has neither AVX2+FMA+F16C nor AVX-512 VNNI: only the portable kernels run")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, set := range sets {
		for _, ty := range q8Types {
			ks := set.kernels[ty]
			require.NotEmpty(t, ks, "%s has no %v kernels", set.name, ty)
			sb := q8Formats[ty].sb
			for _, shape := range [][2]int{{16, sb}, {5, 3 * sb}, {37, 2 * sb}, {16, 5 * sb}} {
				for _, extreme := range []bool{false, true} {
					rows, cols := shape[0], shape[1]
					p, err := Pack(ty, randomMatrix(ty, rows, cols, r, extreme), rows, cols)
					require.NoError(t, err)
					M := 2*len(ks) + 1
					a, _ := randomActs(M, cols, r)
					want := make([]float32, M*rows)
					productWith(t, nil, p, a, 0, want)
					for block := 1; block <= len(ks); block++ {
						got := make([]float32, M*rows)
						productWith(t, &set, p, a, block, got)
						for i := range want {
							if math.Float32bits(want[i]) != math.Float32bits(got[i]) && !(isNaN32(want[i]) && isNaN32(got[i])) {
								t.Fatalf("%s %v %dx%d extreme=%v block %d: element %d (token %d, row %d): got %g, want %g",
									set.name, ty, rows, cols, extreme, block, i, i/rows, i%rows, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestFloatKernelsNoDiff is TestQ8KernelsNoDiff for the float products:
// F32, F16 and BF16 tiles, odd row counts, every token block.
func TestFloatKernelsNoDiff(t *testing.T) {
	sets := q8KernelSets()
	if len(sets) == 0 {
		t.Skip("no assembly kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, set := range sets {
		for _, ty := range floatTypes {
			ks := set.floats[ty]
			require.NotEmpty(t, ks, "%s has no %v kernels", set.name, ty)
			for _, shape := range [][2]int{{16, 4}, {5, 12}, {37, 64}, {16, 100}} {
				rows, cols := shape[0], shape[1]
				p, err := Pack(ty, randomMatrix(ty, rows, cols, r, false), rows, cols)
				require.NoError(t, err)
				M := 2*len(ks) + 1
				x := make([]float32, M*cols)
				for i := range x {
					x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(10)-5))
				}
				want := make([]float32, M*rows)
				floatProductWith(nil, p, x, 0, want)
				for block := 1; block <= len(ks); block++ {
					got := make([]float32, M*rows)
					floatProductWith(&set, p, x, block, got)
					for i := range want {
						if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
							t.Fatalf("%s %v %dx%d block %d: element %d (token %d, row %d): got %g, want %g",
								set.name, ty, rows, cols, block, i, i/rows, i%rows, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func isNaN32(f float32) bool { return f != f }

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkQ8Product times one thread's product of a 2048 × 4096 matrix
// with 1 and 64 tokens, per type and kernel set: the weight bytes a second
// (GB/s) and multiply-adds a second (GMAC/s).
func BenchmarkQ8Product(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const rows, cols = 2048, 4096
	for _, ty := range []Type{Q4_K, Q6_K, Q8_0, Q4_0, Q5_K, IQ4_XS, IQ4_NL} {
		p, err := Pack(ty, randomMatrix(ty, rows, cols, r, false), rows, cols)
		require.NoError(b, err)
		for _, M := range []int{1, 64} {
			a, _ := randomActs(M, cols, r)
			y := make([]float32, M*rows)
			for _, set := range append(q8KernelSets(), q8KernelSet{name: "go"}) {
				if set.name == "go" && M > 1 {
					continue
				}
				b.Run(ty.String()+"/"+set.name+"/M"+strconv.Itoa(M), func(b *testing.B) {
					s := &set
					if set.kernels == nil {
						s = nil
					}
					saved := q8Active.Load()
					q8Active.Store(s)
					defer q8Active.Store(saved)
					// thread CPU time, not wall time: the machine is shared
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c0 := threadCPU()
					for b.Loop() {
						p.Product(a, 0, p.Tiles, 0, M, 0, y, rows)
					}
					sec := (threadCPU() - c0).Seconds() / float64(b.N)
					b.ReportMetric(sec*1e9, "cpu-ns/op")
					b.ReportMetric(float64(len(p.Data))/sec/1e9, "GB/s")
					b.ReportMetric(float64(rows)*cols*float64(M)/sec/1e9, "GMAC/s")
				})
			}
		}
	}
}

// TestQuantizeActsNoDiff holds the assembly quantisers to quantizeGroup,
// bit for bit: codes and every group field, on groups of varied scale,
// zero, tiny (below 2⁻¹⁰⁰), with ties of the rounding, and with a NaN or
// an infinity.
func TestQuantizeActsNoDiff(t *testing.T) {
	sets := q8KernelSets()
	if len(sets) == 0 {
		t.Skip("no assembly kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(21, 22))
	const groups = 64
	x := make([]float32, 32*groups)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(60)-30))
	}
	for i := 0; i < 32; i++ {
		x[32+i] = 0                          // group 1: zero
		x[64+i] = float32(i) * 1e-32         // group 2: tiny
		x[96+i] = float32(i-16) * 127 / 32.0 // group 3: ties of the rounding
		x[128+i] = float32(i%3) - 1          // group 4: -1, 0, 1
	}
	x[96+31] = 127
	x[160+7] = float32(math.NaN())
	x[192+9] = float32(math.Inf(1))
	x[224+3] = float32(math.Inf(-1))
	x[256+5] = math.MaxFloat32 // finite
	var want Acts
	want.Reset(1, len(x))
	for g := range groups {
		quantizeGroup(x[32*g:32*g+32], want.Q[32*g:32*g+32], &want.G[g])
	}
	for _, s := range sets {
		var got Acts
		got.Reset(1, len(x))
		s.quantize(&x[0], &got.Q[0], &got.G[0], groups)
		require.Equal(t, want.Q, got.Q, s.name)
		for g := range groups {
			w, gg := want.G[g], got.G[g]
			require.Equal(t, math.Float32bits(w.D), math.Float32bits(gg.D), "%s group %d D", s.name, g)
			require.Equal(t, math.Float32bits(w.SD), math.Float32bits(gg.SD), "%s group %d SD", s.name, g)
			w.D, w.SD, gg.D, gg.SD = 0, 0, 0, 0
			require.Equal(t, w, gg, "%s group %d", s.name, g)
		}
	}
}
