package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/pipeline"
)

func init() { rootCmd.AddCommand(newBenchCmd()) }

// benchOptions are the flags of memra bench.
type benchOptions struct {
	prompt, gen, reps int
	context           int
	device            string
	kvCache           string
	kvMemory          float64
	batchInvariant    string
	cpuProducts       string
	threads           int
	noProgress        bool
	batches           string
	roofline, untuned bool
	profile           bool
	profilePrefill    int
	pipelined         bool
	verify            int
	perfRows          bool
	jsonPath          string
	plotPath          string
	pp                ppOptions
	spec              specOptions
	compiled          string
	artifact          *cuda.Artifact
	// stepTokens sizes the CUDA launch sequence when above the prompt's
	// need (--profile-prefill: the profiled step in one pass; gpuOptions.stepTokens)
	stepTokens int
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [MODEL]",
		Short: "Measure prompt processing (pp) and generation (tg) speed",
		Long: `Measure a model's speed through the backend directly, like llama-bench: pp is one
prefill step of -p tokens, tg is -n single-token steps after that prompt (tgN@P).
With -b, tg runs for each batch size: b sequences prefill the prompt, then
decode together; the rate is their aggregate tokens per second.
Each test runs -r times after a warm-up; the table gives the median and the
min–max in tokens per second. Without MODEL the embedded default model runs.
When prompt and generation do not fit the model's context, the prompt is cut.

--roofline (CUDA) measures in the same run a device-to-device copy of 2 GiB
(read + write bytes, median of 5) and a bf16 product at 8192×8192×8192
(cuBLASLt's where the library is found, with memra's own prefill product
beside it; else memra's own), and reports tg as weight bandwidth (weight
bytes read per step × steps/s) against the copy rate and pp as TFLOP/s
(2 × product parameters × tokens + attention) against the product.
On the CPU the roofline is measured by default (--roofline=false skips it):
a copy of 512 MiB on all threads, a loop of float32 FMAs and one of the
int8 products' multiply-add instruction (vpdpbusd or vpmaddubsw), medians
of 3; pp is reported as GFLOP/s against the FMA peak, with the int8 peak
beside it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFlagLimits(cmd, benchLimits); err != nil {
				return err
			}
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
	f.IntVar(&o.context, "context", 0, "KV positions per sequence (0: prompt + generated tokens); e.g. 4096 to decode with the cache a server allocates")
	f.IntVarP(&o.reps, "repetitions", "r", 5, "repetitions of each test")
	f.StringVar(&o.device, "device", "", deviceHelp)
	f.StringVar(&o.kvCache, "kv-cache", "", kvCacheHelp)
	f.Float64Var(&o.kvMemory, "kv-memory", 0, kvMemoryHelp)
	addInvariantFlag(f, &o.batchInvariant)
	f.StringVar(&o.cpuProducts, "cpu-products", "int8", cpuProductsHelp)
	f.IntVarP(&o.threads, "threads", "t", 0, "CPU threads (0: all cores)")
	f.BoolVar(&o.noProgress, "no-progress", false, "hide the progress bar")
	f.StringVarP(&o.batches, "batch", "b", "1", "decode batch sizes of the tg test, comma separated (e.g. 1,2,4,8)")
	f.BoolVar(&o.roofline, "roofline", false, "report bandwidth and TFLOP/s against a copy and a matmul measured in the same run (CUDA; always on the CPU unless set false)")
	f.BoolVar(&o.profile, "profile", false, "after the tests, time every kernel of one decode step per batch size and print where the step's time goes (CUDA)")
	f.IntVar(&o.profilePrefill, "profile-prefill", 0, "with --profile: the profiled step also carries this many prompt tokens of new sequences, in chunks of 512 (a serving step that admits requests)")
	f.BoolVar(&o.pipelined, "pipelined", false, "decode as the server does where it can: each step launched before the previous one's tokens are read, the device feeding them (CUDA)")
	f.IntVar(&o.verify, "verify", 0, "also time tg as speculative verify steps: the sequence's token and this many drafts on its pages each step, every draft rejected (one token a step; the row beside tg's batch 1 gives a verify step's cost)")
	f.BoolVar(&o.untuned, "untuned", false, "use every kernel family's default arm instead of the tunedb (CUDA)")
	f.BoolVar(&o.perfRows, "perf-rows", false, "print a docs/PERFORMANCE.md row per test")
	f.StringVar(&o.jsonPath, "json", "", "write the raw results to this JSON file")
	f.StringVar(&o.plotPath, "plot", "", "draw decode tok/s against batch size to this SVG file")
	addCompiledFlag(f, &o.compiled)
	addPPFlags(cmd, &o.pp)
	addSpecFlags(f, &o.spec)
	cmd.AddCommand(newBenchServeCmd())
	return cmd
}

// benchResult is the speed of one test over its repetitions.
type benchResult struct {
	test  string
	batch int
	tg    bool
	rates []float64 // tokens per second (all sequences), one per repetition
}

// parseBatches parses the -b list.
func parseBatches(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bench: -b %q: want positive batch sizes separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchDevice resolves --device like newBackend: cuda ordinal, or -1 for cpu.
func benchDevice(device string) (int, error) {
	if device == "" || device == "auto" {
		if cuda.Available() == nil {
			return 0, nil
		}
		return -1, nil
	}
	if device == "cpu" {
		return -1, nil
	}
	if device == "cuda" {
		return 0, nil
	}
	if rest, ok := strings.CutPrefix(device, "cuda:"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("device %q: want cpu, cuda or cuda:N", device)
}

// benchBackend builds the backend: on CUDA sized for maxSeqs sequences of
// ctxLen positions (so a large batch of a big model fits), with the tunedb
// notice on stderr.
func benchBackend(m *load.Model, o *benchOptions, ctxLen, maxSeqs int, stderr io.Writer) (runtime.Backend, error) {
	ord, err := benchDevice(o.device)
	if err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	kv := gpuOptions{kvCache: o.kvCache, context: ctxLen, kvMemory: o.kvMemory, batchInvariant: o.batchInvariant, cpuProducts: o.cpuProducts,
		stepTokens: max(o.prompt, 512, o.stepTokens)}
	if a := o.artifact; a != nil {
		switch {
		case ord < 0 || o.pp.enabled() || o.roofline || o.untuned:
			return nil, fmt.Errorf("bench: --compiled runs one CUDA device with the artifact's arms: not with --device cpu, --pp-stages, --roofline or --untuned")
		case maxSeqs > a.Manifest.MaxSeqs:
			return nil, fmt.Errorf("bench: -b %d: the artifact in %s was compiled for %d sequences", maxSeqs, a.Dir, a.Manifest.MaxSeqs)
		case o.prompt > a.Manifest.PrefillTokens:
			return nil, fmt.Errorf("bench: -p %d: the artifact in %s was compiled for %d prefill tokens", o.prompt, a.Dir, a.Manifest.PrefillTokens)
		}
		kv.artifact = a
	}
	if o.pp.enabled() {
		if o.roofline {
			return nil, fmt.Errorf("bench: --roofline measures one GPU; not with --pp-stages")
		}
		device, pp := "cpu", o.pp
		if ord >= 0 {
			device = "cuda"
		}
		pp.logf = logf
		return newPipelineBackend(m, device, o.threads, maxSeqs, pp, kv, cuda.BackendOptions{Untuned: o.untuned, Logf: logf})
	}
	if ord < 0 {
		return newBackend(m, "cpu", o.threads, maxSeqs, kv)
	}
	if err := kv.check(); err != nil {
		return nil, err
	}
	return cuda.NewBackend(m, kv.cudaOptions(cuda.BackendOptions{Device: ord, MaxSeqs: maxSeqs, Untuned: o.untuned, Logf: logf}))
}

func runBench(cmd *cobra.Command, modelArg string, o *benchOptions) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if o.prompt < 0 || o.gen < 0 || o.reps < 1 || o.prompt+o.gen == 0 {
		return fmt.Errorf("bench: need -p ≥ 0, -n ≥ 0 (not both 0) and -r ≥ 1")
	}
	batches, err := parseBatches(o.batches)
	if err != nil {
		return err
	}
	if o.compiled != "" {
		a, path, err := openCompiled(cmd, o.compiled, modelArg)
		if err != nil {
			return err
		}
		if fl := cmd.Flags().Lookup("kv-cache"); fl != nil && fl.Changed && !strings.EqualFold(o.kvCache, a.Manifest.Cache) {
			return fmt.Errorf("--kv-cache %s: the artifact in %s was compiled for %s", o.kvCache, a.Dir, a.Manifest.Cache)
		}
		// as run and serve: the artifact's class (artifactOptions), and a
		// flag that names another is refused
		if fl := cmd.Flags().Lookup("batch-invariant"); fl != nil && fl.Changed {
			if err := artifactNumerics(a, o.batchInvariant); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
		o.artifact, modelArg = a, path
	}
	m, err := openModel(cmd, modelArg)
	if err != nil {
		return err
	}
	defer m.Close()
	if o.context < 0 {
		return fmt.Errorf("bench: --context %d: want 0 (prompt + generated tokens) or a position count", o.context)
	}
	ctxLen := max(o.prompt+o.gen, o.context)
	if cl := m.HParams.ContextLength; cl > 0 {
		ctxLen = min(ctxLen, cl)
	}
	if o.spec.on() {
		return runBenchSpec(cmd, m, o, stderr)
	}
	if o.profilePrefill < 0 || (o.profilePrefill > 0 && !o.profile) {
		return fmt.Errorf("bench: --profile-prefill %d: want a token count with --profile", o.profilePrefill)
	}
	if o.verify < 0 || o.verify > runtime.MaxSpecDraft || (o.verify > 0 && o.pipelined) {
		return fmt.Errorf("bench: --verify %d: want 1 to %d drafts, without --pipelined", o.verify, runtime.MaxSpecDraft)
	}
	seqs := max(1, maxOf(batches), o.verify+1)
	if o.profilePrefill > 0 {
		seqs += chunksOf(o.profilePrefill) // the new sequences the profiled step admits
		o.stepTokens = max(o.prompt, 512, maxOf(batches)+o.profilePrefill)
	}
	b, err := benchBackend(m, o, max(ctxLen, 16), seqs, stderr)
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
	// Warm-up: page weights in, size buffers, capture graphs.
	if _, _, err := benchOnce(ctx, b, tokens[:min(max(p, 1), 16)], 2, o.pipelined); err != nil {
		return err
	}
	for _, bs := range batches {
		if bs > 1 && o.gen > 0 {
			if _, err := benchBatch(ctx, b, tokens[:min(max(p, 1), 16)], bs, 2, o.pipelined); err != nil {
				return err
			}
		}
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
	pp := &benchResult{test: fmt.Sprintf("pp%d", p), batch: 1}
	tgName := fmt.Sprintf("tg%d", o.gen)
	if p > 0 {
		tgName += fmt.Sprintf("@%d", p)
	}
	tgs := make([]*benchResult, len(batches))
	for i, bs := range batches {
		tgs[i] = &benchResult{test: tgName, batch: bs, tg: true}
	}
	var verify *benchResult
	if o.verify > 0 && o.gen > 0 {
		if _, err := benchVerify(ctx, b, tokens[:min(max(p, 1), 16)], o.verify, 2); err != nil {
			return err
		}
		verify = &benchResult{test: fmt.Sprintf("%s verify %d rows", tgName, o.verify+1), batch: 1, tg: true}
		tgs = append(tgs, verify)
	}
	pstats, isPipe := b.(interface{ Stats() pipeline.Stats })
	var before pipeline.Stats
	if isPipe {
		before = pstats.Stats()
	}
	dev := deviceTimesOf(b, o.pipelined)
	for range o.reps {
		dpp, dtg, err := benchOnce(ctx, b, tokens[:p], o.gen, o.pipelined)
		if err != nil {
			return err
		}
		if p > 0 {
			pp.rates = append(pp.rates, float64(p)/dpp.Seconds())
		}
		for i, bs := range batches {
			if o.gen == 0 {
				break
			}
			d := dtg
			if bs > 1 {
				if d, err = benchBatch(ctx, b, tokens[:p], bs, o.gen, o.pipelined); err != nil {
					return err
				}
			}
			tgs[i].rates = append(tgs[i].rates, float64(bs*o.gen)/d.Seconds())
		}
		if verify != nil {
			d, err := benchVerify(ctx, b, tokens[:p], o.verify, o.gen)
			if err != nil {
				return err
			}
			verify.rates = append(verify.rates, float64(o.gen)/d.Seconds())
		}
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if isPipe {
		reportPipeline(stderr, before, pstats.Stats())
	}
	dev.report(stderr)
	var results []benchResult
	for _, r := range append([]*benchResult{pp}, tgs...) {
		if len(r.rates) > 0 {
			results = append(results, *r)
		}
	}
	rep := &benchReport{model: m, info: info, opts: o, results: results}
	cb, isCPU := b.(*cpu.Backend)
	if isCPU {
		rep.products = cb.Products().String()
	}
	switch {
	case isCPU && (o.roofline || !cmd.Flags().Changed("roofline")):
		rep.measureCPURoofline(o.threads, stderr)
	case o.roofline:
		if err := rep.measureRoofline(b, stderr); err != nil {
			return err
		}
	}
	if err := rep.write(stdout); err != nil {
		return err
	}
	if o.profile {
		cb, ok := b.(*cuda.Backend)
		if !ok {
			return fmt.Errorf("bench: --profile needs the CUDA backend")
		}
		cost := costOf(m)
		for i, bs := range batches {
			if tgs[i] == verify {
				continue
			}
			step := 0.0
			if r := tgs[i]; len(r.rates) > 0 {
				step = float64(bs) / medianOf(r.rates)
			}
			if err := profileDecode(ctx, stdout, cb, tokens[:p], bs, o.profilePrefill, o.reps, step, cost.expertShare(bs)); err != nil {
				return err
			}
		}
	}
	return nil
}

// reportPipeline prints the pipeline's boundary copy time and stage busy
// times over the timed repetitions (after minus before).
func reportPipeline(w io.Writer, before, after pipeline.Stats) {
	steps := after.Steps - before.Steps
	copyT := after.Boundary - before.Boundary
	per := time.Duration(0)
	if steps > 0 {
		per = copyT / time.Duration(steps)
	}
	fmt.Fprintf(w, "pipeline: %d steps, %d micro-batches; boundary copy %.3f ms in all, %.1f µs per step\n",
		steps, after.MicroBatches-before.MicroBatches, ms(copyT), float64(per.Nanoseconds())/1000)
	for i := range after.StageBusy {
		fmt.Fprintf(w, "pipeline: stage %d busy %.3f ms\n", i+1, ms(after.StageBusy[i]-before.StageBusy[i]))
	}
}

func maxOf(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// stepNext runs one step of batch and returns the greedy next token of each
// entry: on the device when the backend has the greedy fast path (as the
// engine uses it), else the argmax of the returned logits.
func stepNext(ctx context.Context, b runtime.Backend, batch []runtime.SeqStep, next []int32) error {
	if g, ok := b.(runtime.GreedyStepper); ok {
		ids, err := g.StepGreedy(ctx, batch)
		if err != nil {
			return err
		}
		copy(next, ids)
		return nil
	}
	logits, err := b.Step(ctx, batch)
	if err != nil {
		return err
	}
	for i := range batch {
		next[i] = runtime.Argmax(logits[i])
	}
	return nil
}

// benchOnce runs one prefill of prompt (as one step) and then gen
// single-token steps on a fresh sequence (pipelined: as decodeSteps), and
// returns both durations.
func benchOnce(ctx context.Context, b runtime.Backend, prompt []int32, gen int, pipelined bool) (pp, tg time.Duration, err error) {
	const seq runtime.SeqID = 1
	b.Free(seq)
	defer b.Free(seq)
	pages, release, err := benchPages(b, 1, len(prompt)+gen, pipelined)
	if err != nil {
		return 0, 0, err
	}
	defer release()
	pos := 0
	if len(prompt) > 0 {
		t0 := time.Now()
		if _, err := b.Step(ctx, []runtime.SeqStep{{Seq: seq, Tokens: prompt, Logits: true, Pages: pages[0]}}); err != nil {
			return 0, 0, fmt.Errorf("bench: prompt step: %w", err)
		}
		pp = time.Since(t0)
		pos = len(prompt)
	}
	t0 := time.Now()
	if err := decodeSteps(ctx, b, []runtime.SeqID{seq}, pages, pos, []int32{1}, gen, pipelined); err != nil {
		return 0, 0, err
	}
	tg = time.Since(t0)
	return pp, tg, nil
}

// benchBatch prefills prompt into n fresh sequences (one step each, not
// timed), then times gen steps in which all n decode one token together
// (pipelined: as decodeSteps).
func benchBatch(ctx context.Context, b runtime.Backend, prompt []int32, n, gen int, pipelined bool) (time.Duration, error) {
	seqs := make([]runtime.SeqID, n)
	for i := range seqs {
		seqs[i] = runtime.SeqID(100 + i)
		b.Free(seqs[i])
	}
	defer func() {
		for _, s := range seqs {
			b.Free(s)
		}
	}()
	pages, release, err := benchPages(b, n, len(prompt)+gen, pipelined)
	if err != nil {
		return 0, err
	}
	defer release()
	next := make([]int32, n)
	for i, s := range seqs {
		next[i] = 1
		if len(prompt) > 0 {
			if _, err := b.Step(ctx, []runtime.SeqStep{{Seq: s, Tokens: prompt, Logits: false, Pages: pages[i]}}); err != nil {
				return 0, fmt.Errorf("bench: batch %d: prompt of sequence %d: %w", n, i, err)
			}
		}
	}
	t0 := time.Now()
	if err := decodeSteps(ctx, b, seqs, pages, len(prompt), next, gen, pipelined); err != nil {
		return 0, fmt.Errorf("bench: batch %d: %w", n, err)
	}
	return time.Since(t0), nil
}

// benchVerify prefills prompt into a fresh sequence on pages of the
// backend's pool, then times gen speculative verify steps: each step the
// sequence's token at its position and k drafts after it, one entry each
// on the sequence's pages (as the engine lays out a verify step), every
// draft rejected, so the next step starts one position on.
func benchVerify(ctx context.Context, b runtime.Backend, prompt []int32, k, gen int) (time.Duration, error) {
	pb, ok := b.(runtime.PagedBackend)
	if !ok || pb.KVPool() == nil {
		return 0, fmt.Errorf("bench: --verify needs a backend whose pages the caller gives (a page pool)")
	}
	pool := pb.KVPool()
	pages, err := pool.Alloc(pool.PagesFor(len(prompt) + gen + k))
	if err != nil {
		return 0, fmt.Errorf("bench: --verify: pages for %d positions: %w", len(prompt)+gen+k, err)
	}
	defer pool.Release(pages)
	const seq runtime.SeqID = 7
	if len(prompt) > 0 {
		if _, err := b.Step(ctx, []runtime.SeqStep{{Seq: seq, Tokens: prompt, Pages: pages}}); err != nil {
			return 0, fmt.Errorf("bench: --verify: prompt step: %w", err)
		}
	}
	batch := make([]runtime.SeqStep, k+1)
	next := make([]int32, k+1)
	tok := []int32{1} // the sequence's token (the drafts repeat it)
	t0 := time.Now()
	for g := range gen {
		pos := len(prompt) + g
		batch[0] = runtime.SeqStep{Seq: seq, Pos: pos, Tokens: tok, Logits: true, Pages: pages}
		for j := range k {
			batch[1+j] = runtime.SeqStep{Seq: runtime.DraftSeq(seq, j), Pos: pos + 1 + j, Tokens: tok, Logits: true, Pages: pages}
		}
		if err := stepNext(ctx, b, batch, next); err != nil {
			return 0, fmt.Errorf("bench: --verify: step %d: %w", g, err)
		}
		tok[0] = next[0]
	}
	return time.Since(t0), nil
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
