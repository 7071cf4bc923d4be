package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
)

// TestBenchCPUBatches: a CPU bench with two batch sizes prints a table
// with a batch column, PERFORMANCE.md rows, and writes JSON and SVG.
func TestBenchCPUBatches(t *testing.T) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "b.json"), filepath.Join(dir, "b.svg")
	cmd := newBenchCmd()
	out, _ := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"--device", "cpu", "-p", "8", "-n", "4", "-r", "2", "-b", "1,3", "--threads", "2", "--no-progress",
		"--json", js, "--plot", svg, "--perf-rows", "--roofline=false")
	require.Contains(t, out, "| batch |")
	require.Regexp(t, `\| +pp8 \| +1 \|`, out)
	require.Regexp(t, `\| +tg4@8 \| +1 \|`, out)
	require.Regexp(t, `\| +tg4@8 \| +3 \|`, out)
	var perf []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| 20") {
			perf = append(perf, l)
		}
	}
	require.Len(t, perf, 3, out)
	for _, l := range perf {
		require.Equal(t, 12, strings.Count(l, "|"), l) // 11 columns
	}

	var doc struct {
		Rows []benchRow `json:"rows"`
	}
	data, err := os.ReadFile(js)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &doc))
	require.Len(t, doc.Rows, 3)
	for _, r := range doc.Rows {
		require.Len(t, r.Rates, 2)
		require.Positive(t, r.Median)
		require.LessOrEqual(t, r.Min, r.Median)
		require.GreaterOrEqual(t, r.Max, r.Median)
		require.Zero(t, r.Roofline, "no roofline with --roofline=false")
	}
	require.Equal(t, 3, doc.Rows[2].Batch)
	pic, err := os.ReadFile(svg)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(bytes.TrimSpace(pic), []byte("<svg")) || bytes.Contains(pic, []byte("<svg")))
}

// TestBenchCPURoofline: a CPU bench measures the copy, the FMA peak and the
// int8 peak in the same run and reports tg as weight bandwidth, pp as
// GFLOP/s against them.
func TestBenchCPURoofline(t *testing.T) {
	js := filepath.Join(t.TempDir(), "b.json")
	cmd := newBenchCmd()
	out, _ := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"--device", "cpu", "-p", "8", "-n", "4", "-r", "1", "--threads", "2", "--no-progress", "--json", js, "--perf-rows")
	require.Contains(t, out, "roofline: ")
	require.Contains(t, out, "GB/s or GFLOP/s")
	require.Contains(t, out, "GFLOP/s of ")
	var doc struct {
		Products string     `json:"products"`
		Roofline *roofline  `json:"roofline"`
		Rows     []benchRow `json:"rows"`
	}
	data, err := os.ReadFile(js)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &doc))
	require.Equal(t, "int8", doc.Products)
	require.NotNil(t, doc.Roofline)
	require.NotNil(t, doc.Roofline.CPU)
	require.Positive(t, doc.Roofline.CopyBW)
	require.Len(t, doc.Rows, 2)
	require.Positive(t, doc.Rows[0].TFLOPs, "pp")
	require.Positive(t, doc.Rows[1].GBs, "tg")
	for _, r := range doc.Rows {
		require.Positive(t, r.Roofline)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--device", "cpu", "-b", "0"},
		{"--device", "cpu", "-b", "1,x"},
		{"--device", "tpu"},
	} {
		cmd := newBenchCmd()
		var o, e bytes.Buffer
		cmd.SetOut(&o)
		cmd.SetErr(&e)
		cmd.SetArgs(args)
		require.Error(t, cmd.Execute(), args)
	}
}

// TestCostOf: decode reads every tensor once and one embedding row, unless
// the embedding is also the output projection.
func TestCostOf(t *testing.T) {
	for _, c := range []struct {
		preset string
		tied   bool
	}{{"llama2-7b", false}, {"llama3.2-1b", true}} {
		t.Run(c.preset, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			plan, err := synth.WriteGGUF(path, synth.Options{Preset: c.preset, Layers: 2, Dim: 256, FFN: 512, Quant: "q8_0", Context: 64, Weights: synth.WeightsBlocks})
			require.NoError(t, err)
			m, err := load.Open(path)
			require.NoError(t, err)
			defer m.Close()
			cost := costOf(m)
			require.Equal(t, plan.Bytes, cost.FileBytes)
			require.Equal(t, plan.Params, cost.Params)
			emb := m.Tensors["token_embd.weight"]
			eb, en := tensorBytes(emb)
			_, hasOut := m.Tensors["output.weight"]
			require.Equal(t, !c.tied, hasOut)
			if c.tied {
				require.Equal(t, cost.FileBytes, cost.DecodeBytes)
			} else {
				row := eb / int64(emb.Shape[1])
				require.Equal(t, cost.FileBytes-eb+row, cost.DecodeBytes)
				require.Less(t, cost.MatParams, cost.Params-en+1)
			}
			require.Positive(t, cost.MatParams)
		})
	}
}

// TestCostOfMoE: a mixture of experts' decode step reads its dense
// tensors and, of the stacked expert tensors, the share of the experts its
// tokens choose: k/E at one token (the active weights), the expected
// distinct share 1 − (1 − k/E)^b at b tokens, never more than all.
func TestCostOfMoE(t *testing.T) {
	path := filepath.Join(t.TempDir(), "moe.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "qwen3-30b-a3b", Layers: 1, Dim: 256, Quant: "q8_0", Context: 64, Weights: synth.WeightsBlocks})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	defer m.Close()
	cost := costOf(m)
	hp := m.HParams
	require.Equal(t, hp.Experts, cost.Experts)
	require.Equal(t, hp.ExpertsUsed, cost.ExpertsUsed)
	require.Less(t, hp.ExpertsUsed, hp.Experts)
	var experts int64
	for name, tn := range m.Tensors {
		if isExpertTensor(name) {
			b, _ := tensorBytes(tn)
			experts += b
		}
	}
	require.Positive(t, experts)
	require.Equal(t, experts, cost.ExpertBytes)
	emb := m.Tensors["token_embd.weight"]
	eb, _ := tensorBytes(emb)
	dense := cost.FileBytes - experts
	if _, hasOut := m.Tensors["output.weight"]; hasOut {
		dense += eb/int64(emb.Shape[1]) - eb
	}
	active := int64(float64(experts) * float64(hp.ExpertsUsed) / float64(hp.Experts))
	require.InDelta(t, float64(dense+active), float64(cost.DecodeBytes), 1)
	require.InDelta(t, float64(cost.DecodeBytes), cost.stepBytes(1), 1)
	prev := cost.stepBytes(1)
	for _, b := range []int{2, 16, 64, 4096} {
		sb := cost.stepBytes(b)
		require.Greater(t, sb, prev, "batch %d", b)
		require.LessOrEqual(t, sb, float64(dense+experts)+1, "batch %d", b)
		prev = sb
	}
	require.Contains(t, cost.expertNote(1), fmt.Sprintf("%d of %d experts", hp.ExpertsUsed, hp.Experts))
	require.Empty(t, modelCost{}.expertNote(1))
	require.Zero(t, modelCost{}.expertShare(16))
}

func TestAttnFLOPs(t *testing.T) {
	// one layer, one head of 1: p(p+1)/2 pairs × 2 products × 2 FLOPs
	require.InDelta(t, 4*3.0, attnFLOPs(1, 1, 1, 2), 1e-9)
	require.InDelta(t, 32*32*128*4*512*513/2.0, attnFLOPs(32, 32, 128, 512), 1)
}

// The profiled serving step's prompt chunks: chunks of 512 from position
// 0 of new sequences, tokens taken from the prompt in turn, no logits.
func TestProfileChunks(t *testing.T) {
	cs := profileChunks([]int32{5, 6, 7}, 1100)
	require.Len(t, cs, 3)
	require.Equal(t, 3, chunksOf(1100))
	total := 0
	for j, c := range cs {
		require.Equal(t, runtime.SeqID(2000+j), c.Seq)
		require.Zero(t, c.Pos)
		require.False(t, c.Logits)
		total += len(c.Tokens)
	}
	require.Equal(t, 1100, total)
	require.Len(t, cs[0].Tokens, 512)
	require.Len(t, cs[2].Tokens, 76)
	require.Equal(t, []int32{6, 7, 5}, cs[1].Tokens[:3])
	require.Empty(t, profileChunks(nil, 0))
}

// --profile-prefill without --profile is refused before the model loads.
func TestProfilePrefillNeedsProfile(t *testing.T) {
	cmd := newBenchCmd()
	var o, e bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs([]string{"--device", "cpu", "--profile-prefill", "512", "-p", "8", "-n", "4"})
	require.ErrorContains(t, cmd.Execute(), "--profile-prefill 512")
}

// TestBenchVerify: --verify K times tg as speculative verify steps (the
// sequence and K drafts on its pages, one token a step) beside the
// one-row tg; a bad count is refused.
func TestBenchVerify(t *testing.T) {
	cmd := newBenchCmd()
	out, _ := execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
		"--device", "cpu", "-p", "8", "-n", "4", "-r", "1", "--verify", "3", "--threads", "2", "--no-progress", "--roofline=false")
	require.Regexp(t, `\| +tg4@8 \| +1 \|`, out)
	require.Regexp(t, `\| +tg4@8 verify 4 rows \| +1 \|`, out)
	bad := newBenchCmd()
	bad.SetArgs([]string{"--device", "cpu", "-p", "8", "-n", "4", "--verify", "17"})
	bad.SetOut(io.Discard)
	bad.SetErr(io.Discard)
	require.ErrorContains(t, bad.Execute(), "--verify 17")
}
