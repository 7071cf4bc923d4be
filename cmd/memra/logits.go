package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cuda"
)

func init() { rootCmd.AddCommand(newLogitsCmd()) }

// newLogitsCmd is the hidden command the parity scripts use: greedy
// decoding that records the logits of every step, so another
// implementation can be compared token by token.
func newLogitsCmd() *cobra.Command {
	var promptIDs, prompt, device, out string
	var steps, threads int
	var exact bool
	cmd := &cobra.Command{
		Use:    "logits MODEL -o DIR",
		Short:  "Greedy-decode and write every step's logits (for parity checks)",
		Hidden: true,
		Args:   cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 1 {
				arg = args[0]
			}
			m, err := openModel(cmd, arg)
			if err != nil {
				return err
			}
			defer m.Close()
			var ids []int32
			switch {
			case promptIDs != "":
				for _, f := range strings.Fields(promptIDs) {
					v, err := strconv.ParseInt(f, 10, 32)
					if err != nil {
						return fmt.Errorf("--prompt-ids: %q: %w", f, err)
					}
					ids = append(ids, int32(v))
				}
			case m.Tokenizer != nil:
				ids = m.Tokenizer.Encode(prompt, true, false)
			}
			if len(ids) == 0 {
				return fmt.Errorf("logits: empty prompt (give --prompt or --prompt-ids)")
			}
			var b runtime.Backend
			if exact && strings.HasPrefix(device, "cuda") {
				// The exact GPU configuration: a float32 KV cache and float32
				// GEMV prefill, the same arithmetic as the CPU reference.
				b, err = cuda.NewBackend(m, cuda.BackendOptions{MaxSeqs: 1, Cache: "f32", PrefillGEMV: true,
					Context: len(ids) + steps})
			} else {
				g := gpuOptions{}
				if exact {
					g.cpuProducts = "exact" // the CPU reference itself
				}
				b, err = newBackend(m, device, threads, 1, g)
			}
			if err != nil {
				return err
			}
			defer b.Close()
			gen, logits, err := greedyLogits(cmd.Context(), b, ids, steps)
			if err != nil {
				return err
			}
			return writeLogits(out, ids, gen, logits, b.Info().VocabSize)
		},
	}
	f := cmd.Flags()
	f.StringVar(&promptIDs, "prompt-ids", "", "prompt as token ids, space separated")
	f.StringVarP(&prompt, "prompt", "p", "Once upon a time", "prompt text (with the model's BOS rule)")
	f.IntVar(&steps, "steps", 64, "greedy steps")
	f.StringVar(&device, "device", "", deviceHelp)
	f.IntVarP(&threads, "threads", "t", 0, "CPU threads (0: all cores)")
	f.StringVarP(&out, "output", "o", "", "output folder: ids.txt and logits.f32 (steps × vocab, little-endian)")
	f.BoolVar(&exact, "exact", false, "on cuda: float32 KV cache and float32 prefill (the CPU reference's arithmetic)")
	cmd.MarkFlagRequired("output")
	return cmd
}

// greedyLogits prefills prompt, then takes steps greedy tokens, returning
// the tokens and a copy of the logits each was chosen from.
func greedyLogits(ctx context.Context, b runtime.Backend, prompt []int32, steps int) ([]int32, [][]float32, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var gen []int32
	var all [][]float32
	step := runtime.SeqStep{Seq: 1, Tokens: prompt, Logits: true}
	for i := 0; i < steps; i++ {
		out, err := b.Step(ctx, []runtime.SeqStep{step})
		if err != nil {
			return nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		l := append([]float32(nil), out[0]...)
		tok := runtime.Argmax(l)
		all = append(all, l)
		gen = append(gen, tok)
		step = runtime.SeqStep{Seq: 1, Pos: len(prompt) + i, Tokens: []int32{tok}, Logits: true}
	}
	return gen, all, nil
}

func writeLogits(dir string, prompt, gen []int32, logits [][]float32, vocab int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ids := joinIDs(prompt) + "\n" + joinIDs(gen) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "ids.txt"), []byte(ids), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "logits.f32"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var buf [4]byte
	for _, l := range logits {
		if len(l) != vocab {
			f.Close()
			return fmt.Errorf("logits: %d values, vocabulary is %d", len(l), vocab)
		}
		for _, v := range l {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			w.Write(buf[:])
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
