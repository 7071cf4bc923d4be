package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/codegen/glue"
	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

var errCompileArgs = errors.New("compile: bad arguments")

// compileOptions are the flags of memra compile.
type compileOptions struct {
	out     string
	emitGo  bool
	dump    bool
	target  string
	pkg     string
	backend cuda.BackendOptions
}

func init() {
	o := &compileOptions{}
	cmd := &cobra.Command{
		Use:   "compile MODEL",
		Short: "Lower a model to CUDA C, a launch plan, Go glue and a manifest",
		Long: `Lower MODEL's graph for the decode and the prefill step classes and write, into -o DIR:
kernels.cu (every generated kernel), plan.txt (both programs: kernels, inputs, buffer plan,
weights, launches), glue.go with --emit-go (typed Go launch code made with jennifer) and
manifest.json (model sha256, target arch, arms per family, NVRTC version when the library
loads, memra version). --dump prints the IR, the plans and the generated source to stdout.
The CUDA backend's environment switches (MEMRA_QUANT_OUT, MEMRA_GEMV_*, …; docs/FLAGS.md)
apply, so the programs are those the backend would run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runCompile(cmd, args[0], o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.out, "out", "o", "", "artifact folder (created)")
	f.BoolVar(&o.emitGo, "emit-go", false, "also write glue.go")
	f.BoolVar(&o.dump, "dump", false, "print the IR, the plans and the generated source to stdout")
	f.StringVar(&o.target, "arch", "sm_90a", "NVRTC target recorded in the manifest (sm_90a, sm_120a, …)")
	f.StringVar(&o.pkg, "package", "modelglue", "Go package name of glue.go")
	f.IntVar(&o.backend.MaxSeqs, "max-seqs", 8, "sequences per decode step")
	f.IntVar(&o.backend.Context, "context", 0, "KV positions per sequence (0: the model's, at most 4096)")
	f.IntVar(&o.backend.PrefillTokens, "prefill-tokens", 512, "tokens per prefill step")
	f.StringVar(&o.backend.Cache, "cache", "f16", "KV cache type: f16, bf16, f32, q8_0")
	rootCmd.AddCommand(cmd)
}

// manifest is manifest.json.
type manifest struct {
	Model       string            `json:"model"`
	ModelSHA256 string            `json:"model_sha256"`
	ModelArch   string            `json:"model_arch"`
	Target      string            `json:"target_arch"`
	Arms        map[string]string `json:"arms"`
	NVRTC       string            `json:"nvrtc,omitempty"`
	Memra       string            `json:"memra_version"`
	MaxSeqs     int               `json:"max_seqs"`
	Context     int               `json:"context"`
	Cache       string            `json:"kv_cache"`
	Kernels     []string          `json:"kernels"`
}

func runCompile(cmd *cobra.Command, model string, o *compileOptions) error {
	if o.out == "" && !o.dump {
		return fmt.Errorf("%w: give -o DIR or --dump", errCompileArgs)
	}
	m, err := openModel(cmd, model)
	if err != nil {
		return err
	}
	defer m.Close()
	g, err := arch.Build(m.HParams, m)
	if err != nil {
		return err
	}
	if err := ir.RunPasses(g, ir.Passes); err != nil {
		return err
	}
	dec, pre, err := cuda.Lower(m, o.backend)
	if err != nil {
		return err
	}
	kernels := uniqueKernels(dec, pre)
	var src strings.Builder
	for i, k := range kernels {
		if i > 0 {
			src.WriteString("\n")
		}
		fmt.Fprintf(&src, "// ===== %s (%s) =====\n%s", k.Name, k.Family, k.Source)
	}
	plan := dec.String() + "\n" + pre.String()
	if o.dump {
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "%s\n%s\n%s", g.String(), plan, src.String())
	}
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	files := map[string][]byte{"kernels.cu": []byte(src.String()), "plan.txt": []byte(plan)}
	if o.emitGo {
		code, err := glue.Generate(o.pkg, dec, pre)
		if err != nil {
			return err
		}
		files["glue.go"] = code
	}
	sum, err := modelSHA256(model, m)
	if err != nil {
		return err
	}
	arms := o.backend.Arms.WithDefaults()
	man := manifest{Model: m.Path, ModelSHA256: sum, ModelArch: m.HParams.Arch, Target: o.target, Memra: buildVersion(),
		MaxSeqs: dec.MaxSeqs, Context: dec.Context, Cache: dec.Cache.String(),
		Arms: map[string]string{"gemv": arms.GEMV.String(), "mma": arms.MMA.String(), "attn_decode": arms.Decode.String(),
			"attn_prefill": arms.Prefill.String(), "attn_warp": arms.Prefill.String(), "block": arms.Block.String()}}
	for _, k := range kernels {
		man.Kernels = append(man.Kernels, k.Name)
	}
	if nv, err := cuda.LoadNVRTC(); err == nil {
		major, minor := nv.Version()
		man.NVRTC = fmt.Sprintf("%d.%d", major, minor)
	}
	js, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	files["manifest.json"] = append(js, '\n')
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(o.out, n), files[n], 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s to %s (%d kernels, %d + %d launches)\n", strings.Join(names, ", "), o.out, len(kernels), len(dec.Launches), len(pre.Launches))
	return nil
}

// uniqueKernels returns the programs' kernels, each once, in first-use order.
func uniqueKernels(progs ...*codegen.Program) []*codegen.Kernel {
	seen := map[string]bool{}
	var out []*codegen.Kernel
	for _, p := range progs {
		for _, k := range p.Kernels {
			if !seen[k.Name] {
				seen[k.Name] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// modelSHA256 hashes the model: the embedded file, a GGUF file, or every
// regular file of a checkpoint folder in name order.
func modelSHA256(arg string, m *load.Model) (string, error) {
	h := sha256.New()
	if arg == builtin.Name {
		h.Write(builtin.Bytes())
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	paths := []string{arg}
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		entries, err := os.ReadDir(arg)
		if err != nil {
			return "", err
		}
		paths = paths[:0]
		for _, e := range entries {
			if e.Type().IsRegular() {
				paths = append(paths, filepath.Join(arg, e.Name()))
			}
		}
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", m.Path, err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", p, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
