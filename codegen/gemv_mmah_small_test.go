package codegen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// mmahBlocks mirrors a step of m rows of an XQ 4 arm of mb rows a block
// whose K is split over nks warps: each warp's sums (mmahWarpOf, stale
// token slots for a small arm), added as emitMMA8Finish adds them (warp 0,
// then warps 1, 2, … in order, in f32). It returns y[token][row].
func mmahBlocks(t *testing.T, ty dtype.Type, n, k, m, mb, nks int, rp, xh []byte) []float32 {
	got := make([]float32, m*n)
	seen := 0
	stale := mb <= 8
	for m0 := 0; m0 < m; m0 += mb {
		for r0 := 0; r0 < n; r0 += 16 {
			sum := mmahWarpOf(ty, n, k, r0, m0, m, mb, rp, xh, 0, nks, stale)
			for ks := 1; ks < nks; ks++ {
				for key, v := range mmahWarpOf(ty, n, k, r0, m0, m, mb, rp, xh, ks, nks, stale) {
					sum[key] += v
				}
			}
			for key, v := range sum {
				got[key[0]*n+key[1]] = v
				seen++
			}
		}
	}
	require.Equal(t, n*m, seen, "every (token, row) stored once")
	return got
}

// TestSmallMirror: the f16 product in blocks of 8 rows (a small arm, its
// ring slots past the step's rows never copied: NaN in the mirror) and of
// 16, over steps of 1, 2, 5 and 8 rows, K split over 1, 4 or 8 warps
// (with 8, warps past the row's four super-blocks add nothing), gives
// each (token, row) the float product within HalfTol, finite (the stale
// slots reach no stored sum); a row's sums are the same bits whatever
// the step's width and whichever of the two block sizes, and for a
// given split only (the batch-invariant configuration needs one arm).
func TestSmallMirror(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 8))
	const n, k = 40, 1024 // ragged weight rows (two tiles and a half), four super-blocks
	for _, ty := range HalfTypes() {
		w, rp := randRepacked(t, r, ty, n, k)
		x := make([]float32, 8*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for _, nks := range []int{1, 4, 8} {
			alone := map[int][]float32{} // row j's sums in a step of its own
			for j := range 8 {
				alone[j] = mmahBlocks(t, ty, n, k, 1, 8, nks, rp, xhalfRows(x[j*k:(j+1)*k], 1, k))
			}
			for _, mb := range []int{8, 16} {
				for _, m := range SmallCheckRowsMirror {
					t.Run(fmt.Sprintf("%v/mb%d/ks%d/m%d", ty, mb, nks, m), func(t *testing.T) {
						want, err := RefMatMul(ty, n, k, w, x[:m*k], m, nil, false)
						require.NoError(t, err)
						got := mmahBlocks(t, ty, n, k, m, mb, nks, rp, xhalfRows(x[:m*k], m, k))
						for i, v := range got {
							require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "y[%d] %v: a stale slot reached a stored sum", i, v)
						}
						e := RelErr(got, want)
						require.Less(t, e, HalfTol)
						require.Greater(t, e, 1e-6, "f16 rounding leaves a trace")
						for j := range m {
							require.Equal(t, alone[j], got[j*n:(j+1)*n], "row %d of a step of %d: the bits of its step of one", j, m)
						}
					})
				}
			}
		}
		// another split adds in another order: some sum differs in its last bits
		one := mmahBlocks(t, ty, n, k, 5, 8, 1, rp, xhalfRows(x[:5*k], 5, k))
		four := mmahBlocks(t, ty, n, k, 5, 8, 4, rp, xhalfRows(x[:5*k], 5, k))
		require.NotEqual(t, one, four, "%v: the split's order shows", ty)
	}
}

// SmallCheckRowsMirror are the step rows of TestSmallMirror (those of
// kernel-check's small cases).
var SmallCheckRowsMirror = []int{1, 2, 5, 8}

// TestSmallArmParse: the small arms print and parse back, are points of
// the gemv space (what the tunedb stores) and of the small space, have
// the shared memory and registers their comments give, and arms past a
// block's registers or shared memory are refused.
func TestSmallArmParse(t *testing.T) {
	names := []string{"t512_r1_u2_s1_l1_h8_w2_p2", "t256_r1_u2_s1_l1_h8_p4", "t256_r1_u2_s1_l1_h8_w2_p4", "t256_r1_u1_s1_l1_h8_w4_p8", "t128_r1_u2_s1_l1_h8_p4"}
	// KiB of shared memory over Q4_K and Q6_K, and registers, as SmallArms' comment gives them
	kib := [][2]float64{{80, 92}, {52, 61}, {72, 90}, {112, 148}, {26, 30.5}}
	regs := []int{96, 68, 96, 152, 68}
	gemv, err := SpaceByName("gemv")
	require.NoError(t, err)
	require.Len(t, SmallArms(), len(names))
	for i, a := range SmallArms() {
		require.Equal(t, names[i], a.String())
		b, err := ParseGEMVArm(names[i])
		require.NoError(t, err, names[i])
		require.Equal(t, a, b)
		require.Equal(t, a, GEMVArmOf(a.Point()))
		require.True(t, a.smallBatch(), names[i])
		require.NoError(t, gemv.Valid(a.Point()), names[i])
		require.Equal(t, kib[i][0], float64(a.mmahShared(mma8PipeTypes[dtype.Q4_K]))/1024, names[i])
		require.Equal(t, kib[i][1], float64(a.mmahShared(mma8PipeTypes[dtype.Q6_K]))/1024, names[i])
		require.Equal(t, regs[i], a.mmahRegs(), names[i])
		for _, ty := range HalfTypes() {
			sp := GEMVSmallSpaceFor(ty)
			require.NoError(t, sp.Valid(a.Point()), names[i])
		}
	}
	require.False(t, DefaultXQHalfArm.smallBatch())
	require.Equal(t, 104, DefaultXQHalfArm.mmahRegs(), "the default within 128 a thread of 512")
	for _, ty := range HalfTypes() {
		sp := GEMVSmallSpaceFor(ty)
		require.NoError(t, sp.Valid(DefaultXQHalfArm.Point()), "the 16-row baseline")
		require.Equal(t, DefaultXQHalfArm.Point(), sp.Default)
		require.ErrorIs(t, sp.Valid(DefaultXQMMAPipeArm.Point()), ErrUnsupported, "int8")
		require.ErrorIs(t, sp.Valid(DefaultXQHalfWideArm.Point()), ErrUnsupported, "wide")
		arms := sp.Arms()
		require.Greater(t, len(arms), 40, "%v", ty)
		for _, p := range arms {
			a := GEMVArmOf(p)
			require.True(t, a.XQ == 4 && a.BatchRows <= 16, "%v", p)
			require.LessOrEqual(t, a.mmahRegs(), a.mmahRegLimit(), "%v", p)
			require.LessOrEqual(t, a.mmahMaxShared(), xqMaxShared, "%v", p)
		}
		for _, a := range SmallArms() {
			require.Contains(t, arms, a.Point())
		}
	}
	for _, bad := range []string{
		"t512_r1_u1_s1_l1_h8_w4_p8",  // 152 registers, 128 a thread of 512
		"t1024_r1_u2_s1_l1_h8_w2_p2", // 96 registers, 64 a thread of 1024
		"t256_r1_u2_s1_l1_h8_w4_p8",  // 16 ring slots
		"t512_r1_u2_s1_l1_h8_w4_p4",  // past 227 KiB
		"t256_r1_u2_s1_l1_h8_w2",     // no ring
		"t256_r1_u2_s1_l1_h8_w3_p4",  // one, two or four tiles
	} {
		_, err := ParseGEMVArm(bad)
		require.ErrorIs(t, err, ErrUnsupported, bad)
	}
}

// TestSmallKernel: a small arm's kernel has one tile of tokens, copies
// only the step's tokens into its ring (the 16-row kernel copies every
// slot), runs one block a step of 8 rows, asks for its shared memory and
// runs the ring's schedule.
func TestSmallKernel(t *testing.T) {
	for _, ty := range HalfTypes() {
		for _, a := range SmallArms() {
			k, err := GEMVXQ(ty, 3*4096, 4096, false, a, XQEnds{}, 0)
			require.NoError(t, err)
			src := k.Source
			require.Contains(t, src, "#define MB 8 ")
			require.Contains(t, src, "#define NT 1 ")
			require.Contains(t, src, "const bool xk0 = xc0 < 4 * 8 * NT && xt0 < mrows;", "only the step's tokens are copied")
			require.Equal(t, 1, strings.Count(src, "const bool xk"), "a token chunk a lane: 4·8 over 32 lanes")
			require.Equal(t, 2*8*a.rowsPerWarp(), strings.Count(src, "mma_h16(acc["), "two mma a tile and group")
			require.Contains(t, src, fmt.Sprintf("#define KS %d ", a.Threads/32))
			for rows, blocks := range map[int]uint32{1: 1, 2: 1, 5: 1, 8: 1, 9: 2, 16: 2} {
				g := k.Launch(Dims{Tokens: rows})
				require.Equal(t, blocks, g.Grid[1], "%v at %d rows", a, rows)
				require.Equal(t, uint32(ceilDiv(3*4096, 16*a.rowsPerWarp())), g.Grid[0])
				require.Equal(t, uint32(a.mmahShared(mma8PipeTypes[ty])), g.Shared)
			}
			small, err := GEMVXQ(ty, 256, 2048, true, a, XQEnds{NormIn: true, NormEps: 1e-5}, 0)
			require.NoError(t, err)
			for nsb := 1; nsb <= 5; nsb++ {
				require.NoError(t, simulatePipe(small.Source, a.Stages, nsb), "%v %v, %d super-blocks", ty, a, nsb)
			}
		}
		d, err := GEMVXQ(ty, 3*4096, 4096, false, DefaultXQHalfArm, XQEnds{}, 0)
		require.NoError(t, err)
		require.Contains(t, d.Source, "const bool xk0 = xc0 < 4 * 8 * NT;\n", "the 16-row kernel copies every slot")
	}
}

// TestLowerSmall: a tunedb pick of a small arm for a product's
// GEMVSmallClass gives each f16 product that kernel for 3 to 8 rows
// (and the wide kernel from 9, at 16 or 64 sequences), and in the
// batch-invariant configuration at every width; untuned, or for a pick
// that is no f16 arm of at most 16 rows, the programs are as before.
func TestLowerSmall(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 16, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch}
	arm := SmallArms()[1]
	picks := map[string]bool{}
	pick := func(p Point) ArmPicker {
		return func(family, class string) (Point, bool) {
			if family == "gemv" && strings.HasSuffix(class, "_small") {
				picks[class] = true
				return p, true
			}
			return nil, false
		}
	}
	names := func(p *Program) map[string]bool {
		m := map[string]bool{}
		for _, k := range p.Kernels {
			m[k.Name] = true
		}
		return m
	}
	// large counts the launches whose kernel at rows has the arm name part
	large := func(p *Program, rows int, part string) (n int) {
		for _, ln := range p.Launches {
			if strings.Contains(p.Kernels[ln.KernelFor(rows)].Name, part) {
				n++
			}
		}
		return n
	}
	untuned, err := Lower(g, o)
	require.NoError(t, err)
	halves := large(untuned, 5, "_h16_")
	require.Equal(t, 5*llama.Layers+1, halves, "untuned: the 16-row arm")
	tuned := o
	tuned.Pick = pick(arm.Point())
	p, err := Lower(g, tuned)
	require.NoError(t, err)
	require.Contains(t, picks, GEMVSmallClass(ProductClass(dtype.Q4_K, 2*llama.FFN, llama.Embedding, false)), "gate/up looked up")
	for _, rows := range []int{3, 5, 8} {
		require.Equal(t, halves, large(p, rows, "_"+arm.String()), "%d rows", rows)
	}
	require.Equal(t, halves, large(p, 9, "_h64_"), "9 rows: the wide arm, one block")
	require.Equal(t, halves, large(p, 16, "_h64_"), "16 rows: the wide arm, one block")
	require.Zero(t, large(p, 1, "_h8_"), "one row keeps the int8 kernel")
	require.Zero(t, large(p, 2, "_h8_"), "two rows the batch kernel")
	// not an f16 arm of at most 16 rows: no effect
	for _, bad := range []GEMVArm{DefaultXQMMAPipeArm, DefaultXQHalfWideArm} {
		b := o
		b.Pick = pick(bad.Point())
		q, err := Lower(g, b)
		require.NoError(t, err)
		require.Equal(t, names(untuned), names(q), "%v", bad)
	}
	// batch-invariant: the pick at every width
	inv, err := Lower(g, invariant(tuned))
	require.NoError(t, err)
	for _, rows := range []int{1, 2, 5, 8, 16} {
		require.Equal(t, halves, large(inv, rows, "_"+arm.String()), "batch-invariant, %d rows", rows)
	}
	for _, ln := range inv.Launches {
		for _, rows := range []int{2, 5, 8, 16} {
			require.Equal(t, ln.KernelFor(1), ln.KernelFor(rows))
		}
	}
	invUntuned, err := Lower(g, invariant(o))
	require.NoError(t, err)
	require.Equal(t, halves, large(invUntuned, 1, "_h16_"), "batch-invariant untuned: the 16-row arm")
	// 64 sequences: the same
	wide, err := Lower(g, withSeqs(tuned, 64))
	require.NoError(t, err)
	require.Equal(t, halves, large(wide, 8, "_"+arm.String()))
	require.Equal(t, halves, large(wide, 9, "_h64_"))
	require.Equal(t, halves, large(wide, 64, "_h64_"))
}
