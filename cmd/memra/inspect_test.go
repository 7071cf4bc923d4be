package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInspect(t *testing.T) {
	cases := []struct {
		model string
		lines []string
	}{
		{"../../testdata/models/tinyllamas-stories-260k-f32.gguf", []string{
			"format:          gguf v1 (alignment 32)",
			"architecture:    llama",
			"embedding:       64",
			"layers:          5",
			"kv heads:        4",
			"head dim:        8",
			"rope style:      interleaved",
			"vocab size:      512",
			`tokenizer:       llama (pre default), 512 tokens, BOS 1 "<s>", EOS 2 "</s>"`,
			"chat template:   none",
			"| token_embd.weight F32 [64 512] 131072",
			"| blk.4.ffn_down.weight F32 [172 64] 44032",
			"total: 48 tensors, 1171200 bytes",
		}},
		{"../../testdata/models/llama-2-tiny-random.gguf", []string{
			"format:          gguf v3 (alignment 32)",
			"file type:       F16",
			"rope dims:       4",
			"context length:  4096",
			"tied embedding:  false",
			"32000 tokens",
			"| blk.0.attn_q.weight F16 [8 8] 128",
			"| output_norm.weight F32 [8] 32",
			"total: 12 tensors, 1026144 bytes",
		}},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			cmd := newInspectCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetArgs([]string{c.model})
			require.NoError(t, cmd.Execute())
			// Table rows ("| " prefix) are compared field by field.
			var rows []string
			for _, l := range strings.Split(out.String(), "\n") {
				rows = append(rows, "| "+strings.Join(strings.Fields(l), " "))
			}
			for _, l := range c.lines {
				if strings.HasPrefix(l, "| ") {
					require.Contains(t, rows, l)
				} else {
					require.Contains(t, out.String(), l)
				}
			}
		})
	}
	cmd := newInspectCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"../../testdata/PROVENANCE.md"})
	require.Error(t, cmd.Execute())
}
