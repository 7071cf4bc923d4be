package cuda_test

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/tunedb"
)

// TestTunedbChoosesFormerSwitches: the kernel choices environment
// variables once made are tunedb entries. For each, an entry of a
// non-default arm (the one-row and batch products of repacked weights, the
// large steps' tensor-core arm, the prefill product, the live-length
// decode attention) puts that arm's kernel in the lowered programs, and
// without it no kernel of that arm is there.
func TestTunedbChoosesFormerSwitches(t *testing.T) {
	m := tinyModel(t, "llama3-8b", "q4_k_m")
	asked := map[string][]string{} // family → classes lowering looks up
	// the width class's programs (the f16 large and small arms, the one-row switches), whatever the default class
	opts := cuda.BackendOptions{MaxSeqs: 16, Numerics: cuda.NumericsWidth, Pick: func(family, class string) (codegen.Point, bool) {
		if !slices.Contains(asked[family], class) {
			asked[family] = append(asked[family], class)
		}
		return nil, false
	}}
	dec, pre, err := cuda.Lower(m, opts)
	require.NoError(t, err)
	base := kernelNames(dec, pre)
	class := func(family, prefix, suffix string) string {
		for _, c := range asked[family] {
			if strings.HasPrefix(c, prefix) && strings.HasSuffix(c, suffix) && (suffix != "" || !strings.Contains(c[len(prefix):], "_batch") && !strings.Contains(c[len(prefix):], "_large") && !strings.Contains(c[len(prefix):], "_wide")) {
				return c
			}
		}
		t.Fatalf("no %s class %s…%s looked up among %v", family, prefix, suffix, asked[family])
		return ""
	}
	gemv := func(s string) codegen.GEMVArm {
		a, err := codegen.ParseGEMVArm(s)
		require.NoError(t, err, s)
		return a
	}
	var batch codegen.GEMVArm // a batch arm of eight rows a block (the default has 16)
	for _, p := range codegen.GEMVBatchSpaceFor(dtype.Q4_K).Arms() {
		if a := codegen.GEMVArmOf(p); a.BatchRows == 8 && a.RowsPerWarp == 2 {
			batch = a
			break
		}
	}
	require.NotZero(t, batch)
	live := codegen.DecodeArm{Threads: 128, Chunk: 256, Live: 1}
	mma, err := codegen.ParseMMAArm("m64_n128_w2x4_p1")
	require.NoError(t, err)
	for _, c := range []struct {
		name, family, class string
		arm                 codegen.Point
		tag                 string // in the name of the picked arm's kernels
	}{
		{"one-row product (MEMRA_GEMV_QUANT)", "gemv", class("gemv", "q4_k_", ""), gemv("t256_r8_u2_s1_l1_g1_w2").Point(), "_t256_r8_u2_s1_l1_g1_w2"},
		{"batch product (MEMRA_GEMV_BATCH)", "gemv", class("gemv", "q4_k_", "_batch"), batch.Point(), "_" + batch.String()},
		{"large steps (MEMRA_GEMV_LARGE)", "gemv", class("gemv", "q4_k_", "_large"), codegen.DefaultXQMMAPipeArm.Point(), "_" + codegen.DefaultXQMMAPipeArm.String()},
		{"prefill product (MEMRA_MMA)", "mma", class("mma", "", ""), mma.Point(), "_" + mma.String()},
		{"decode attention (MEMRA_DECODE_LIVE)", "attn_decode_live", class("attn_decode_live", "", ""), live.Point(), "_" + live.String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := tunedb.DeviceKey{Name: "nvidia-h100", SMMajor: 9, SMs: 132, MemGiB: 80}
			db, err := tunedb.OpenFS(fstest.MapFS{}, t.TempDir())
			require.NoError(t, err)
			_, err = db.Put(key, []tunedb.Entry{{Family: c.family, Class: c.class, Arm: c.arm, ArmName: c.tag[1:], TimeUS: 1}})
			require.NoError(t, err)
			has := func(names []string) bool {
				return slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, c.tag) })
			}
			require.False(t, has(base), "untuned: no %s kernel", c.tag)
			dec, pre, err := cuda.Lower(m, cuda.BackendOptions{MaxSeqs: 16, Numerics: cuda.NumericsWidth, Pick: cuda.TunedPicker(db, key)})
			require.NoError(t, err)
			require.True(t, has(kernelNames(dec, pre)), "the tunedb entry for %s %s gives a %s kernel", c.family, c.class, c.tag)
		})
	}
}
