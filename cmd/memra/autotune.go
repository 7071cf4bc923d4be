package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/autotune"
	"github.com/memra-ai/memra/autotune/check"
	"github.com/memra-ai/memra/autotune/report"
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/tunedb"
)

var errAutotune = errors.New("autotune")

// sweepShare is the percentage of --budget the sweep takes when an
// end-to-end confirmation follows it (the confirmation has the rest).
const sweepShare = 70

func init() {
	cmd := &cobra.Command{
		Use:   "autotune [MODEL]",
		Short: "sweep kernel arms on this card, gate each against the CPU reference, record the winners in the tunedb",
		Long: "autotune measures every kernel family a model needs (or the --shapes presets) on this GPU: candidate arms\n" +
			"are compiled in parallel with NVRTC, each is run on random inputs and checked against the CPU reference\n" +
			"(an arm outside the family's tolerance is recorded as failed and never chosen), then timed: a warm-up and\n" +
			"the median of --reps CUDA-event samples over rotating inputs larger than L2. Small spaces are swept\n" +
			"exhaustively, large ones by successive halving, all within --budget. Results go to the user tunedb\n" +
			"(--write-user, the default), a shipped-defaults folder (--write-shipped DIR), and --report DIR.\n" +
			"The decode products of repacked weights are tuned only with --families gemv. With a MODEL the winners of\n" +
			"the kernels decode steps launch are kept only if whole decode steps run faster with them (--confirm, docs/AUTOTUNE.md).",
		Args: cobra.MaximumNArgs(1),
		RunE: runAutotune,
	}
	f := cmd.Flags()
	f.StringSlice("shapes", []string{"llama3-8b"}, "shape presets when no MODEL is given: llama3-8b, qwen2.5-7b, qwen3-8b, tiny, qwen3-30b-a3b, mixtral-8x7b, tiny-moe")
	f.StringSlice("types", []string{"q4_k"}, "weight types for --shapes presets")
	f.StringSlice("families", nil, "families to tune (default: those the default programs launch, less the decode products of repacked weights): "+strings.Join(codegen.SpaceFamilies(), ", ")+
		"; tail alone judges the fusions of family tail in whole decode steps of MODEL (no kernels of their own to time)")
	f.Duration("budget", 10*time.Minute, "time for the whole run: with a MODEL and --confirm the sweep takes 70 % (each task an equal share "+
		"of what is left) and the end-to-end confirmation the rest (no group starts past it, one started before runs to its verdict; groups not judged are not written); else the sweep all of it")
	f.Int("reps", 20, "timed samples of a final measurement")
	f.Bool("no-progress", false, "no progress bar: each task's line when it ends (for logs)")
	f.Int("batch", 1, "rows of the decode-step families (GEMV, norm, RoPE, SwiGLU, argmax)")
	f.Int("prefill", 256, "rows of the MMA products and prefill attention")
	f.Int("kv", 4096, "key count of the decode-attention measurement")
	f.Int("exhaustive-max", 24, "sweep spaces of at most this many arms exhaustively")
	f.Int("parallel", 8, "concurrent NVRTC compilations")
	f.Uint64("seed", 1, "random seed of the inputs")
	f.String("report", "", "write report.md and one SVG per task into this folder")
	f.Bool("write-user", true, "merge the results into the user tunedb (os.UserConfigDir()/memra/tunedb)")
	f.String("write-shipped", "", "also write the results into this shipped-defaults folder (tunedb/defaults)")
	f.Bool("list", false, "list the tasks and their space sizes, then exit (no GPU needed)")
	f.String("tasks", "", "tune only the tasks whose ID matches this regular expression (see --list), e.g. '_k[0-9]+(_res)?$' for the one-row products")
	f.String("device", "cuda", "cuda: the GPU's kernel families; cpu: the blocking of the CPU executor's int8 products "+
		"(family cpu_product, a MODEL's products at --prefill tokens, each arm timed on one thread in thread CPU time)")
	f.IntP("threads", "t", 0, "with --device cpu: the cores the tuned CPU runs on, part of its tunedb key (0: all)")
	f.Bool("confirm", true, "with a MODEL: keep the tuned arms of the kernels decode steps launch (attention, the other "+
		"kernels, the products) only if whole decode steps (batch 1 for those and the one-row products, the tuned rows for "+
		"batch arms) are at least 1 % faster with them than with the arms before, logits within 0.1")
	rootCmd.AddCommand(cmd)
}

// autotuneCases returns the cases of a model file or of the shape presets.
func autotuneCases(cmd *cobra.Command, args []string) ([]*check.Case, string, error) {
	f := cmd.Flags()
	seed, _ := f.GetUint64("seed")
	batch, _ := f.GetInt("batch")
	prefill, _ := f.GetInt("prefill")
	kv, _ := f.GetInt("kv")
	// the attention's arms as the default class lowers them (the class the confirmation runs)
	sizes := check.Sizes{DecodeTokens: batch, PrefillTokens: prefill, DecodeKV: []int32{int32(kv)}, Invariant: cuda.DefaultNumerics.Invariant()}
	var cases []*check.Case
	var what string
	if len(args) == 1 {
		m, err := load.Open(args[0])
		if err != nil {
			return nil, "", err
		}
		defer m.Close()
		s, w, err := modelShape(m)
		if err != nil {
			return nil, "", err
		}
		cases, what = check.TuneCases(s, w, sizes, seed), args[0]
	} else {
		shapes, _ := f.GetStringSlice("shapes")
		typeNames, _ := f.GetStringSlice("types")
		for _, n := range shapes {
			s, err := codegen.ShapeByName(n)
			if err != nil {
				return nil, "", err
			}
			for _, tn := range typeNames {
				t, err := dtype.Parse(tn)
				if err != nil {
					return nil, "", err
				}
				cases = append(cases, check.TuneCases(s, check.UniformWeights(t), sizes, seed)...)
			}
		}
		what = strings.Join(shapes, ",") + " " + strings.Join(typeNames, ",")
	}
	fams, _ := f.GetStringSlice("families")
	if len(fams) > 0 {
		for _, fam := range fams {
			if _, err := codegen.SpaceByName(fam); err != nil {
				return nil, "", err
			}
			if fam == "tail" {
				return nil, "", fmt.Errorf("%w: --families tail is judged on its own in whole decode steps: name it alone", errAutotune)
			}
		}
		cases = slices.DeleteFunc(cases, func(c *check.Case) bool { return !slices.Contains(fams, c.Family) })
	} else {
		blas := prefillBLAS()
		cases = slices.DeleteFunc(cases, func(c *check.Case) bool { return int8Product(c) || idleFamily(c.Family, blas) })
	}
	return cases, what, nil
}

// prefillBLAS reports whether the default prefill programs run their
// products through cuBLASLt on this machine (a variable for the tests).
var prefillBLAS = func() bool { return cuda.DefaultPrefillBLAS && cuda.BLASAvailable() == nil }

// idleFamily reports whether the default programs launch no kernel of
// family, which autotune then leaves out unless --families names it:
// attn_decode (decode attention runs the live-split kernels,
// attn_decode_live), gemm_small (a lowering option no backend sets), and
// mma where cuBLASLt runs the prefill products (blas). The CUDA-core
// prefill attention is no task where the tensor-core one has a kernel
// (check.TuneCases).
func idleFamily(family string, blas bool) bool {
	switch family {
	case "attn_decode", "gemm_small":
		return true
	case "mma":
		return blas
	}
	return false
}

// idleNote is what autotune says of idleFamily's families.
func idleNote(blas bool) string {
	fams := "attn_decode, gemm_small"
	if blas {
		fams += ", mma (cuBLASLt runs the prefill products)"
	}
	return "families the default programs do not launch are left out: " + fams + "; --families names them"
}

// int8Product reports whether c is a decode product of repacked weights
// (int8 activations), which autotune leaves out unless --families names
// gemv (and then confirms end to end, confirm.go): timed alone, their
// winners decoded llama2-7b q4_k_m slower than the untuned arms on the
// H200 (docs/PERFORMANCE.md: 425–429 against 467 tok/s at batch 1), since
// a product in a decode step overlaps the one before it (programmatic
// dependent launch) and reads rows the producer's epilogue wrote, which a
// measurement of one kernel does not see.
func int8Product(c *check.Case) bool {
	t, err := dtype.Parse(c.DType)
	return c.Family == "gemv" && err == nil && codegen.Repackable(t)
}

// int8ProductNote is what autotune says of int8Product's cases.
const int8ProductNote = "the decode products of repacked weights (int8 activations) are left out: " +
	"their winners measured alone were slower in whole decode steps on the H200 (docs/PERFORMANCE.md); " +
	"--families gemv tunes them (with a MODEL, --confirm keeps only arms that make whole decode steps faster)"

// modelShape reads the constant dimensions and weight types of a model.
func modelShape(m *load.Model) (codegen.Shape, check.Weights, error) {
	hp := m.HParams
	s := codegen.Shape{Name: hp.Name, Hidden: hp.Embedding, FFN: hp.FFN, Vocab: hp.VocabSize, Heads: hp.Heads, HeadsKV: hp.HeadsKV,
		HeadDim: hp.HeadDim, RopeHalf: hp.RopeStyle == ir.RopeHalf, Eps: hp.RMSEps,
		Experts: hp.Experts, ExpertsUsed: hp.ExpertsUsed, ExpertFFN: hp.ExpertFFN, ExpertNorm: hp.ExpertNorm}
	if s.Name == "" {
		s.Name = hp.Arch
	}
	_, s.PostNorms = m.Tensors["blk.0.post_attention_norm.weight"] // Gemma's norms after the products
	typ := func(names ...string) (dtype.Type, error) {
		for _, n := range names {
			if t, ok := m.Tensors[n]; ok {
				return t.Type, nil
			}
		}
		return 0, fmt.Errorf("%w: model %s has none of %v", errAutotune, m.Path, names)
	}
	var w check.Weights
	var err error
	for _, x := range []struct {
		dst   *dtype.Type
		names []string
	}{
		{&w.Attn, []string{"blk.0.attn_q.weight", "blk.0.attn_qkv.weight"}},
		{&w.AttnOut, []string{"blk.0.attn_output.weight"}},
		{&w.FFNUp, []string{"blk.0.ffn_up.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up_exps.weight"}},
		{&w.FFNDown, []string{"blk.0.ffn_down.weight", "blk.0.ffn_down_exps.weight"}},
		{&w.Embed, []string{"token_embd.weight"}},
		{&w.Output, []string{"output.weight", "token_embd.weight"}},
	} {
		if *x.dst, err = typ(x.names...); err != nil {
			return s, w, err
		}
	}
	// the per-layer types of the products whose type varies by layer in the
	// standard mixes (Q4_K_M: V and the FFN down product)
	seenQKV, seenDown := map[[3]dtype.Type]bool{}, map[dtype.Type]bool{}
	for l := range hp.Layers {
		name := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", l, s) }
		q, okq := m.Tensors[name("attn_q")]
		k, okk := m.Tensors[name("attn_k")]
		v, okv := m.Tensors[name("attn_v")]
		if okq && okk && okv {
			p := [3]dtype.Type{q.Type, k.Type, v.Type}
			if !seenQKV[p] {
				seenQKV[p] = true
				w.QKV = append(w.QKV, p)
			}
		}
		for _, down := range []string{"ffn_down", "ffn_down_exps"} {
			if d, ok := m.Tensors[name(down)]; ok && !seenDown[d.Type] {
				seenDown[d.Type] = true
				w.Downs = append(w.Downs, d.Type)
			}
		}
	}
	return s, w, nil
}

func runAutotune(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	switch dev, _ := f.GetString("device"); dev {
	case "cpu":
		return runAutotuneCPU(cmd, args)
	case "cuda", "":
	default:
		return fmt.Errorf("%w: --device %q: want cuda or cpu", errAutotune, dev)
	}
	out := cmd.OutOrStdout()
	if fams, _ := f.GetStringSlice("families"); slices.Equal(fams, []string{"tail"}) {
		confirm, _ := f.GetBool("confirm")
		return runAutotuneTails(cmd, args, confirm)
	}
	cases, what, err := autotuneCases(cmd, args)
	if err != nil {
		return err
	}
	tasks := check.Tasks(cases)
	if expr, _ := f.GetString("tasks"); expr != "" {
		re, err := regexp.Compile(expr)
		if err != nil {
			return fmt.Errorf("%w: --tasks %q: %v", errAutotune, expr, err)
		}
		tasks = slices.DeleteFunc(tasks, func(t autotune.Task) bool { return !re.MatchString(t.ID()) })
	}
	if len(tasks) == 0 {
		return fmt.Errorf("%w: nothing to tune", errAutotune)
	}
	confirm, _ := f.GetBool("confirm")
	confirm = confirm && len(args) == 1
	switch fams, _ := f.GetStringSlice("families"); {
	case len(fams) == 0:
		fmt.Fprintln(out, "autotune: "+int8ProductNote)
		fmt.Fprintln(out, "autotune: "+idleNote(prefillBLAS()))
	case !confirm && slices.Contains(fams, "gemv") && slices.ContainsFunc(cases, int8Product):
		fmt.Fprintln(out, "autotune: warning: the winners of the decode products of repacked weights are measured alone "+
			"and not confirmed in whole decode steps (that needs a MODEL and --confirm); "+
			"compare `memra bench` with and without --untuned before keeping them")
	}
	if list, _ := f.GetBool("list"); list {
		for _, t := range tasks {
			fmt.Fprintf(out, "%-48s %-10s %d arms\n", t.ID(), t.Label, t.Space.Size())
		}
		return nil
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return fmt.Errorf("autotune needs NVRTC: %w", err)
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return fmt.Errorf("autotune needs a GPU: %w", err)
	}
	defer dev.Close()
	info := dev.Info()
	key := cuda.DeviceKey(info)
	db, err := tunedb.Open("")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "autotune %s on %s (%s, driver %d); device key %s\n", what, info.Name, info.Arch(), info.DriverVersion, key)
	if n := db.Notice(key); n != "" {
		fmt.Fprintln(out, n)
	}
	cache, err := cuda.NewCache("", nv)
	if err != nil {
		return err
	}
	o := autotune.Options{Observer: autotune.NewBar(cmd.ErrOrStderr())}
	if quiet, _ := f.GetBool("no-progress"); quiet {
		o.Observer = autotune.NewLines(cmd.ErrOrStderr())
	}
	budget, _ := f.GetDuration("budget")
	start := time.Now()
	o.Budget = budget
	if confirm && budget > 0 {
		// the confirmation's share: the sweep stops in time for it
		o.Budget = budget * sweepShare / 100
	}
	o.Reps, _ = f.GetInt("reps")
	o.ExhaustiveMax, _ = f.GetInt("exhaustive-max")
	o.Parallel, _ = f.GetInt("parallel")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	runner := check.NewRunner(check.NewDevice(dev, cache), cases)
	// the int8 one-row products are tuned against the arm lowering runs
	// on this card without an entry (split where they have few blocks)
	tasks = runner.LoweringDefaults(tasks, info.SMs)
	results, tuneErr := autotune.Tune(ctx, runner, tasks, o)

	date, ver := time.Now().UTC().Format("2006-01-02"), buildVersion()
	var entries []tunedb.Entry
	for _, r := range results {
		e, err := r.Entry(date, ver, info.DriverVersion)
		if err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "memra:", err)
			continue
		}
		entries = append(entries, e)
	}
	passed := len(entries) // tasks with a passing arm, before the confirmation drops any
	if groups := confirmGroups(entries); confirm && len(groups) > 0 {
		// the backend takes the card: the sweep's device is done with
		_ = dev.Close()
		logf := func(format string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", a...) }
		// no group starts past the budget; one started before it finishes
		var until time.Time
		if budget > 0 {
			until = start.Add(budget)
		}
		own := ownPicker(db, key)
		verdicts, err := confirmE2E(ctx, until, args[0], own, groups, logf)
		writeVerdicts(out, verdicts)
		if err != nil {
			// what was not confirmed is not written; the other entries are
			verdicts = append(verdicts, unjudged(groups, verdicts)...)
			fmt.Fprintf(cmd.ErrOrStderr(), "memra: %v; the arms it did not confirm are not written\n", err)
		}
		entries = confirmed(entries, verdicts, own)
	}
	if dir, _ := f.GetString("report"); dir != "" {
		m := report.Meta{Device: key.String(), Card: fmt.Sprintf("%s (%s, %d SMs, driver %d)", info.Name, info.Arch(), info.SMs, info.DriverVersion),
			Date: date, Version: ver, Budget: o.Budget.String(), Model: what}
		if err := report.Write(dir, results, m); err != nil {
			return err
		}
		fmt.Fprintf(out, "report: %s/report.md\n", dir)
	}
	if err := writeEntries(cmd, db, key, entries); err != nil {
		return err
	}
	if tuneErr != nil {
		return tuneErr
	}
	if passed < len(results) {
		return fmt.Errorf("%w: %d of %d tasks had no passing arm", errAutotune, len(results)-passed, len(results))
	}
	return nil
}
