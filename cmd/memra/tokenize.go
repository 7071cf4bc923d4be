package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime/tokenizer"
)

// vocabTestSeparator separates inputs in a --file, as in llama.cpp's
// ggml-vocab-*.inp files.
const vocabTestSeparator = "\n__ggml_vocab_test__\n"

func init() { rootCmd.AddCommand(newTokenizeCmd()) }

func newTokenizeCmd() *cobra.Command {
	var (
		file            string
		bos, noSpecials bool
	)
	cmd := &cobra.Command{
		Use:   "tokenize MODEL [TEXT]",
		Short: "print the token ids of TEXT (or of every input in --file), space separated",
		Long: "tokenize prints the ids of TEXT on one line. With --file, the file holds inputs separated by\n" +
			"a line \"__ggml_vocab_test__\" (the format of llama.cpp's .inp files) and one line of ids is\n" +
			"printed per input. BOS/EOS are added only with --bos; special tokens written in the text\n" +
			"(e.g. <|im_end|>) are parsed unless --no-parse-special.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var inputs []string
			switch {
			case file != "" && len(args) == 2:
				return fmt.Errorf("give TEXT or --file, not both")
			case file != "":
				data, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				inputs = splitVocabInputs(string(data))
			case len(args) == 2:
				inputs = []string{args[1]}
			default:
				return fmt.Errorf("missing TEXT (or --file)")
			}
			m, err := openModel(cmd, args[0])
			if err != nil {
				return err
			}
			defer m.Close()
			if m.Tokenizer == nil {
				return fmt.Errorf("model %s has no tokenizer", args[0])
			}
			return writeTokenized(cmd.OutOrStdout(), m.Tokenizer, inputs, bos, !noSpecials)
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "read inputs separated by \"\\n__ggml_vocab_test__\\n\" from this file")
	f.BoolVar(&bos, "bos", false, "add BOS/EOS as the model's tokenizer asks")
	f.BoolVar(&noSpecials, "no-parse-special", false, "treat control tokens written in the text as plain text")
	return cmd
}

// splitVocabInputs splits a .inp file into its inputs; the separator that
// ends the file does not start another input.
func splitVocabInputs(data string) []string {
	inputs := strings.Split(data, vocabTestSeparator)
	if len(inputs) > 1 && inputs[len(inputs)-1] == "" {
		inputs = inputs[:len(inputs)-1]
	}
	return inputs
}

// writeTokenized prints one line of space-separated ids per input.
func writeTokenized(w io.Writer, tok *tokenizer.Tokenizer, inputs []string, addSpecial, parseSpecial bool) error {
	bw := bufio.NewWriter(w)
	var line []byte
	for _, in := range inputs {
		line = line[:0]
		for i, id := range tok.Encode(in, addSpecial, parseSpecial) {
			if i > 0 {
				line = append(line, ' ')
			}
			line = strconv.AppendInt(line, int64(id), 10)
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}
