package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime/synth"
)

func init() { rootCmd.AddCommand(newSynthCmd()) }

func newSynthCmd() *cobra.Command {
	var o synth.Options
	var out, format string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "synth --preset NAME -o FILE",
		Short: "Write a model of a real architecture and shape with random weights and a real tokenizer",
		Long: `synth writes a GGUF file (or, with --format hf, a Hugging Face checkpoint folder) of a
real model shape with random weights and that model family's real tokenizer and chat template.
Presets: ` + strings.Join(synth.Presets(), ", ") + `.
--quant takes a standard mix (f32 f16 bf16 q8_0 q4_0 q6_k q5_k_m q4_k_m q5_k_s q4_k_s q3_k_m
q3_k_s q2_k iq4_xs iq4_nl) or one type for every matrix (q4_k, q5_0, q3_k, …). Above 300M parameters quantised tensors are
random valid blocks rather than quantised floats (--weights float|blocks to choose).
--embedding mean|cls|last writes an embedding variant: no output head, the pooling declared
(GGUF pooling_type; with --format hf the Qwen3-Embedding layout with a sentence-transformers
Pooling module), and for last pooling a tokenizer that ends every input with EOS.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("synth: -o FILE is required")
			}
			pl, err := synth.NewPlan(o)
			if err != nil {
				return err
			}
			fmt.Fprintln(os.Stderr, "synth:", pl.Describe())
			if !quiet {
				bar := progressbar.DefaultBytes(pl.Bytes, "writing")
				o.Progress = func(done, total int64) { bar.Set64(done) }
				defer bar.Finish()
			}
			switch format {
			case "gguf":
				_, err = synth.WriteGGUF(out, o)
			case "hf":
				_, err = synth.WriteHF(out, o)
			default:
				err = fmt.Errorf("synth: --format %q (gguf or hf)", format)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Preset, "preset", "", "model shape: "+strings.Join(synth.Presets(), ", "))
	f.StringVar(&o.Arch, "arch", "", "architecture (llama, qwen2, qwen3, qwen3moe, mixtral, gemma2, gemma3); checked against the preset")
	f.StringVar(&o.Quant, "quant", "f16", "quantisation mix or type")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed (same seed, same weights)")
	f.IntVar(&o.Layers, "layers", 0, "override the number of layers")
	f.IntVar(&o.Dim, "dim", 0, "override the hidden size (heads and ffn scale with it)")
	f.IntVar(&o.FFN, "ffn", 0, "override the feed-forward size")
	f.IntVar(&o.Context, "ctx", 0, "override the context length")
	f.IntVar(&o.Window, "sliding-window", 0, "override the window of the sliding-window layers (gemma2, gemma3)")
	f.StringVar(&o.Weights, "weights", synth.WeightsAuto, "auto, float or blocks")
	f.StringVar(&o.Pooling, "embedding", "", "write an embedding variant pooling by mean, cls or last (no output head, the pooling declared)")
	f.StringVarP(&out, "output", "o", "", "output file (gguf) or folder (hf)")
	f.StringVar(&format, "format", "gguf", "gguf or hf")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	return cmd
}
