package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/hub"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/tunedb"
)

var errCompileArgs = errors.New("compile: bad arguments")

// compileOptions are the flags of memra compile.
type compileOptions struct {
	out     string
	dump    bool
	arch    []string
	card    string
	sms     int
	backend cuda.BackendOptions
	// numerics is --batch-invariant: the class compiled (recorded in the manifest)
	numerics string
}

func init() {
	o := &compileOptions{}
	cmd := &cobra.Command{
		Use:   "compile MODEL",
		Short: "Compile a model's kernels ahead of time into a deployable artifact",
		Long: `Lower MODEL's graph for the decode and the prefill step classes and write, into -o DIR,
an artifact that memra serve, run and bench load with --compiled DIR using the CUDA driver
alone (no NVRTC): kernels/ARCH/*.cubin (one cubin per kernel for each --arch sm_XY target),
kernels/compute_XY/*.ptx (PTX the driver compiles for any later card), kernels.cu (the CUDA C),
plan.txt (both programs: kernels, inputs, buffer plan, weights, launches) and manifest.json
(the model's files and SHA-256, the targets, the NVRTC version, the configuration, the tunedb
picks the lowering used, every kernel's source hash and every image's). --dump prints the IR,
the plans and the generated source to stdout.

The arms are the tunedb's for --card (default: this machine's GPU; "none" for the families'
defaults), with --sms multiprocessors. The CUDA backend's environment settings that change the
programs (the KV cache type and the PDL diagnostic; docs/FLAGS.md) apply and are recorded. Cubins of sm_90a and later need NVRTC 12 or later;
--arch compute_90 alone writes PTX only.

` + modelHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runCompile(cmd, args[0], o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.out, "out", "o", "", "artifact folder (created)")
	f.BoolVar(&o.dump, "dump", false, "print the IR, the plans and the generated source to stdout")
	f.StringSliceVar(&o.arch, "arch", nil, "targets: sm_XY[a] cubins (sm_90a,sm_120a), compute_XY the PTX (default: this machine's GPU, else sm_90a; PTX for the lowest)")
	f.StringVar(&o.card, "card", "", `tunedb card whose arms to use (nvidia-h200.sm90.132sm.140gib; default: this machine's GPU; "none": the defaults)`)
	f.IntVar(&o.sms, "sms", 0, "multiprocessors the lowering sizes split products for (0: the card's, else 132)")
	f.IntVar(&o.backend.MaxSeqs, "max-seqs", 8, "sequences per decode step (serve's --max-running)")
	f.IntVar(&o.backend.Context, "context", 0, "KV positions per sequence (0: the model's)")
	f.IntVar(&o.backend.PrefillTokens, "prefill-tokens", 512, "tokens per prefill step")
	f.StringVar(&o.backend.Cache, "cache", "f16", "KV cache type: f16, bf16, f32, q8_0")
	addInvariantFlag(f, &o.numerics)
	rootCmd.AddCommand(cmd)
}

// compileCard resolves --card, --sms and the default --arch: the flags,
// else this machine's GPU, else no card, 132 multiprocessors and sm_90a.
func compileCard(o *compileOptions) (key *tunedb.DeviceKey, sms int, arch string, err error) {
	arch, sms = "sm_90a", cuda.DefaultMultiprocessors
	switch o.card {
	case "none":
	case "":
		if cuda.Available() == nil {
			dev, err := cuda.Open(0)
			if err != nil {
				return nil, 0, "", err
			}
			info := dev.Info()
			_ = dev.Close()
			k := cuda.DeviceKey(info)
			key, sms, arch = &k, info.SMs, info.Arch()
		}
	default:
		k, err := tunedb.ParseKey(o.card)
		if err != nil {
			return nil, 0, "", fmt.Errorf("--card: %w", err)
		}
		key, sms = &k, k.SMs
		arch = fmt.Sprintf("sm_%d%d", k.SMMajor, k.SMMinor)
		if k.SMMajor >= 9 {
			arch += "a"
		}
	}
	if o.sms > 0 {
		sms = o.sms
	}
	return key, sms, arch, nil
}

func runCompile(cmd *cobra.Command, model string, o *compileOptions) error {
	if o.out == "" && !o.dump {
		return fmt.Errorf("%w: give -o DIR or --dump", errCompileArgs)
	}
	n, err := invariance(o.numerics)
	if err != nil {
		return err
	}
	o.backend.Numerics = n
	path, spec := model, ""
	if hub.IsSpec(model) {
		if path, err = modelPath(cmd, model); err != nil {
			return err
		}
		spec = model
	}
	m, err := openModel(cmd, path)
	if err != nil {
		return err
	}
	defer m.Close()
	key, sms, defArch, err := compileCard(o)
	if err != nil {
		return err
	}
	opts := o.backend
	opts.Multiprocessors = sms
	card := ""
	var pick codegen.ArmPicker
	if key != nil {
		card = key.String()
		db, err := tunedb.Default()
		if err != nil {
			if db, err = tunedb.OpenFS(tunedb.ShippedFS(), ""); err != nil {
				return err
			}
		}
		pick = cuda.TunedPicker(db, *key)
	}
	rec, picks := cuda.RecordPicks(pick)
	opts.Pick = rec
	// a model that declares a pooling is served with its embedding program
	if pool, err := servedPooling(m, "", nil); err == nil && pool != runtime.PoolNone {
		opts.Embedding = true
	}
	dec, pre, kernels, err := cuda.ArtifactKernels(m, opts)
	if err != nil {
		return err
	}
	var src strings.Builder
	for i, k := range kernels {
		if i > 0 {
			src.WriteString("\n")
		}
		fmt.Fprintf(&src, "// ===== %s (%s) =====\n%s", k.Name, k.Family, k.Source)
	}
	plan := dec.String() + "\n" + pre.String()
	if o.dump {
		// the IR as lowering saw it (ArtifactKernels built its own)
		g, err := arch.Build(m.HParams, m)
		if err != nil {
			return err
		}
		if err := ir.RunPasses(g, ir.Passes); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n%s", g.String(), plan, src.String())
	}
	if o.out == "" {
		return nil
	}
	targets := o.arch
	if len(targets) == 0 {
		targets = []string{defArch}
	}
	cubins, ptx, err := cuda.SplitTargets(targets)
	if err != nil {
		return fmt.Errorf("--arch: %w", err)
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return fmt.Errorf("compile: the kernels need NVRTC: %w", err)
	}
	cache, err := cuda.NewCache("", nv)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	bar := progressbar.NewOptions(len(kernels)*(len(cubins)+1), progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription("compiling"), progressbar.OptionShowCount(), progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	images, err := cuda.CompileImages(cache, kernels, cubins, ptx, func(done, total int) { _ = bar.Set(done) })
	_ = bar.Finish()
	if err != nil {
		return err
	}
	files, sum, err := modelFiles(path, true)
	if err != nil {
		return err
	}
	major, minor := nv.Version()
	arms := o.backend.Arms.WithDefaults()
	man := cuda.Manifest{Model: m.Path, ModelSpec: spec, ModelSHA256: sum, ModelFiles: files, ModelArch: m.HParams.Arch,
		NVRTC: fmt.Sprintf("%d.%d", major, minor), Memra: buildVersion(),
		MaxSeqs: dec.MaxSeqs, Context: dec.Context, PrefillTokens: pre.MaxTokens, Cache: dec.Cache.String(), Multiprocessors: sms,
		Numerics: o.backend.Numerics.String(),
		Card:     card, Picks: picks(), Env: cuda.LoweringEnvSet(), PlanSHA256: sha256Hex([]byte(plan)),
		Arms: map[string]string{"gemv": arms.GEMV.String(), "mma": arms.MMA.String(), "attn_decode": arms.Decode.String(),
			"attn_prefill": arms.Prefill.String(), "attn_warp": arms.Prefill.String(), "block": arms.Block.String()}}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	out := map[string][]byte{"kernels.cu": []byte(src.String()), "plan.txt": []byte(plan)}
	for name, data := range out {
		if err := os.WriteFile(filepath.Join(o.out, name), data, 0o644); err != nil {
			return err
		}
	}
	if err := cuda.WriteArtifact(o.out, &man, kernels, cubins, ptx, images); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s: %d kernels for %s (PTX %s), %d + %d launches, NVRTC %s, card %s\n", o.out, len(kernels),
		orDash(strings.Join(cubins, ", ")), ptx, len(dec.Launches), len(pre.Launches), man.NVRTC, orDash(card))
	return nil
}

// modelIsBuiltin reports whether a model argument is the embedded model.
func modelIsBuiltin(arg string) bool { return arg == "" || arg == builtin.Name }
