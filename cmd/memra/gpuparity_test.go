package main

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/cuda"
)

// TestPrintFlips: the disagreements are counted by gap/RMS band and the
// worst are listed by that ratio, largest first; a report without any
// prints nothing.
func TestPrintFlips(t *testing.T) {
	var b bytes.Buffer
	printFlips(&b, cuda.ParityReport{}, 5)
	require.Empty(t, b.String())
	rep := cuda.ParityReport{Flips: []cuda.Flip{
		{Seq: 0, Step: 3, Gap: 0.01, RMS: 0.02},   // 0.5×
		{Seq: 7, Step: 29, Gap: 0.078, RMS: 0.02}, // 3.9×
		{Seq: 2, Step: 42, Gap: 0.05, RMS: 0.02},  // 2.5×
		{Seq: 1, Step: 5, Gap: 0.02, RMS: 0.02},   // 1×: the first band
		{Seq: 4, Step: 9, Gap: 0.03, RMS: 0.02},   // 1.5×
	}}
	printFlips(&b, rep, 2)
	require.Equal(t, "disagreements by gap/rms: ≤1 2, 1–2 1, 2–3 1, >3 1\n"+
		"  sequence 7, step 29: gap 0.0780, rms 0.0200, 3.90×\n"+
		"  sequence 2, step 42: gap 0.0500, rms 0.0200, 2.50×\n", b.String())
}

// TestParityAgainstCPUInt8: gpu-parity runs without a GPU against the
// CPU's int8 class and prints its row (it passes with the bars opened);
// an unknown backend is an error.
func TestParityAgainstCPUInt8(t *testing.T) {
	run := func(o parityOptions) (string, error) {
		cmd := &cobra.Command{}
		var out bytes.Buffer
		cmd.SetOut(&out)
		err := runParity(cmd, nil, &o)
		return out.String(), err
	}
	o := parityOptions{preset: "qwen3-8b", quant: "q8_0", layers: 1, dim: 128, steps: 24, prompts: 2, len: 8, seed: 3,
		minCos: 0, tieTol: 1e9, against: "cpu-int8"}
	out, err := run(o)
	require.NoError(t, err)
	require.Regexp(t, `qwen3-8b +q8_0 +2 +24 +\d+/48 .* f32 +cpu-int8 +- +true`, out)
	o.against = "rocm"
	_, err = run(o)
	require.ErrorContains(t, err, `--against "rocm"`)
	// the peer bar: the same class as its own peer has the peer's cosine exactly, so a bar of 1
	// fails alone and passes lowered to the peer's
	o.against, o.minCos = "cpu-int8", 1
	_, err = run(o)
	require.ErrorIs(t, err, errParity)
	o.peer = "cpu-int8"
	out, err = run(o)
	require.NoError(t, err)
	require.Regexp(t, `peer cpu-int8: min cosine 0\.9\d+`, out)
	o.peer = "gpu"
	_, err = run(o)
	require.ErrorContains(t, err, `--min-cos-peer "gpu"`)
}

// TestRouteDiffs: choices compare as sets per token; a call one side lacks
// counts as differing.
func TestRouteDiffs(t *testing.T) {
	a := [][]int32{{1, 2, 3, 4}, {5, 6, 7, 8}}
	b := [][]int32{{2, 1, 3, 5}, {6, 5, 7, 8}}
	d, n := routeDiffs(a, b, 2)
	require.Equal(t, 4, n)
	require.Equal(t, 1, d, "token 1 of call 0 chose {3,5} against {3,4}")
	d, n = routeDiffs(a, b[:1], 2)
	require.Equal(t, 4, n)
	require.Equal(t, 3, d)
	d, n = routeDiffs(nil, nil, 0)
	require.Zero(t, d+n)
}
