package codegen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// TestMMA8PipeArms: the pipelined arms' names parse back, and Validate
// takes rings of 2, 4 or 8 stages of 1, 2 or 4 groups (8 groups at most)
// on XQ 3 arms only, within the shared memory a block may have.
func TestMMA8PipeArms(t *testing.T) {
	a, err := ParseGEMVArm("t512_r1_u2_s1_l1_m16_w2_p2")
	require.NoError(t, err)
	require.Equal(t, DefaultXQMMAPipeArm, a)
	require.Equal(t, "t512_r1_u2_s1_l1_m16_w2_p2", a.String())
	require.Equal(t, a, GEMVArmOf(a.Point()))
	require.NoError(t, GEMVSpaceFor(dtype.Q4_K).Valid(a.Point()), "a named arm outside the searched values")
	for _, bad := range []func(a *GEMVArm){
		func(a *GEMVArm) { a.Stages = 3 },
		func(a *GEMVArm) { a.Stages, a.Unroll = 4, 4 }, // 16 groups
		func(a *GEMVArm) { a.Unroll = 3 },
		func(a *GEMVArm) { a.XQ = 2 },
		func(a *GEMVArm) { a.Stages, a.Unroll, a.RowsPerWarp = 8, 1, 4 }, // 16 warps of 64 rows: too much shared memory
	} {
		b := DefaultXQMMAPipeArm
		bad(&b)
		require.ErrorIs(t, b.Validate(), ErrUnsupported, "%+v", b)
	}
	for _, s := range []string{"t256_r1_u1_s1_l1_m16_w2_p4", "t512_r2_u1_s1_l1_m16_w2_p4", "t512_r1_u4_s1_l1_m16_w2_p2", "t256_r1_u1_s1_l1_m16_p8"} {
		a, err := ParseGEMVArm(s)
		require.NoError(t, err, s)
		require.Equal(t, s, a.String())
	}
}

// TestMMA8PipeKernel: the kernel's weights are copied before the wait for
// the previous kernel and its activations after, every stage waits for
// the copies P-1 stages back, the launch asks for each warp's ring (with
// the opt-in once static and dynamic memory pass 48 KB), and types the
// arm does not pipeline take the unpipelined default with its batch rows.
func TestMMA8PipeKernel(t *testing.T) {
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
		for _, s := range []string{"t512_r1_u2_s1_l1_m16_w2_p2", "t256_r1_u1_s1_l1_m16_w2_p4", "t256_r1_u1_s1_l1_m12_p8"} {
			a, err := ParseGEMVArm(s)
			require.NoError(t, err)
			k, err := GEMVXQ(ty, 1000, 11008, true, a, XQEnds{NormIn: true, NormEps: 1e-5}, 0)
			require.NoError(t, err, s)
			require.True(t, strings.HasSuffix(k.Name, "_"+s), k.Name)
			src := k.Source
			wait := strings.Index(src, "    pdl_wait();")
			require.Positive(t, wait, s)
			require.Less(t, strings.Index(src, "cp_cg16(wsa"), wait, "weights before the wait")
			require.Greater(t, strings.Index(src, "cp_ca16(wsa"), wait, "activations after it")
			require.Equal(t, 8/a.Unroll, strings.Count(src, "CP_WAIT(P - 2);"), "a wait a stage of the super-block")
			require.Equal(t, 8, strings.Count(src, "const u8* st = ws + "), "a slot read a group")
			require.True(t, strings.Contains(src, "#define K 11008\n") && strings.Contains(src, "#define NSB (K / 256)"), "43 super-blocks a row")
			pt := mma8PipeTypes[ty]
			g := k.Launch(Dims{Tokens: 20})
			mb := a.batchRows()
			require.Equal(t, [3]uint32{uint32(ceilDiv(1000, 16*a.rowsPerWarp())), uint32(ceilDiv(20, mb)), 1}, g.Grid)
			require.Equal(t, uint32(a.mma8PipeShared(pt)), g.Shared)
			require.Equal(t, g.Shared+g.StaticShared > 48<<10, g.SharedOverDefault())
		}
	}
	k, err := GEMVXQ(dtype.Q8_0, 1000, 512, false, DefaultXQMMAPipeArm, XQEnds{}, 0)
	require.NoError(t, err)
	want := DefaultXQMMAArm
	want.BatchRows = DefaultXQMMAPipeArm.BatchRows
	require.True(t, strings.HasSuffix(k.Name, "_"+want.String()), k.Name)
	require.False(t, strings.Contains(k.Source, "cp.async"), "the unpipelined kernel")
}

// TestMMA8PipeGolden pins the default pipelined kernel's source at a small
// Q4_K shape (go test ./codegen -run TestMMA8PipeGolden -update rewrites it).
func TestMMA8PipeGolden(t *testing.T) {
	k, err := GEMVXQ(dtype.Q4_K, 384, 512, true, DefaultXQMMAPipeArm, XQEnds{NormIn: true, NormEps: 1e-6}, 0)
	require.NoError(t, err)
	path := filepath.Join("testdata", k.Name+".cu")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./codegen -run TestMMA8PipeGolden -update")
	require.Equal(t, string(want), k.Source)
}
