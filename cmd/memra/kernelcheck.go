package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/autotune/check"
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
)

var errKernelCheck = errors.New("kernel-check failed")

func init() { rootCmd.AddCommand(newKernelCheckCmd()) }

func newKernelCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kernel-check",
		Short: "run every kernel family on the GPU against its CPU reference (or only compile them)",
		Long: "kernel-check generates each kernel family for model-like shapes, runs it on fresh random inputs on\n" +
			"the GPU and compares with the CPU reference, printing one row per kernel (µs: median of --reps\n" +
			"CUDA-event samples over rotating inputs larger than L2). With --compile-only it\n" +
			"compiles every kernel through NVRTC for each --arch (no GPU needed). Exits non-zero on any failure.",
		RunE: runKernelCheck,
	}
	cmd.Flags().StringSlice("shapes", []string{"llama3-8b"}, "shapes: llama3-8b, qwen2.5-7b, qwen3-8b, tiny, gemma3-12b (with the Gemma kernels and their sliding-window attention), qwen3-30b-a3b, mixtral-8x7b, tiny-moe")
	cmd.Flags().StringSlice("types", []string{"q4_0", "q8_0", "q4_k", "q5_k", "q6_k", "f16", "bf16"}, "weight types")
	cmd.Flags().Bool("compile-only", false, "only compile the kernels with NVRTC")
	cmd.Flags().StringSlice("arch", nil, "NVRTC targets for --compile-only (default compute_90; e.g. sm_90a,sm_120a)")
	cmd.Flags().Uint64("seed", 1, "random seed")
	cmd.Flags().StringSlice("gemv-arms", nil, "extra GEMV arms of repacked weight types to check and time (e.g. t256_r8_u2_s1_l1_q16_w2)")
	cmd.Flags().String("only", "", "check only the kernels whose family or dtype column contains this (e.g. gemv, or \"q8_0 cache\"); "+
		"with --compile-only, whose family or kernel name contains it")
	cmd.Flags().Int("reps", 20, "timed samples per kernel (median reported); 0 checks without timing")
	cmd.Flags().Bool("no-progress", false, "no progress bar on stderr")
	return cmd
}

// kcProgress is kernel-check's progress bar on stderr (the compilation of
// a shape's kernels can take minutes): one step a kernel run or compile,
// the case in its description. Nil writes nothing.
type kcProgress struct{ bar *progressbar.ProgressBar }

func newKCProgress(cmd *cobra.Command, total int) *kcProgress {
	if off, _ := cmd.Flags().GetBool("no-progress"); off || total == 0 {
		return nil
	}
	return &kcProgress{bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(cmd.ErrOrStderr()),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(24),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish())}
}

func (p *kcProgress) step(what string) {
	if p == nil {
		return
	}
	p.bar.Describe(fmt.Sprintf("%-36s", what))
	_ = p.bar.Add(1)
}

func (p *kcProgress) finish() {
	if p != nil {
		_ = p.bar.Finish()
	}
}

// interrupted ends a kernel-check that a signal stopped: the rows so far
// are printed (so a run cut by a time limit keeps what it measured) and
// the error says how far it got.
func interrupted(cmd *cobra.Command, rows []kcRow, total int, timed bool) error {
	_ = printRows(cmd, rows, timed)
	return fmt.Errorf("kernel-check: interrupted after %d of %d runs", len(rows), total)
}

// kcContext is cancelled by SIGTERM or an interrupt.
func kcContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	base := cmd.Context()
	if base == nil {
		base = context.Background()
	}
	return signal.NotifyContext(base, syscall.SIGTERM, os.Interrupt)
}

// kcRow is one line of the result table.
type kcRow struct {
	family, shape, dtype, arm, kernel string
	relErr, tol, us                   float64
	err                               error
}

func (r kcRow) pass() bool { return r.err == nil && r.relErr <= r.tol }

func runKernelCheck(cmd *cobra.Command, _ []string) error {
	shapeNames, _ := cmd.Flags().GetStringSlice("shapes")
	typeNames, _ := cmd.Flags().GetStringSlice("types")
	compileOnly, _ := cmd.Flags().GetBool("compile-only")
	archs, _ := cmd.Flags().GetStringSlice("arch")
	seed, _ := cmd.Flags().GetUint64("seed")
	reps, _ := cmd.Flags().GetInt("reps")
	only, _ := cmd.Flags().GetString("only")
	armNames, _ := cmd.Flags().GetStringSlice("gemv-arms")
	var extra []codegen.GEMVArm
	for _, n := range armNames {
		a, err := codegen.ParseGEMVArm(n)
		if err != nil {
			return err
		}
		extra = append(extra, a)
	}
	var shapes []codegen.Shape
	for _, n := range shapeNames {
		s, err := codegen.ShapeByName(n)
		if err != nil {
			return err
		}
		shapes = append(shapes, s)
	}
	var types []dtype.Type
	for _, n := range typeNames {
		t, err := dtype.Parse(n)
		if err != nil {
			return err
		}
		types = append(types, t)
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return fmt.Errorf("kernel-check needs NVRTC: %w", err)
	}
	major, minor := nv.Version()
	fmt.Fprintf(cmd.OutOrStdout(), "NVRTC %d.%d (%s)\n", major, minor, nv.Library())
	if compileOnly {
		return compileOnlyCheck(cmd, nv, shapes, types, archs, only)
	}
	if err := cuda.Available(); err != nil {
		return fmt.Errorf("kernel-check needs a GPU: %w", err)
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return err
	}
	defer dev.Close()
	info := dev.Info()
	fmt.Fprintf(cmd.OutOrStdout(), "GPU %s (sm_%d%d, %d SMs, driver %d)\n", info.Name, info.Major, info.Minor, info.SMs, info.DriverVersion)
	cache, err := cuda.NewCache("", nv)
	if err != nil {
		return err
	}
	d := check.NewDevice(dev, cache)
	type run struct {
		c   *check.Case
		arm codegen.Point
	}
	var runs []run
	for _, s := range shapes {
		for _, c := range check.KernelCheckCases(s, types, seed) {
			if only != "" && !strings.Contains(c.Label, only) && !strings.Contains(c.DType, only) {
				continue
			}
			arms := append([]codegen.Point{c.Space().Default}, c.ExtraArms...)
			if c.AnyGEMVArm {
				for _, a := range extra {
					arms = append(arms, codegen.FitXQ(a, c.K).Point())
				}
			}
			for _, arm := range arms {
				runs = append(runs, run{c, arm})
			}
		}
	}
	ctx, stop := kcContext(cmd)
	defer stop()
	// Compile every kernel and make every case's inputs first, on all
	// cores (NVRTC serialises compilations itself unless it may run them
	// together), then run them on the GPU one at a time; an error here
	// comes back from the run and is reported in its row.
	prep := newKCProgress(cmd, len(runs))
	parallelEach(ctx, len(runs), goruntime.NumCPU(), func(i int) {
		r := runs[i]
		prep.step("compile " + r.c.Label + " " + r.c.Shape)
		if d.Compile(r.c, r.arm) == nil {
			_ = r.c.Prepare()
		}
	})
	prep.finish()
	bar := newKCProgress(cmd, len(runs))
	var rows []kcRow
	for _, r := range runs {
		if ctx.Err() != nil {
			return interrupted(cmd, rows, len(runs), true)
		}
		c := r.c
		bar.step(c.Label + " " + c.Shape)
		row := kcRow{family: c.Label, shape: c.Shape, dtype: c.DType, arm: c.Space().ArmName(r.arm), tol: c.TolOf(r.arm)}
		res, err := d.Run(c, r.arm, reps)
		row.kernel, row.relErr, row.us, row.err = res.Kernel, res.RelErr, res.TimeUS, err
		rows = append(rows, row)
	}
	bar.finish()
	return printRows(cmd, rows, true)
}

func compileOnlyCheck(cmd *cobra.Command, nv *cuda.NVRTC, shapes []codegen.Shape, types []dtype.Type, archs []string, only string) error {
	if len(archs) == 0 {
		archs = []string{"compute_90"}
	}
	kernels := make([][]*codegen.Kernel, len(shapes))
	for i, s := range shapes {
		var err error
		if kernels[i], err = compileOnlyKernels(s, types, only); err != nil {
			return err
		}
	}
	total := 0
	for i := range shapes {
		total += len(archs) * len(kernels[i])
	}
	ctx, stop := kcContext(cmd)
	defer stop()
	bar := newKCProgress(cmd, total)
	var rows []kcRow
	for _, arch := range archs {
		for i, s := range shapes {
			for _, k := range kernels[i] {
				if ctx.Err() != nil {
					return interrupted(cmd, rows, total, false)
				}
				bar.step(arch + " " + k.Family)
				_, err := nv.Compile(k.Source, k.Name+".cu", []string{cuda.ArchOption(arch)})
				rows = append(rows, kcRow{family: k.Family, shape: s.Name, dtype: arch, kernel: k.Name, err: err, tol: 0})
			}
		}
	}
	bar.finish()
	return printRows(cmd, rows, false)
}

// compileOnlyKernels are the default kernels of shape s for the weight
// types that --compile-only compiles: with only set, those whose family or
// name contains it (the name spells the weight type: gemv_q8_0_…).
func compileOnlyKernels(s codegen.Shape, types []dtype.Type, only string) ([]*codegen.Kernel, error) {
	ks, err := codegen.DefaultKernels(s, types)
	if err != nil || only == "" {
		return ks, err
	}
	var keep []*codegen.Kernel
	for _, k := range ks {
		if strings.Contains(k.Family, only) || strings.Contains(k.Name, only) {
			keep = append(keep, k)
		}
	}
	if len(keep) == 0 {
		return nil, fmt.Errorf("kernel-check: no kernel of shape %s matches --only %q", s.Name, only)
	}
	return keep, nil
}

func printRows(cmd *cobra.Command, rows []kcRow, timed bool) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	if timed {
		fmt.Fprintln(tw, "family\tshape\tdtype\tarm\trel.err\ttol\tµs\tpass")
	} else {
		fmt.Fprintln(tw, "family\tshape\ttarget\tkernel\tpass")
	}
	failed := 0
	for _, r := range rows {
		ok := "ok"
		if !r.pass() {
			ok, failed = "FAIL", failed+1
		}
		if timed {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2e\t%.0e\t%.1f\t%s\n", r.family, r.shape, r.dtype, r.arm, r.relErr, r.tol, r.us, ok)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.family, r.shape, r.dtype, r.kernel, ok)
		}
	}
	tw.Flush()
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", r.kernel, r.shape, r.err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d kernels", errKernelCheck, failed, len(rows))
	}
	return nil
}

// parallelEach calls f(i) for i in [0, n) on workers goroutines (at least
// one) and returns when every call has returned; once ctx is done no new
// call starts.
func parallelEach(ctx context.Context, n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range max(1, min(workers, n)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
}
