package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
)

var errParity = errors.New("gpu-parity failed")

// parityOptions are the flags of memra gpu-parity.
type parityOptions struct {
	preset, quant       string
	layers, dim         int
	steps, prompts, len int
	seed                uint64
	minCos, tieTol      float64
	tieSigma            float64
	against, peer       string
	gpu                 cuda.BackendOptions
}

func init() {
	o := &parityOptions{}
	cmd := &cobra.Command{
		Use:    "gpu-parity [MODEL]",
		Short:  "run the CPU reference and the CUDA backend side by side and compare greedy tokens and logits",
		Hidden: true,
		Long: "gpu-parity synthesizes a small model of --preset/--quant (or opens MODEL), runs --prompts random\n" +
			"prompts of different lengths as one batch on the CPU and on the GPU, then --steps-1 greedy decode steps\n" +
			"feeding both the CPU's token, and prints one row: model, quant, steps, same tokens, min cosine, pass.\n" +
			"It exits non-zero unless every greedy token agrees and every cosine reaches --min-cos.\n" +
			"--against cpu-int8 puts the CPU's int8 products where the GPU would be (no GPU needed): how far the\n" +
			"int8 class's rounding alone moves a model from the reference.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runParity(cmd, args, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.preset, "preset", "qwen3-8b", "synth preset (llama3-8b, qwen2.5-7b, qwen3-8b, …)")
	f.StringVar(&o.quant, "quant", "q4_k_m", "synth quantisation mix (q4_k_m, q8_0, bf16, …)")
	f.IntVar(&o.layers, "layers", 2, "synth layers")
	f.IntVar(&o.dim, "dim", 256, "synth hidden size")
	f.IntVar(&o.steps, "steps", 128, "forward steps per sequence (the prompt step included)")
	f.IntVar(&o.prompts, "prompts", 4, "sequences in the batch")
	f.IntVar(&o.len, "prompt-len", 16, "tokens of the longest prompt (each next one is 5 shorter, at least 1)")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the prompts and the synth weights")
	f.Float64Var(&o.minCos, "min-cos", 0.999, "smallest cosine that passes")
	f.Float64Var(&o.tieTol, "tie-tol", 0, "accept greedy disagreements where the reference's two logits differ by at most this (0: every token must agree)")
	f.Float64Var(&o.tieSigma, "tie-sigma", 0, "accept greedy disagreements where the reference's two logits differ by at most this many times the RMS difference of the two backends' logits at that step (0: off)")
	f.StringVar(&o.gpu.Cache, "cache", "f16", "KV cache type: f16, bf16, f32, q8_0")
	f.BoolVar(&o.gpu.PrefillGEMV, "prefill-gemv", false, "prefill with the float32 GEMV instead of the tensor-core product (cuBLASLt or generated)")
	f.BoolVar(&o.gpu.NoGraphs, "no-graphs", false, "decode with plain launches instead of CUDA graphs")
	f.BoolVar(&o.gpu.NoPDL, "no-pdl", false, "launch without programmatic dependent launch")
	f.StringVar(&o.against, "against", "cuda", "the backend compared with the CPU reference: cuda, or cpu-int8 (the CPU's int8 products)")
	f.StringVar(&o.peer, "min-cos-peer", "", "cpu-int8: also run the CPU's int8 class on the same prompts and lower the cosine bar to its min cosine "+
		"where that is lower (a mixture of experts, whose routing the int8 rounding moves): the backend must be no further from the reference than the CPU's own int8 class")
	rootCmd.AddCommand(cmd)
}

func runParity(cmd *cobra.Command, args []string, o *parityOptions) error {
	name, quant := o.preset, o.quant
	var path string
	if len(args) == 1 {
		path, name, quant = args[0], filepath.Base(args[0]), "-"
	} else {
		dir, err := os.MkdirTemp("", "memra-parity-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "model.gguf")
		if _, err := synth.WriteGGUF(path, synth.Options{Preset: o.preset, Quant: o.quant, Layers: o.layers, Dim: o.dim,
			Seed: o.seed, Context: max(4096, o.len+o.steps), Weights: synth.WeightsFloat}); err != nil {
			return err
		}
	}
	m, err := load.Open(path)
	if err != nil {
		return err
	}
	defer m.Close()
	// with the CPU's int8 class on the other side, both backends' expert
	// choices are recorded and compared after the run
	var routes [2][][]int32
	var routeK int
	record := func(side int) func([]int32, int) {
		return func(ids []int32, k int) { routes[side], routeK = append(routes[side], ids), k }
	}
	refOpts := cpu.Options{}
	if o.against == "cpu-int8" {
		refOpts.Routes = record(0)
	}
	ref, err := cpu.New(m, refOpts)
	if err != nil {
		return err
	}
	defer ref.Close()
	o.gpu.MaxSeqs = max(o.prompts, 1)
	o.gpu.Context = o.len + o.steps
	var gpu parityBackend
	switch o.against {
	case "cuda":
		g, err := cuda.NewBackend(m, o.gpu)
		if err != nil {
			return err
		}
		gpu = g
	case "cpu-int8":
		c, err := cpu.New(m, cpu.Options{Products: cpu.ProductsInt8, Routes: record(1)})
		if err != nil {
			return err
		}
		gpu = cpuInt8{c}
	default:
		return fmt.Errorf("--against %q: want cuda or cpu-int8", o.against)
	}
	defer gpu.Close()
	r := rand.New(rand.NewPCG(o.seed, 11))
	prompts := make([][]int32, o.prompts)
	for i := range prompts {
		p := make([]int32, max(1, o.len-5*i))
		for j := range p {
			p[j] = int32(r.IntN(m.HParams.VocabSize))
		}
		prompts[i] = p
	}
	rep, err := cuda.Parity(context.Background(), ref, gpu, prompts, o.steps, 1)
	if err != nil {
		return err
	}
	minCos := o.minCos
	switch o.peer {
	case "":
	case "cpu-int8":
		c, err := cpu.New(m, cpu.Options{Products: cpu.ProductsInt8})
		if err != nil {
			return err
		}
		peer, err := cuda.Parity(context.Background(), ref, c, prompts, o.steps, runtime.SeqID(len(prompts)+1))
		c.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "peer cpu-int8: min cosine %.6f, %d of %d greedy tokens differ\n", peer.MinCosine, peer.Mismatches, o.prompts*o.steps)
		minCos = min(minCos, peer.MinCosine)
	default:
		return fmt.Errorf("--min-cos-peer %q: want cpu-int8", o.peer)
	}
	total := o.prompts * o.steps
	pass := rep.Pass(minCos, o.tieTol, o.tieSigma)
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "model\tquant\tseqs\tsteps\tsame tokens\tworst gap\tworst gap/rms\tmin cosine\tcache\tprefill\tgraphs\tpass")
	prefill := gpu.PrefillArm()
	cache, graphs := o.gpu.Cache, fmt.Sprint(!o.gpu.NoGraphs)
	if o.against != "cuda" {
		cache, graphs = "f32", "-"
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d\t%.4f\t%.2f\t%.6f\t%s\t%s\t%s\t%v\n", name, quant, o.prompts, o.steps, total-rep.Mismatches, total,
		rep.MaxGap, rep.MaxGapSigma, rep.MinCosine, cache, prefill, graphs, pass)
	tw.Flush()
	if len(routes[0]) > 0 {
		diff, total := routeDiffs(routes[0], routes[1], routeK)
		fmt.Fprintf(cmd.OutOrStdout(), "expert choices: %d of %d (token, layer) routings differ\n", diff, total)
	}
	printFlips(cmd.OutOrStdout(), rep, 5)
	if !pass {
		return fmt.Errorf("%w: %d of %d greedy tokens differ (worst reference gap %.4f, %.2f× the step's RMS logit difference; tie tolerance %g, %g×), min cosine %.6f (want ≥ %g)",
			errParity, rep.Mismatches, total, rep.MaxGap, rep.MaxGapSigma, o.tieTol, o.tieSigma, rep.MinCosine, minCos)
	}
	return nil
}

// parityBackend is the backend gpu-parity compares with the reference.
type parityBackend interface {
	runtime.Backend
	PrefillArm() string
}

// cpuInt8 is the CPU's int8 class as a parityBackend.
type cpuInt8 struct{ *cpu.Backend }

func (cpuInt8) PrefillArm() string { return "cpu-int8" }

// routeDiffs compares two backends' routings, call by call (each call a
// step's tokens' choices of k experts): how many (token, call) choices
// name a different set of experts, of how many. Calls one side lacks count
// as differing.
func routeDiffs(a, b [][]int32, k int) (diff, total int) {
	if k <= 0 {
		return 0, 0
	}
	for i := range max(len(a), len(b)) {
		var x, y []int32
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		n := max(len(x), len(y)) / k
		total += n
		for t := range n {
			if len(x) < (t+1)*k || len(y) < (t+1)*k {
				diff++
				continue
			}
			p, q := slices.Clone(x[t*k:(t+1)*k]), slices.Clone(y[t*k:(t+1)*k])
			slices.Sort(p)
			slices.Sort(q)
			if !slices.Equal(p, q) {
				diff++
			}
		}
	}
	return diff, total
}

// printFlips writes how far from a tie the disagreements were: how many
// fall in each band of gap/RMS (the reference's margin over the step's RMS
// logit difference), and the worst few by that ratio with their sequence
// and step. Nothing without disagreements.
func printFlips(w io.Writer, rep cuda.ParityReport, worst int) {
	if len(rep.Flips) == 0 {
		return
	}
	var bands [4]int // gap/rms ≤ 1, ≤ 2, ≤ 3, above
	for _, f := range rep.Flips {
		b := 0
		for b < 3 && f.Sigma() > float64(b+1) {
			b++
		}
		bands[b]++
	}
	fmt.Fprintf(w, "disagreements by gap/rms: ≤1 %d, 1–2 %d, 2–3 %d, >3 %d\n", bands[0], bands[1], bands[2], bands[3])
	fl := slices.Clone(rep.Flips)
	slices.SortStableFunc(fl, func(a, b cuda.Flip) int { return cmp.Compare(b.Sigma(), a.Sigma()) })
	for _, f := range fl[:min(worst, len(fl))] {
		fmt.Fprintf(w, "  sequence %d, step %d: gap %.4f, rms %.4f, %.2f×\n", f.Seq, f.Step, f.Gap, f.RMS, f.Sigma())
	}
}
