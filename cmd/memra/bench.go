package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
)

func init() { rootCmd.AddCommand(newBenchCmd()) }

// benchOptions are the flags of memra bench.
type benchOptions struct {
	prompt, gen, reps int
	device            string
	threads           int
	noProgress        bool
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [MODEL]",
		Short: "Measure prompt processing (pp) and generation (tg) speed",
		Long: `Measure a model's speed through the backend directly, like llama-bench: pp is one
prefill step of -p tokens, tg is -n single-token steps after that prompt (tgN@P).
Each test runs -r times after a warm-up; the table gives the median and the
min–max in tokens per second. Without MODEL the embedded default model runs.
When prompt and generation do not fit the model's context, the prompt is cut.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			model := ""
			if len(args) == 1 {
				model = args[0]
			}
			return runBench(cmd, model, o)
		},
	}
	f := cmd.Flags()
	f.IntVarP(&o.prompt, "n-prompt", "p", 512, "prompt tokens of the pp test (0: skip pp)")
	f.IntVarP(&o.gen, "n-gen", "n", 128, "generated tokens of the tg test (0: skip tg)")
	f.IntVarP(&o.reps, "repetitions", "r", 5, "repetitions of each test")
	f.StringVar(&o.device, "device", "", deviceHelp)
	f.IntVarP(&o.threads, "threads", "t", 0, "CPU threads (0: all cores)")
	f.BoolVar(&o.noProgress, "no-progress", false, "hide the progress bar")
	cmd.AddCommand(newBenchServeCmd())
	return cmd
}

// benchResult is the speed of one test over its repetitions.
type benchResult struct {
	test  string
	rates []float64 // tokens per second, one per repetition
}

func runBench(cmd *cobra.Command, modelArg string, o *benchOptions) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if o.prompt < 0 || o.gen < 0 || o.reps < 1 || o.prompt+o.gen == 0 {
		return fmt.Errorf("bench: need -p ≥ 0, -n ≥ 0 (not both 0) and -r ≥ 1")
	}
	m, err := openModel(modelArg)
	if err != nil {
		return err
	}
	defer m.Close()
	b, err := newBackend(m, o.device, o.threads, 1)
	if err != nil {
		return err
	}
	defer b.Close()
	info := b.Info()
	p := o.prompt
	if info.ContextLength > 0 && p+o.gen > info.ContextLength {
		p = max(info.ContextLength-o.gen, 0)
		fmt.Fprintf(stderr, "bench: context of %d tokens: prompt cut from %d to %d\n", info.ContextLength, o.prompt, p)
		if p+o.gen > info.ContextLength {
			return fmt.Errorf("bench: -n %d does not fit the context of %d", o.gen, info.ContextLength)
		}
	}
	if info.MaxBatchTokens > 0 && p > info.MaxBatchTokens {
		return fmt.Errorf("bench: -p %d above the backend's %d tokens per step", p, info.MaxBatchTokens)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	tokens := make([]int32, p+o.gen)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(info.VocabSize))
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	// Warm-up: page weights in, size buffers.
	if _, _, err := benchOnce(ctx, b, tokens[:min(max(p, 1), 16)], 2); err != nil {
		return err
	}

	var bar *progressbar.ProgressBar
	if !o.noProgress {
		bar = progressbar.NewOptions(o.reps,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription("bench"),
			progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(),
		)
	}
	pp := benchResult{test: fmt.Sprintf("pp%d", p)}
	tg := benchResult{test: fmt.Sprintf("tg%d", o.gen)}
	if p > 0 {
		tg.test += fmt.Sprintf("@%d", p)
	}
	for range o.reps {
		dpp, dtg, err := benchOnce(ctx, b, tokens[:p], o.gen)
		if err != nil {
			return err
		}
		if p > 0 {
			pp.rates = append(pp.rates, float64(p)/dpp.Seconds())
		}
		if o.gen > 0 {
			tg.rates = append(tg.rates, float64(o.gen)/dtg.Seconds())
		}
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	var results []benchResult
	for _, r := range []benchResult{pp, tg} {
		if len(r.rates) > 0 {
			results = append(results, r)
		}
	}
	return writeBenchTable(stdout, m, info, o, results)
}

// benchOnce runs one prefill of prompt (as one step) and then gen
// single-token steps on a fresh sequence, and returns both durations.
func benchOnce(ctx context.Context, b runtime.Backend, prompt []int32, gen int) (pp, tg time.Duration, err error) {
	const seq runtime.SeqID = 1
	b.Free(seq)
	defer b.Free(seq)
	pos := 0
	if len(prompt) > 0 {
		t0 := time.Now()
		if _, err := b.Step(ctx, []runtime.SeqStep{{Seq: seq, Tokens: prompt, Logits: true}}); err != nil {
			return 0, 0, fmt.Errorf("bench: prompt step: %w", err)
		}
		pp = time.Since(t0)
		pos = len(prompt)
	}
	next := int32(1)
	t0 := time.Now()
	for i := range gen {
		step := []runtime.SeqStep{{Seq: seq, Pos: pos + i, Tokens: []int32{next}, Logits: true}}
		logits, err := b.Step(ctx, step)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: generation step %d: %w", i, err)
		}
		next = argmax(logits[0])
	}
	tg = time.Since(t0)
	return pp, tg, nil
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// writeBenchTable prints the results like llama-bench's markdown table.
func writeBenchTable(w io.Writer, m *load.Model, info runtime.ModelInfo, o *benchOptions, results []benchResult) error {
	var size, params int64
	for _, t := range m.Tensors {
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		params += n
		if data, err := t.Data(); err == nil {
			size += int64(len(data))
		}
	}
	name := info.Name
	if name == "" {
		name = m.HParams.Arch
	}
	if m.FileType != "" {
		name += " " + m.FileType
	}
	threads := fmt.Sprint(o.threads)
	if o.threads == 0 {
		threads = "all"
	}
	rows := [][]string{{"model", "size", "params", "backend", "threads", "test", "t/s (median)", "min–max"}}
	for _, r := range results {
		s := slices.Clone(r.rates)
		slices.Sort(s)
		median := s[len(s)/2]
		if len(s)%2 == 0 {
			median = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
		rows = append(rows, []string{name, humanBytes(size), humanCount(params), info.Device, threads, r.test,
			fmt.Sprintf("%.2f", median), fmt.Sprintf("%.2f–%.2f", s[0], s[len(s)-1])})
	}
	return writeMarkdownTable(w, rows)
}

// writeMarkdownTable writes rows (the first is the header) as a markdown
// table: the first column left-aligned, the others right-aligned.
func writeMarkdownTable(w io.Writer, rows [][]string) error {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		for i, c := range cells {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString("| " + c + pad + " ")
			} else {
				b.WriteString("| " + pad + c + " ")
			}
		}
		b.WriteString("|\n")
	}
	line(rows[0])
	for i, wd := range widths {
		if i == 0 {
			b.WriteString("| " + strings.Repeat("-", wd) + " ")
		} else {
			b.WriteString("| " + strings.Repeat("-", wd-1) + ": ")
		}
	}
	b.WriteString("|\n")
	for _, r := range rows[1:] {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func humanCount(n int64) string {
	units := []string{"", "K", "M", "B", "T"}
	f := float64(n)
	i := 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprint(n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.2f", f), ".00") + " " + units[i]
}
