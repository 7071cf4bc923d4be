package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/autotune"
	"github.com/memra-ai/memra/autotune/check"
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
	"github.com/memra-ai/memra/tunedb"
)

// TestModelShapeMixedLayers: autotune reads the per-layer types of a
// Q4_K_M model, whose V is Q6_K in some layers and Q4_K in others, so that
// it tunes the products lowering runs for both kinds of layer.
func TestModelShapeMixedLayers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "llama3-8b", Quant: "q4_k_m", Layers: 8, Dim: 256, Weights: synth.WeightsBlocks})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	defer m.Close()
	_, w, err := modelShape(m)
	require.NoError(t, err)
	require.Contains(t, w.QKV, [3]dtype.Type{dtype.Q4_K, dtype.Q4_K, dtype.Q6_K})
	require.Contains(t, w.QKV, [3]dtype.Type{dtype.Q4_K, dtype.Q4_K, dtype.Q4_K})
	require.Len(t, w.QKV, 2)
	require.GreaterOrEqual(t, len(w.Downs), 2, "%v", w.Downs)
}

// TestModelShapePostNorms: a Gemma model's output and down products feed
// post-norms, so its tasks are the classes lowering looks up for them,
// without "_res" (they were llama's residual classes, never read); a
// llama model's keep "_res".
func TestModelShapePostNorms(t *testing.T) {
	for preset, post := range map[string]bool{"gemma3-12b": true, "llama3-8b": false} {
		path := filepath.Join(t.TempDir(), preset+".gguf")
		_, err := synth.WriteGGUF(path, synth.Options{Preset: preset, Quant: "q4_k", Layers: 2, Dim: 256, Weights: synth.WeightsBlocks})
		require.NoError(t, err)
		m, err := load.Open(path)
		require.NoError(t, err)
		s, w, err := modelShape(m)
		_ = m.Close()
		require.NoError(t, err)
		require.Equal(t, post, s.PostNorms, preset)
		ids := map[string]bool{}
		for _, c := range check.TuneCases(s, w, check.DefaultSizes, 1) {
			ids[c.ID()] = true
		}
		out := codegen.ProductClass(w.AttnOut, s.Hidden, s.Heads*s.HeadDim, !post)
		down := codegen.ProductClass(w.FFNDown, s.Hidden, s.FFN, !post)
		require.True(t, ids["gemv/"+out], "%s: %s", preset, out)
		require.True(t, ids["gemv/"+down], "%s: %s", preset, down)
	}
}

// TestAutotuneLeavesInt8ProductsOut: without --families, autotune lists no
// decode product of repacked weights (their winners measured alone were
// slower in whole decode steps) and says so; --families gemv lists them
// with a warning, and keeps the products of other types either way.
func TestAutotuneLeavesInt8ProductsOut(t *testing.T) {
	list := func(args ...string) string {
		out, err := runAutotuneArgs(t, args...)
		require.NoError(t, err)
		return out
	}
	all := list("--list", "--shapes", "tiny", "--types", "q4_k,f16")
	require.Contains(t, all, "left out")
	require.NotRegexp(t, `gemv/q4_k_`, all)
	require.Regexp(t, `gemv/f16_`, all)
	require.Regexp(t, `rmsnorm/`, all)
	gemv := list("--list", "--shapes", "tiny", "--types", "q4_k,f16", "--families", "gemv")
	require.Contains(t, gemv, "warning")
	require.Regexp(t, `gemv/q4_k_n\d+_k\d+ +\S+ +264 arms`, gemv)
	require.Regexp(t, `gemv/q4_k_n\d+_k\d+_batch `, gemv)
	require.Regexp(t, `gemv/f16_`, gemv)
	require.NotRegexp(t, `rmsnorm/`, gemv)
	// --tasks keeps the tasks whose ID matches: here the one-row products
	one := list("--list", "--shapes", "tiny", "--types", "q4_k,f16", "--families", "gemv", "--tasks", `_k\d+(_res)?$`)
	require.Regexp(t, `gemv/q4_k_n\d+_k\d+ +\S+ +264 arms`, one)
	require.NotContains(t, one, "_batch")
	require.Regexp(t, `gemv/f16_`, one)
}

// TestAutotuneLeavesIdleFamiliesOut: without --families, autotune lists no
// task of a family the default programs do not launch (the fixed-split
// decode attention, the small-batch products, the generated prefill
// products where cuBLASLt runs them, the CUDA-core prefill attention where
// the tensor-core one has a kernel) and says so; --families names them.
func TestAutotuneLeavesIdleFamiliesOut(t *testing.T) {
	list := func(blas bool, args ...string) string {
		was := prefillBLAS
		prefillBLAS = func() bool { return blas }
		t.Cleanup(func() { prefillBLAS = was })
		out, err := runAutotuneArgs(t, args...)
		require.NoError(t, err)
		return out
	}
	def := list(true, "--list", "--shapes", "llama3-8b", "--types", "q4_k")
	require.Contains(t, def, "do not launch")
	for _, fam := range []string{"attn_decode/", "gemm_small/", "mma/", "attn_prefill/"} {
		require.NotRegexp(t, "(?m)^"+fam, def, fam)
	}
	require.Regexp(t, "(?m)^attn_flash/h32_8_d128_f16 +6 arms", def)
	require.Regexp(t, "(?m)^attn_decode_live/", def)
	require.Regexp(t, "(?m)^rmsnorm/", def)
	noBLAS := list(false, "--list", "--shapes", "llama3-8b", "--types", "q4_k")
	require.Regexp(t, "(?m)^mma/q4_k_", noBLAS, "without cuBLASLt the generated prefill products run")
	named := list(true, "--list", "--shapes", "llama3-8b", "--types", "q4_k", "--families", "mma,gemm_small,attn_decode")
	for _, fam := range []string{"attn_decode/", "gemm_small/", "mma/"} {
		require.Regexp(t, "(?m)^"+fam, named, fam)
	}
}

// TestAutotuneTasksFilter: --tasks with a pattern that matches nothing, or
// one that does not parse, is an error naming it.
func TestAutotuneTasksFilter(t *testing.T) {
	cmd, _, err := rootCmd.Find([]string{"autotune"})
	require.NoError(t, err)
	t.Cleanup(func() { resetFlags(cmd.Flags()) })
	for _, tc := range []struct{ expr, want string }{{"^nothing$", "nothing to tune"}, {"(", "--tasks"}} {
		resetFlags(cmd.Flags())
		require.NoError(t, cmd.Flags().Parse([]string{"--list", "--shapes", "tiny", "--tasks", tc.expr}))
		err := runAutotune(cmd, nil)
		require.ErrorContains(t, err, tc.want)
	}
}

// runAutotuneArgs runs `memra autotune` with args (flags, then any
// MODEL) on the shared command, whose flags are reset before and after,
// and returns what it printed and its error.
func runAutotuneArgs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd, _, err := rootCmd.Find([]string{"autotune"})
	require.NoError(t, err)
	var out bytes.Buffer
	cmd.SetOut(&out)
	t.Cleanup(func() { cmd.SetOut(nil); resetFlags(cmd.Flags()) })
	resetFlags(cmd.Flags())
	require.NoError(t, cmd.Flags().Parse(args))
	err = runAutotune(cmd, cmd.Flags().Args())
	return out.String(), err
}

// resetFlags sets every flag of fs back to its default, unchanged.
func resetFlags(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			var def []string
			if d := strings.Trim(f.DefValue, "[]"); d != "" {
				def = strings.Split(d, ",")
			}
			_ = sv.Replace(def)
		} else {
			_ = f.Value.Set(f.DefValue)
		}
		f.Changed = false
	})
}

// TestConfirmGroups: the tuned entries of the decode products go to the
// one-row (batch 1) and batch (8 rows) groups in the default class, and to
// the small-row f16 (5 rows), large (16) and wide (64) groups in the speed
// class, the only one that launches their kernels; every other family's
// entry is kept without confirmation, and a dropped group's entries are
// removed.
func TestConfirmGroups(t *testing.T) {
	tiny, err := codegen.ShapeByName("tiny")
	require.NoError(t, err)
	cases := check.TuneCases(tiny, check.UniformWeights(dtype.Q4_K), check.DefaultSizes, 1)
	cases = append(cases, check.TuneCases(tiny, check.UniformWeights(dtype.F16), check.DefaultSizes, 1)...)
	var entries []tunedb.Entry
	seen := map[string]bool{}
	for _, c := range cases {
		if !seen[c.Family+"/"+c.Class] {
			seen[c.Family+"/"+c.Class] = true
			entries = append(entries, tunedb.Entry{Family: c.Family, Class: c.Class})
		}
	}
	groups := confirmGroups(entries)
	type at struct {
		batch    int
		numerics string
		suffix   string
	}
	want := []at{{1, "", "attn"}, {1, "", "other"}, {1, "", ""}, {check.BatchTuneTokens, "", "_batch"}, {check.SmallTuneTokens, "off", "_small"},
		{check.LargeTuneTokens, "off", "_large"}, {check.WideTuneTokens, "off", "_wide"}}
	require.Len(t, groups, len(want))
	inGroup := map[string]bool{}
	for i, g := range groups {
		require.Equal(t, want[i].batch, g.Batch, g.Name)
		require.Equal(t, want[i].numerics, g.Numerics, g.Name)
		require.NotEmpty(t, g.Entries)
		for _, e := range g.Entries {
			switch want[i].suffix {
			case "attn":
				require.True(t, strings.HasPrefix(e.Family, "attn_decode"), "%s in %s", e.Family, g.Name)
			case "other":
				require.False(t, e.Family == "gemv" || strings.HasPrefix(e.Family, "attn_") || prefillFamilies[e.Family], "%s in %s", e.Family, g.Name)
			default:
				require.Equal(t, "gemv", e.Family)
				for _, w := range want[3:] {
					require.Equal(t, w.suffix == want[i].suffix, strings.HasSuffix(e.Class, w.suffix), "%s in %s", e.Class, g.Name)
				}
			}
			inGroup[e.Family+"/"+e.Class] = true
		}
	}
	_, err = cuda.ParseNumerics(speedClass)
	require.NoError(t, err)
	require.NotEqual(t, cuda.DefaultNumerics.String(), speedClass, "the f16 and large arms are judged in a class that runs them")
	for f := range prefillFamilies {
		require.Contains(t, codegen.SpaceFamilies(), f, "a prefill family the tunedb knows")
	}
	var f16, q4k bool
	for _, e := range entries {
		require.Equal(t, !prefillFamilies[e.Family], inGroup[e.Family+"/"+e.Class], "every entry a decode step launches is judged: %s/%s", e.Family, e.Class)
		f16 = f16 || (e.Family == "gemv" && strings.HasPrefix(e.Class, "f16_"))
		q4k = q4k || (e.Family == "gemv" && strings.HasPrefix(e.Class, "q4_k_"))
	}
	require.True(t, f16 && q4k, "both kinds of product are confirmed")
	require.Empty(t, confirmGroups(nil))

	kept := confirmed(entries, []autotune.Confirmed{{Group: groups[2], Keep: true}, {Group: groups[3]}}, nil)
	require.Len(t, kept, len(entries)-len(groups[3].Entries))
	for _, e := range kept {
		require.False(t, e.Family == "gemv" && strings.HasSuffix(e.Class, "_batch"), e.Class)
	}
	// a confirmation that stopped after the first group keeps nothing of the others
	rest := unjudged(groups, []autotune.Confirmed{{Group: groups[0], Keep: true}})
	require.Len(t, rest, len(groups)-1)
	for i, r := range rest {
		require.Equal(t, groups[i+1].Name, r.Group.Name)
		require.False(t, r.Keep)
	}
}

// TestConfirmE2EStops: an interrupted sweep or a model that does not open
// confirms nothing (the caller then writes none of the groups' entries),
// with an error that says so; no GPU is needed to get there.
func TestConfirmE2EStops(t *testing.T) {
	groups := []autotune.ConfirmGroup{{Name: "g", Batch: 1, Entries: []tunedb.Entry{{Family: "gemv", Class: "q4_k_n64_k64"}}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, err := confirmE2E(ctx, time.Time{}, "unused.gguf", nil, groups, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, v)
	v, err = confirmE2E(context.Background(), time.Time{}, filepath.Join(t.TempDir(), "missing.gguf"), nil, groups, nil)
	require.ErrorContains(t, err, "missing.gguf")
	require.Empty(t, v)
	kept := confirmed(groups[0].Entries, append(v, unjudged(groups, v)...), nil)
	require.Empty(t, kept)
}

// TestAutotuneTails: family "tail" has no kernels to time, so autotune
// judges it in whole decode steps only: each one-sequence tail alone at
// batch 1, the narrow tails together at a verify step's rows, every class
// once; it refuses without a MODEL and --confirm, lists its groups with
// --list, and writes the kept classes on, timed by their steps beside
// the steps without them.
func TestAutotuneTails(t *testing.T) {
	groups := tailGroups()
	seen := map[string]bool{}
	for _, g := range groups {
		for _, e := range g.Entries {
			require.Equal(t, "tail", e.Family)
			require.False(t, seen[e.Class], e.Class)
			seen[e.Class] = true
			require.Equal(t, codegen.TailArm{On: true}.Point(), e.Arm)
			if codegen.NarrowTail(e.Class) {
				require.Equal(t, tailVerifyRows, g.Batch, g.Name)
				require.LessOrEqual(t, g.Batch, codegen.NarrowSeqs, "the verify rows make a narrow program")
			} else {
				require.Equal(t, 1, g.Batch, g.Name)
				require.Len(t, g.Entries, 1, "a one-sequence tail is judged alone")
			}
		}
	}
	require.Len(t, seen, len(codegen.TailClasses))

	narrow := groups[len(groups)-1]
	verdicts := []autotune.Confirmed{{Group: groups[0]},
		{Group: narrow, Keep: true, Result: autotune.E2EResult{Tuned: autotune.Measurement{TimeUS: 4391}, Baseline: autotune.Measurement{TimeUS: 4802}}}}
	entries := tailEntries(verdicts, "2026-12-07", "test", 13000)
	require.Len(t, entries, 2, "only the kept group's entries")
	for _, e := range entries {
		require.True(t, codegen.NarrowTail(e.Class), e.Class)
		require.Equal(t, 4391.0, e.TimeUS)
		require.Equal(t, 4802.0, e.RunnerUp.TimeUS)
		require.Equal(t, codegen.TailArm{}.Point(), e.RunnerUp.Arm)
		require.Equal(t, 13000, e.Driver)
	}
	f := tunedb.NewFile(tunedb.NewDeviceKey("NVIDIA H100 80GB HBM3", 9, 0, 132, 80<<30))
	f.Merge(entries)
	require.NoError(t, f.Validate(), "written entries are valid tunedb entries")

	run := func(args ...string) (string, error) { return runAutotuneArgs(t, args...) }
	_, err := run("--families", "tail")
	require.ErrorContains(t, err, "needs a MODEL and --confirm")
	_, err = run("--families", "tail", "--confirm=false", "model.gguf")
	require.ErrorContains(t, err, "needs a MODEL and --confirm")
	_, err = run("--families", "tail,gemv", "--list", "--shapes", "tiny", "--types", "q4_k")
	require.ErrorContains(t, err, "name it alone")
	out, err := run("--families", "tail", "--list")
	require.NoError(t, err)
	require.Regexp(t, `tail post_norm +batch 1, 1 entries`, out)
	require.Regexp(t, `narrow tails \(verify steps\) +batch 5, 2 entries`, out)
}

// TestTailsThatLower: a tail group whose class has no place in the model's
// decode program is not timed (two backends of the same kernels); the
// narrow tails change a llama verify program, and the post-norm tail a
// Gemma 3 one-sequence program.
func TestTailsThatLower(t *testing.T) {
	kept := func(preset string) []string {
		path := filepath.Join(t.TempDir(), preset+".gguf")
		_, err := synth.WriteGGUF(path, synth.Options{Preset: preset, Quant: "q4_k_m", Layers: 2, Dim: 256, Weights: synth.WeightsBlocks})
		require.NoError(t, err)
		var logged []string
		groups, err := tailsThatLower(path, nil, tailGroups(), func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) })
		require.NoError(t, err)
		var names []string
		for _, g := range groups {
			names = append(names, g.Name)
		}
		require.Len(t, logged, len(tailGroups())-len(groups), "each group left out is said")
		return names
	}
	require.Equal(t, []string{"narrow tails (verify steps)"}, kept("llama2-7b"))
	require.Contains(t, kept("gemma3-12b"), "tail post_norm")
}

// TestConfirmedKeepsDefault: a group the steps judged and dropped leaves
// the card its family default as timed by the sweep (the winner as
// runner-up), so the card stops borrowing another card's entry; where the
// card had an entry of its own (the baseline) or the default was not
// timed, nothing is written.
func TestConfirmedKeepsDefault(t *testing.T) {
	def := tunedb.Timed{Arm: codegen.Point{"threads": 256}, ArmName: "t256", TimeUS: 3.5}
	win := tunedb.Entry{Family: "rmsnorm", Class: "d4096", Arm: codegen.Point{"threads": 512}, ArmName: "t512", TimeUS: 3.1, Default: &def}
	mine := tunedb.Entry{Family: "embedding", Class: "q4_k_d4096", Arm: codegen.Point{"threads": 128}, ArmName: "t128", TimeUS: 2, Default: &def}
	untimed := tunedb.Entry{Family: "argmax", Class: "v32000", Arm: codegen.Point{"threads": 512}, ArmName: "t512", TimeUS: 5}
	g := autotune.ConfirmGroup{Name: "other", Batch: 1, Entries: []tunedb.Entry{win, mine, untimed}}
	dropped := autotune.Confirmed{Group: g, Result: autotune.E2EResult{Tuned: autotune.Measurement{TimeUS: 2360}, Baseline: autotune.Measurement{TimeUS: 2361}}}
	own := func(family, class string) (codegen.Point, bool) { return def.Arm, family == "embedding" }
	out := confirmed(g.Entries, []autotune.Confirmed{dropped}, own)
	require.Len(t, out, 1)
	require.Equal(t, "d4096", out[0].Class)
	require.Equal(t, def.Arm, out[0].Arm)
	require.Equal(t, 3.5, out[0].TimeUS)
	require.Equal(t, "t512", out[0].RunnerUp.ArmName)
	require.Equal(t, 3.1, out[0].RunnerUp.TimeUS)
	// unjudged (the budget ended first): nothing
	require.Empty(t, confirmed(g.Entries, []autotune.Confirmed{{Group: g}}, own))
	// kept: as the sweep found them
	require.Equal(t, g.Entries, confirmed(g.Entries, []autotune.Confirmed{{Group: g, Keep: true}}, own))
}
