package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/runtime/tokenizer"
	"github.com/memra-ai/memra/serve/chat"
)

func init() { rootCmd.AddCommand(newRunCmd()) }

// runOptions are the flags of memra run.
type runOptions struct {
	prompt    string
	maxTokens int
	sampling  runtime.SamplingParams
	seed      int64
	device    string
	kvCache   string
	kv        gpuOptions
	threads   int
	chat      bool
	system    string
	stop      []string
	ignoreEOS bool
	printIDs  bool
	pp        ppOptions
	spec      specOptions
	compiled  string
}

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [MODEL]",
		Short: "Run one generation and stream it to stdout",
		Long: `Run one generation through the engine and stream the text to stdout; prompt and
generation speed go to stderr. Without MODEL the embedded default model
(` + builtin.Name + `) runs. Without --prompt the generation starts from the BOS token alone.

` + modelHelp + `

Sampling follows the engine's fixed order: logit bias, repetition penalty, then
temperature (0 = greedy), top-k, top-p and min-p.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFlagLimits(cmd, runLimits); err != nil {
				return err
			}
			model := ""
			if len(args) == 1 {
				model = args[0]
			}
			return runGenerate(cmd, model, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.prompt, "prompt", "p", "", "prompt text (default: start from BOS)")
	f.IntVarP(&o.maxTokens, "max-tokens", "n", 0, "tokens to generate at most (0: until end of text or a full context)")
	f.Float32Var(&o.sampling.Temperature, "temperature", 0.8, "sampling temperature; 0 is greedy")
	f.IntVar(&o.sampling.TopK, "top-k", 40, "keep the k most likely tokens (0: off)")
	f.Float32Var(&o.sampling.TopP, "top-p", 0.95, "nucleus sampling mass (1: off)")
	f.Float32Var(&o.sampling.MinP, "min-p", 0.05, "drop tokens below min-p × the best probability (0: off)")
	f.Float32Var(&o.sampling.RepeatPenalty, "repeat-penalty", 1, "repetition penalty over the last --repeat-last-n tokens (1: off)")
	f.IntVar(&o.sampling.PenaltyLastN, "repeat-last-n", 64, "tokens of history the penalties look at (0: all)")
	f.Float32Var(&o.sampling.PresencePenalty, "presence-penalty", 0, "OpenAI presence penalty")
	f.Float32Var(&o.sampling.FrequencyPenalty, "frequency-penalty", 0, "OpenAI frequency penalty")
	f.Int64Var(&o.seed, "seed", -1, "random seed (-1: a random one)")
	f.StringVar(&o.device, "device", "", deviceHelp)
	f.StringVar(&o.kvCache, "kv-cache", "", kvCacheHelp)
	addKVFlags(f, &o.kv)
	f.IntVarP(&o.threads, "threads", "t", 0, "CPU threads (0: all cores)")
	f.BoolVar(&o.chat, "chat", false, "wrap the prompt in the model's chat template as one user message")
	f.StringVar(&o.system, "system", "", "system message for --chat")
	f.StringArrayVar(&o.stop, "stop", nil, "stop string (repeatable)")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating past end-of-text tokens")
	f.BoolVar(&o.printIDs, "print-ids", false, "print the generated token ids on stderr (debugging)")
	addCompiledFlag(f, &o.compiled)
	addPPFlags(cmd, &o.pp)
	addSpecFlags(f, &o.spec)
	return cmd
}

// deviceHelp is the help text of every --device flag.
const deviceHelp = "device to run on: cpu, cuda or cuda:N (default: cuda when a GPU is usable, else cpu)"

const kvCacheHelp = "GPU KV cache type: f16 (default), bf16, f32 (with float32 prefill the exact configuration) or q8_0 (int8, a float32 scale per 32 elements: 0.56x the bytes of f16); the CPU keeps f32"

// gpuOptions are the command-line choices of the backends' KV cache shared
// by run, serve and bench: its element type (CUDA only), the context and
// the page pool's memory.
type gpuOptions struct {
	kvCache string
	// context caps a sequence's positions below the model's (0: the model's)
	context int
	// kvMemory is the KV page pool: GiB from 1 up, a fraction of the memory
	// left after weights below 1, 0 for the default
	kvMemory float64
	// batchInvariant: the same products at every decode width (CUDA):
	// "" off, "f16" or "int8" the class of those products (invariance)
	batchInvariant string
	// cpuProducts is the CPU backend's products: int8 ("" too) or exact
	cpuProducts string
	// embedding prepares the backend for embeddings (serve, for a model
	// with a pooling)
	embedding bool
	// artifact, when set, supplies the CUDA backend's kernels (--compiled)
	artifact *cuda.Artifact
	// stepTokens, when positive, is the tokens one CUDA launch sequence
	// holds (serve's --max-batch-tokens: a whole engine step in one pass;
	// bench's prompt or profiled step)
	stepTokens int
}

const (
	contextHelp  = "most positions of a sequence, prompt and output (0: the model's trained context; YaRN and Llama 3.1 scaling included)"
	kvMemoryHelp = "KV page pool: GiB (1 and up) or a fraction of the memory left after the weights (below 1); 0: every sequence at the whole context, at most what fits"
)

// addKVFlags registers --context, --kv-memory and --batch-invariant.
func addKVFlags(f *pflag.FlagSet, g *gpuOptions) {
	f.IntVar(&g.context, "context", 0, contextHelp)
	f.Float64Var(&g.kvMemory, "kv-memory", 0, kvMemoryHelp)
	addInvariantFlag(f, &g.batchInvariant)
	f.StringVar(&g.cpuProducts, "cpu-products", "int8", cpuProductsHelp)
}

const cpuProductsHelp = "CPU: the matrix products' class: int8 (activations quantised per 32 once a product, integer sums; the fast one) or exact (the float reference every kernel is checked against)"

// products reads --cpu-products.
func (g gpuOptions) products() (cpu.Products, error) {
	switch g.cpuProducts {
	case "", "int8":
		return cpu.ProductsInt8, nil
	case "exact":
		return cpu.ProductsExact, nil
	}
	return 0, fmt.Errorf("--cpu-products %q: want int8 or exact", g.cpuProducts)
}

const batchInvariantHelp = "CUDA: the decode products' numerical class. int8 (the default: the one-row int8 products as tuned, every other width's sums in their order) and f16 (the flag alone: f16 tensor-core products at every width, Q4_K/Q6_K and float weights) are batch invariant: greedy output is the same alone, batched, speculating or from the prefix cache; off runs each width's fastest products, up to 2.3x the int8 class's speed at 64 rows (the CPU backend is invariant always)"

// addInvariantFlag registers --batch-invariant: the flag alone is f16.
func addInvariantFlag(f *pflag.FlagSet, v *string) {
	f.StringVar(v, "batch-invariant", cuda.DefaultNumerics.String(), batchInvariantHelp)
	f.Lookup("batch-invariant").NoOptDefVal = cuda.NumericsF16.String()
}

// invariance reads --batch-invariant: the decode products' numerical
// class ("" is the default's).
func invariance(v string) (cuda.Numerics, error) {
	n, err := cuda.ParseNumerics(v)
	if err != nil {
		return cuda.NumericsDefault, fmt.Errorf("--batch-invariant %q: want int8, f16 or off", v)
	}
	return n.Resolve(), nil
}

// check refuses values the backends cannot honour.
func (g gpuOptions) check() error {
	if g.context < 0 {
		return fmt.Errorf("--context %d: want 0 (the model's) or a positive count of positions", g.context)
	}
	if g.kvMemory < 0 || math.IsNaN(g.kvMemory) || math.IsInf(g.kvMemory, 0) {
		return fmt.Errorf("--kv-memory %g: want GiB (1 and up), a fraction (below 1) or 0", g.kvMemory)
	}
	_, err := invariance(g.batchInvariant)
	return err
}

// kvBytes splits kvMemory into bytes and a fraction.
func (g gpuOptions) kvBytes() (bytes int64, fraction float64) {
	if g.kvMemory >= 1 {
		return int64(g.kvMemory * (1 << 30)), 0
	}
	return 0, g.kvMemory
}

// cudaOptions are the CUDA backend's options from g.
func (g gpuOptions) cudaOptions(o cuda.BackendOptions) cuda.BackendOptions {
	o.Cache = g.kvCache
	o.Numerics, _ = invariance(g.batchInvariant) // check refused the others
	if g.context > 0 {
		o.Context = g.context
	}
	o.KVMemory, o.KVFraction = g.kvBytes()
	o.Embedding = g.embedding
	if g.stepTokens > 0 {
		o.PrefillTokens = g.stepTokens
	}
	return g.artifactOptions(o)
}

// checkCPU rejects GPU-only choices for the CPU backend.
func (g gpuOptions) checkCPU() error {
	if g.kvCache != "" && g.kvCache != "f32" {
		return fmt.Errorf("--kv-cache %s: the CPU backend keeps its KV cache in f32", g.kvCache)
	}
	return nil
}

// newBackend builds the backend of device for m: "cpu", "cuda" or "cuda:N";
// "" picks cuda when cuda.Available() reports a usable GPU, else cpu.
// maxSeqs bounds the sequences holding a KV cache at once. With pp
// enabled the model is split into pipeline stages (cpu: two CPU stages;
// cuda: one GPU per --pp-devices ordinal).
func newBackend(m *load.Model, device string, threads, maxSeqs int, gpu gpuOptions, pp ...ppOptions) (runtime.Backend, error) {
	b, err := newDeviceBackend(m, device, threads, maxSeqs, gpu, pp...)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Path, err)
	}
	return b, nil
}

// newDeviceBackend is newBackend without the model's path in errors.
func newDeviceBackend(m *load.Model, device string, threads, maxSeqs int, gpu gpuOptions, pp ...ppOptions) (runtime.Backend, error) {
	if device == "" || device == "auto" {
		device = "cpu"
		if cuda.Available() == nil || gpu.artifact != nil {
			device = "cuda"
		}
	}
	if gpu.artifact != nil && device != "cuda" && !strings.HasPrefix(device, "cuda:") {
		return nil, fmt.Errorf("device %q: a compiled artifact (--compiled) runs on a CUDA device", device)
	}
	if len(pp) > 0 && pp[0].enabled() {
		if gpu.embedding {
			return nil, fmt.Errorf("embeddings (a model with a pooling) do not run on pipeline stages: serve it without --pp-stages")
		}
		if gpu.artifact != nil {
			return nil, fmt.Errorf("--pp-stages: a compiled artifact (--compiled) holds the whole model's kernels, not a pipeline's stages")
		}
		if device != "cpu" && device != "cuda" {
			return nil, fmt.Errorf("device %q: with --pp-stages use --device cuda and --pp-devices, or --device cpu", device)
		}
		return newPipelineBackend(m, device, threads, maxSeqs, pp[0], gpu, cuda.BackendOptions{})
	}
	if err := gpu.check(); err != nil {
		return nil, err
	}
	switch {
	case device == "cpu":
		if err := gpu.checkCPU(); err != nil {
			return nil, err
		}
		kb, frac := gpu.kvBytes()
		products, err := gpu.products()
		if err != nil {
			return nil, err
		}
		return cpu.New(m, cpu.Options{Threads: threads, MaxSeqs: maxSeqs, Context: gpu.context, KVMemory: kb, KVFraction: frac,
			Products: products, Tiles: cpuTiles(threads), Embedding: gpu.embedding})
	case device == "cuda" || strings.HasPrefix(device, "cuda:"):
		ordinal := 0
		if rest, ok := strings.CutPrefix(device, "cuda:"); ok {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("device %q: want cuda:N", device)
			}
			ordinal = n
		}
		// start-up notices (a tunedb fallback, no cuBLASLt for prefill) go to the log
		logf := func(format string, args ...any) { slog.Warn(fmt.Sprintf(format, args...)) }
		return cuda.NewBackend(m, gpu.cudaOptions(cuda.BackendOptions{Device: ordinal, MaxSeqs: max(maxSeqs, 1), Logf: logf}))
	default:
		return nil, fmt.Errorf("device %q: want cpu, cuda or cuda:N", device)
	}
}

func runGenerate(cmd *cobra.Command, modelArg string, o *runOptions) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	o.kv.kvCache = o.kvCache
	if o.compiled != "" {
		a, path, err := openCompiled(cmd, o.compiled, modelArg)
		if err != nil {
			return err
		}
		if err := o.kv.useArtifact(cmd, a, "", 0); err != nil {
			return err
		}
		modelArg = path
	}
	m, err := openModel(cmd, modelArg)
	if err != nil {
		return err
	}
	defer m.Close()
	tok := m.Tokenizer
	if tok == nil {
		return fmt.Errorf("model %s has no tokenizer", m.Path)
	}
	prompt, err := buildPrompt(m, tok, o)
	if err != nil {
		return err
	}
	o.pp.logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	// one sequence, and beside it the entries of its drafts when it speculates
	rows := 1
	if o.spec.on() {
		rows += o.spec.maxDraft
	}
	if a := o.kv.artifact; a != nil && rows > a.Manifest.MaxSeqs {
		return fmt.Errorf("--spec-max-draft %d: a sequence and its drafts take %d rows, the artifact in %s was compiled for %d (memra compile --max-seqs)", o.spec.maxDraft, rows, a.Dir, a.Manifest.MaxSeqs)
	}
	b, err := newBackend(m, o.device, o.threads, rows, o.kv, o.pp)
	if err != nil {
		return err
	}
	spec, release, err := o.spec.config(cmd, m, o.device, o.threads, 1, o.kv)
	if err != nil {
		b.Close()
		return err
	}
	defer release()
	eng := runtime.NewEngine(b, tok, runtime.EngineConfig{MaxRunning: rows, MaxQueue: 1, Spec: spec})
	defer eng.Close()

	sp := o.sampling
	if o.seed >= 0 {
		s := uint64(o.seed)
		sp.Seed = &s
	}
	base := cmd.Context()
	if base == nil {
		base = context.Background()
	}
	ctx, stop := signal.NotifyContext(base, os.Interrupt)
	defer stop()
	start := time.Now()
	events, err := eng.Submit(ctx, runtime.Request{
		Prompt: prompt, MaxTokens: o.maxTokens, Sampling: sp, Stop: o.stop, IgnoreEOS: o.ignoreEOS,
	})
	if err != nil {
		return err
	}
	var (
		ids        []int32
		firstToken time.Time
		last       runtime.Event
	)
	for ev := range events {
		if len(ev.Tokens) > 0 && firstToken.IsZero() {
			firstToken = time.Now()
		}
		for _, g := range ev.Tokens {
			ids = append(ids, g.Token)
		}
		if _, err := io.WriteString(stdout, ev.Text); err != nil {
			return err
		}
		last = ev
	}
	end := time.Now()
	fmt.Fprintln(stdout)
	if last.Err != nil && !errors.Is(last.Err, context.Canceled) {
		return last.Err
	}
	if o.printIDs {
		fmt.Fprintln(stderr, "generated ids:", joinIDs(ids))
	}
	reportSpeed(stderr, last.Usage, start, firstToken, end, last.Finish)
	if st := eng.Stats(); st.SpecSteps > 0 {
		fmt.Fprintf(stderr, "speculative: %d steps drafted %d tokens, %d accepted (%.1f %%, %.2f tokens a step)\n",
			st.SpecSteps, st.SpecDrafted, st.SpecAccepted, 100*float64(st.SpecAccepted)/float64(st.SpecDrafted),
			1+float64(st.SpecAccepted)/float64(st.SpecSteps))
	}
	return nil
}

// buildPrompt tokenizes the prompt: BOS alone when it is empty, through the
// chat template with --chat.
func buildPrompt(m *load.Model, tok *tokenizer.Tokenizer, o *runOptions) ([]int32, error) {
	if !o.chat {
		if o.prompt == "" {
			if tok.BOS() < 0 {
				return nil, fmt.Errorf("model %s has no BOS token to start from; give a --prompt", m.Path)
			}
			return []int32{tok.BOS()}, nil
		}
		return tok.Encode(o.prompt, true, false), nil
	}
	tmpl := chat.Fallback()
	if m.ChatTemplate != "" {
		t, err := chat.Compile(m.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("chat template of %s: %w", m.Path, err)
		}
		tmpl = t
	}
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []message
	if o.system != "" {
		msgs = append(msgs, message{"system", o.system})
	}
	msgs = append(msgs, message{"user", o.prompt})
	bos, eos := tok.TokenText(tok.BOS()), tok.TokenText(tok.EOS())
	raw, err := json.Marshal(struct {
		Messages            []message `json:"messages"`
		AddGenerationPrompt bool      `json:"add_generation_prompt"`
		BOSToken            string    `json:"bos_token"`
		EOSToken            string    `json:"eos_token"`
	}{msgs, true, bos, eos})
	if err != nil {
		return nil, err
	}
	text, err := tmpl.Render(raw)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	// The template usually writes BOS itself; add it only when it did not.
	addBOS := tok.AddBOS() && !strings.HasPrefix(text, bos)
	ids := tok.Encode(text, false, true)
	if addBOS {
		ids = append([]int32{tok.BOS()}, ids...)
	}
	return ids, nil
}

// reportSpeed writes prompt and generation speed: the prompt is timed to the
// first generated token, generation from there to the end.
func reportSpeed(w io.Writer, u runtime.Usage, start, first, end time.Time, finish runtime.FinishReason) {
	if first.IsZero() {
		first = end
	}
	pp := first.Sub(start)
	tg := end.Sub(first)
	rate := func(n int, d time.Duration) string {
		if n <= 0 || d <= 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(n)/d.Seconds(), 'f', 2, 64)
	}
	fmt.Fprintf(w, "prompt:     %4d tokens in %8.2f ms, %s tok/s\n", u.PromptTokens, ms(pp), rate(u.PromptTokens, pp))
	gen := max(u.CompletionTokens-1, 0) // the first token is timed with the prompt
	fmt.Fprintf(w, "generation: %4d tokens in %8.2f ms, %s tok/s (finish: %s)\n", u.CompletionTokens, ms(tg), rate(gen, tg), finish)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func joinIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, " ")
}
