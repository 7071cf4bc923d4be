package codegen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// TestWideArmParse: the wide arms print and parse back, are points of the
// gemv space (what the tunedb stores) and of the wide space, and what
// their lanes or blocks cannot hold is refused.
func TestWideArmParse(t *testing.T) {
	names := map[string]GEMVArm{"t256_r1_u1_s1_l1_h64_w2_p4": DefaultXQHalfWideArm, "t256_r1_u1_s1_l1_h32_w2_p4": DefaultXQHalf32Arm}
	for s, want := range names {
		a, err := ParseGEMVArm(s)
		require.NoError(t, err, s)
		require.Equal(t, want, a, s)
		require.Equal(t, s, a.String())
	}
	gemv, err := SpaceByName("gemv")
	require.NoError(t, err)
	for _, ty := range HalfTypes() {
		wide := GEMVWideSpaceFor(ty)
		for _, a := range WideArms() {
			b, err := ParseGEMVArm(a.String())
			require.NoError(t, err, a.String())
			require.Equal(t, a, b)
			require.Equal(t, a, GEMVArmOf(a.Point()))
			require.NoError(t, gemv.Valid(a.Point()), a.String())
			require.NoError(t, wide.Valid(a.Point()), a.String())
			require.LessOrEqual(t, a.mmahMaxShared(), xqMaxShared, a.String())
		}
		require.NoError(t, wide.Valid(DefaultXQHalfArm.Point()), "the 16-row baseline")
		require.ErrorIs(t, wide.Valid(DefaultXQMMAPipeArm.Point()), ErrUnsupported, "int8")
		arms := wide.Arms()
		require.NotEmpty(t, arms)
		for _, p := range arms {
			require.True(t, GEMVArmOf(p).wideBatch(), "%v", p)
		}
		require.Contains(t, arms, DefaultXQHalfWideArm.Point())
	}
	for _, bad := range []string{
		"t512_r1_u1_s1_l1_h64_w2_p4", // 128 registers a thread at 512
		"t256_r1_u1_s1_l1_h64_w4_p4", // 128 accumulators a lane
		"t256_r1_u1_s1_l1_h48_w2_p4", // 32 or 64 only
		"t256_r1_u1_s1_l1_g32_w2",    // XQ 2
		"t256_r1_u1_s1_l1_m64_w2_p4", // XQ 3
		"t256_r8_u1_s1_l1_q32_w2",    // XQ 1
		"t256_r1_u2_s1_l1_h64_w2_p4", // 8 slots of 64 tokens: past 227 KiB
	} {
		_, err := ParseGEMVArm(bad)
		require.ErrorIs(t, err, ErrUnsupported, bad)
	}
}

// TestWideKernel: a wide arm's kernel has its tiles and token slots, one
// block a step of its rows, copies no token of a tile past the step's
// rows (the 16-row arm's kernel is as before: it copies every slot), and
// runs the ring's schedule.
func TestWideKernel(t *testing.T) {
	for _, ty := range HalfTypes() {
		for _, a := range WideArms() {
			k, err := GEMVXQ(ty, 2*11008, 4096, false, a, XQEnds{}, 0)
			require.NoError(t, err)
			src := k.Source
			nt := a.BatchRows / 8
			require.Contains(t, src, fmt.Sprintf("#define MB %d ", a.BatchRows))
			require.Contains(t, src, fmt.Sprintf("#define NT %d ", nt))
			require.Contains(t, src, "&& 8 * (xt0 >> 3) < mrows;", "token chunks of empty tiles are not copied")
			require.Equal(t, nt, strings.Count(src, "const bool xk"), "a chunk of every token a lane: 4·8·NT over 32 lanes")
			require.Equal(t, 2*8*a.rowsPerWarp(), strings.Count(src, "mma_h16(acc["), "two mma a tile and group")
			for _, rows := range []int{17, 32, 40, 64} {
				g := k.Launch(Dims{Tokens: rows})
				require.Equal(t, uint32(ceilDiv(rows, a.BatchRows)), g.Grid[1], "%v at %d rows", a, rows)
				require.Equal(t, uint32(a.mmahShared(mma8PipeTypes[ty])), g.Shared)
			}
			small, err := GEMVXQ(ty, 256, 2048, false, a, XQEnds{}, 0)
			require.NoError(t, err)
			for nsb := 1; nsb <= 5; nsb++ {
				require.NoError(t, simulatePipe(small.Source, a.Stages, nsb), "%v %v, %d super-blocks", ty, a, nsb)
			}
		}
		d, err := GEMVXQ(ty, 2*11008, 4096, false, DefaultXQHalfArm, XQEnds{}, 0)
		require.NoError(t, err)
		require.Contains(t, d.Source, "const bool xk0 = xc0 < 4 * 8 * NT;\n", "the 16-row kernel copies every slot")
	}
}

// TestLowerWide: in a 64-sequence decode program, a tunedb pick of a wide
// arm for a product's GEMVWideClass (or Arms.GEMVWide) gives each f16
// product a wide kernel from 17 rows, while 3 to 16 rows keep the 16-row
// kernel and one row its own; untuned the family default (the same
// 64-row arm) gives the same kernels; for a 16-row pick, in a 16-sequence
// program and in the batch-invariant configuration there is none.
func TestLowerWide(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 64, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch}
	wideOf := func(p *Program) (n int) {
		for _, ln := range p.Launches {
			if ln.Wide == 0 {
				continue
			}
			n++
			require.Equal(t, 17, ln.WideFrom)
			wk, lk := p.Kernels[ln.Wide-1].Name, p.Kernels[ln.Large-1].Name
			require.Contains(t, wk, "_h64_w2_p4", wk)
			require.Contains(t, lk, "_h16_", lk)
			for rows, want := range map[int]string{64: wk, 32: wk, 17: wk, 16: lk, 8: lk, 3: lk} {
				require.Equal(t, want, p.Kernels[ln.KernelFor(rows)].Name, "%d rows", rows)
			}
			require.NotContains(t, p.Kernels[ln.KernelFor(1)].Name, "_h", "one row")
			require.NotContains(t, p.Kernels[ln.KernelFor(2)].Name, "_h", "two rows: the batch arm")
		}
		return n
	}
	untuned, err := Lower(g, o)
	require.NoError(t, err)
	picks := map[string]bool{}
	tuned := o
	tuned.Pick = func(family, class string) (Point, bool) {
		if family == "gemv" && strings.HasSuffix(class, "_wide") {
			picks[class] = true
			return DefaultXQHalfWideArm.Point(), true
		}
		return nil, false
	}
	p, err := Lower(g, tuned)
	require.NoError(t, err)
	large := 0
	for _, ln := range p.Launches {
		if ln.Large > 0 && strings.Contains(p.Kernels[ln.Large-1].Name, "_h16_") {
			large++
		}
	}
	require.Positive(t, large)
	require.Equal(t, large, wideOf(p), "every f16 product has its wide kernel")
	require.Contains(t, picks, GEMVWideClass(ProductClass(dtype.Q4_K, 2*llama.FFN, llama.Embedding, false)), "gate/up looked up")
	byArms := o
	byArms.Arms.GEMVWide = DefaultXQHalfWideArm
	pa, err := Lower(g, byArms)
	require.NoError(t, err)
	require.Equal(t, large, wideOf(pa))
	// untuned, the family default is the same 64-row arm: the same kernels
	require.Equal(t, large, wideOf(untuned), "untuned: the default wide arm")
	names := map[string]bool{}
	for _, k := range p.Kernels {
		names[k.Name] = true
	}
	for _, k := range untuned.Kernels {
		require.True(t, names[k.Name], k.Name)
	}
	require.Len(t, untuned.Kernels, len(p.Kernels))
	// a 16-row pick is no wide arm; 16 sequences never need one; nor does the batch-invariant program
	narrow := o
	narrow.Pick = func(family, class string) (Point, bool) {
		return DefaultXQHalfArm.Point(), family == "gemv" && strings.HasSuffix(class, "_wide")
	}
	for name, oo := range map[string]LowerOptions{"16-row pick": narrow, "16 sequences": withSeqs(tuned, 16), "batch-invariant": invariant(tuned)} {
		q, err := Lower(g, oo)
		require.NoError(t, err, name)
		require.Zero(t, wideOf(q), name)
	}
}

func withSeqs(o LowerOptions, s int) LowerOptions { o.MaxSeqs = s; return o }

func invariant(o LowerOptions) LowerOptions { o.BatchInvariant = true; return o }
