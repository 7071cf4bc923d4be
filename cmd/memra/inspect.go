package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

func init() { rootCmd.AddCommand(newInspectCmd()) }

func newInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect MODEL",
		Short: "print a model's format, hyperparameters, tokenizer and tensors",
		Long: "inspect opens MODEL (a GGUF file, a Hugging Face checkpoint folder, an hf: spec, or " + builtin.Name +
			") and prints its format, architecture, hyperparameters, tokenizer, whether it has a chat " +
			"template, and a table of its tensors with their types, shapes (ne order) and sizes.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := openModel(cmd, args[0])
			if err != nil {
				return err
			}
			defer m.Close()
			if err := writeInspect(cmd.OutOrStdout(), m); err != nil {
				return err
			}
			// After the listing, say whether the model would run: a
			// missing or misshapen tensor is what inspect is asked to find.
			if len(m.Tensors) > 0 {
				if _, err := arch.Build(m.HParams, m); err != nil {
					return fmt.Errorf("model %s cannot run: %w", m.Path, err)
				}
			}
			return nil
		},
	}
}

// writeInspect prints the description of m.
func writeInspect(out io.Writer, m *load.Model) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	hp := m.HParams
	format := m.Format
	if m.GGUF != nil {
		format = fmt.Sprintf("gguf v%d (alignment %d)", m.GGUF.Version, m.GGUF.Alignment)
	}
	row := func(k string, v any) { fmt.Fprintf(w, "%s:\t%v\n", k, v) }
	row("model", m.Path)
	row("format", format)
	row("architecture", hp.Arch)
	row("name", hp.Name)
	row("file type", orNone(m.FileType))
	row("context length", hp.ContextLength)
	row("embedding", hp.Embedding)
	row("layers", hp.Layers)
	row("feed forward", hp.FFN)
	row("heads", hp.Heads)
	row("kv heads", hp.HeadsKV)
	row("head dim", hp.HeadDim)
	row("rope dims", hp.RopeDim)
	row("rope base", hp.RopeBase)
	row("rope style", hp.RopeStyle)
	row("rope scaling", ropeScaling(hp.RopeScaling))
	row("rms eps", hp.RMSEps)
	row("vocab size", hp.VocabSize)
	row("tied embedding", hp.TiedEmbedding)
	row("qkv bias", hp.QKVBias)
	row("qk norm", hp.QKNorm)
	if hp.Experts > 0 {
		row("experts", fmt.Sprintf("%d, %d a token, feed forward %d, weights renormalised %v", hp.Experts, hp.ExpertsUsed, hp.ExpertFFN, hp.ExpertNorm))
	}
	row("tokenizer", tokenizerLine(m))
	if m.ChatTemplate != "" {
		row("chat template", fmt.Sprintf("present (%d bytes)", len(m.ChatTemplate)))
	} else {
		row("chat template", "none")
	}
	if len(m.Skipped) > 0 {
		row("skipped", strings.Join(m.Skipped, ", "))
	}
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(out)
	names := m.Names()
	nameW, shapeW := len("tensor"), len("shape")
	shapes := make([]string, len(names))
	for i, name := range names {
		dims := make([]string, len(m.Tensors[name].Shape))
		for j, d := range m.Tensors[name].Shape {
			dims[j] = fmt.Sprint(d)
		}
		shapes[i] = "[" + strings.Join(dims, " ") + "]"
		nameW, shapeW = max(nameW, len(name)), max(shapeW, len(shapes[i]))
	}
	fmt.Fprintf(out, "%-*s  %-7s  %-*s  %12s\n", nameW, "tensor", "type", shapeW, "shape", "bytes")
	var total int64
	for i, name := range names {
		t := m.Tensors[name]
		total += t.Bytes()
		fmt.Fprintf(out, "%-*s  %-7v  %-*s  %12d\n", nameW, name, t.Type, shapeW, shapes[i], t.Bytes())
	}
	_, err := fmt.Fprintf(out, "total: %d tensors, %d bytes (%.2f MiB)\n", len(m.Tensors), total, float64(total)/(1<<20))
	return err
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func ropeScaling(rs ir.RopeScaling) string {
	if rs.Type == "" || rs.Type == "none" {
		return "none"
	}
	s := fmt.Sprintf("%s factor %g", rs.Type, rs.Factor)
	if rs.OriginalContext > 0 {
		s += fmt.Sprintf(", original context %d", rs.OriginalContext)
	}
	if rs.Type == "llama3" {
		s += fmt.Sprintf(", low/high freq factor %g/%g", rs.LowFreqFactor, rs.HighFreqFactor)
	}
	return s
}

// tokenizerLine describes the tokenizer: kind, vocabulary size, BOS/EOS.
func tokenizerLine(m *load.Model) string {
	tok := m.Tokenizer
	if tok == nil {
		return "none"
	}
	v := tok.Vocab()
	pre := v.Pre
	if pre == "" {
		pre = "default"
	}
	special := func(id int32) string {
		if id < 0 {
			return "none"
		}
		return fmt.Sprintf("%d %q", id, tok.TokenText(id))
	}
	return fmt.Sprintf("%s (pre %s), %d tokens, BOS %s, EOS %s", v.Model, pre, tok.VocabSize(), special(tok.BOS()), special(tok.EOS()))
}
