package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cuda"
)

// profileDecode prefills prompt into bs sequences, profiles one decode step
// of them (each kernel between CUDA events, median of reps) and writes a
// table of the kernels by time: launches per step, µs per step, share of
// the kernels' sum, and the weight bandwidth of the kernels that read
// weights. stepSecs is the measured step time of that batch (0: unknown),
// printed beside the sum so the gap between kernels shows. With prefill
// above 0 the step also carries that many prompt tokens of new sequences
// in chunks of profileChunk (the prefill program then runs the step), as a
// serving step that admits requests beside bs decodes. A mixture of
// experts' expert products (family moe_gemv) are counted as reading share
// of their stacked weights (modelCost.expertShare), not all of them.
func profileDecode(ctx context.Context, w io.Writer, b *cuda.Backend, prompt []int32, bs, prefill, reps int, stepSecs, share float64) error {
	seqs := make([]runtime.SeqID, bs)
	batch := make([]runtime.SeqStep, bs)
	for i := range seqs {
		seqs[i] = runtime.SeqID(1000 + i)
		b.Free(seqs[i])
		defer b.Free(seqs[i])
		if len(prompt) > 0 {
			if _, err := b.Step(ctx, []runtime.SeqStep{{Seq: seqs[i], Tokens: prompt}}); err != nil {
				return fmt.Errorf("bench: profile: prompt of sequence %d: %w", i, err)
			}
		}
		batch[i] = runtime.SeqStep{Seq: seqs[i], Pos: len(prompt), Tokens: []int32{1}, Logits: true}
	}
	batch = append(batch, profileChunks(prompt, prefill)...)
	for _, e := range batch[bs:] {
		b.Free(e.Seq)
		defer b.Free(e.Seq)
	}
	times, err := b.ProfileStep(ctx, batch, reps)
	if err != nil {
		return fmt.Errorf("bench: profile: %w", err)
	}
	type agg struct {
		name, family string
		n            int
		secs         float64
		bytes        int64
	}
	byName := map[string]*agg{}
	var order []*agg
	total := 0.0
	for _, t := range times {
		a := byName[t.Kernel]
		if a == nil {
			a = &agg{name: t.Kernel, family: t.Family}
			byName[t.Kernel] = a
			order = append(order, a)
		}
		a.n++
		a.secs += t.Seconds
		if t.Family == "moe_gemv" && share > 0 {
			a.bytes += int64(float64(t.WeightBytes) * share)
		} else {
			a.bytes += t.WeightBytes
		}
		total += t.Seconds
	}
	slices.SortStableFunc(order, func(x, y *agg) int {
		switch {
		case x.secs > y.secs:
			return -1
		case x.secs < y.secs:
			return 1
		}
		return 0
	})
	fam := map[string]float64{}
	for _, a := range order {
		fam[a.family] += a.secs
	}
	if prefill > 0 {
		fmt.Fprintf(w, "\nprofile: step of %d decodes at position %d and %d prompt tokens in %d chunks (the prefill program), %d launches, median of %d (plain launches, no PDL)\n",
			bs, len(prompt), prefill, chunksOf(prefill), len(times), reps)
		stepSecs = 0 // the measured step is a decode step's
	} else {
		fmt.Fprintf(w, "\nprofile: decode step, batch %d at position %d, %d launches, median of %d (plain launches, no PDL)\n", bs, len(prompt), len(times), reps)
	}
	if stepSecs > 0 {
		fmt.Fprintf(w, "kernel sum %.1f µs; measured step (graph) %.1f µs\n", total*1e6, stepSecs*1e6)
	} else {
		fmt.Fprintf(w, "kernel sum %.1f µs\n", total*1e6)
	}
	rows := [][]string{{"family", "µs/step", "%"}}
	fams := make([]string, 0, len(fam))
	for f := range fam {
		fams = append(fams, f)
	}
	slices.SortFunc(fams, func(x, y string) int {
		if fam[x] > fam[y] {
			return -1
		}
		if fam[x] < fam[y] {
			return 1
		}
		return 0
	})
	for _, f := range fams {
		rows = append(rows, []string{f, fmt.Sprintf("%.1f", fam[f]*1e6), fmt.Sprintf("%.1f", 100*fam[f]/total)})
	}
	if err := writeMarkdownTable(w, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = [][]string{{"kernel", "launches", "µs/launch", "µs/step", "%", "weight GB/s"}}
	for _, a := range order {
		bw := "–"
		if a.bytes > 0 && a.secs > 0 {
			bw = fmt.Sprintf("%.0f", float64(a.bytes)/a.secs/1e9)
		}
		rows = append(rows, []string{a.name, fmt.Sprint(a.n), fmt.Sprintf("%.2f", a.secs/float64(a.n)*1e6),
			fmt.Sprintf("%.1f", a.secs*1e6), fmt.Sprintf("%.1f", 100*a.secs/total), bw})
	}
	return writeMarkdownTable(w, rows)
}

// medianOf returns the median of v without changing it.
func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// profileChunk is the prompt tokens a new sequence feeds in a profiled
// step: the engine's default --prefill-chunk.
const profileChunk = runtime.DefaultPrefillChunk

// chunksOf is the new sequences n prompt tokens take in a profiled step.
func chunksOf(n int) int { return (n + profileChunk - 1) / profileChunk }

// profileChunks returns the entries of n prompt tokens of new sequences
// (ids from 2000, chunks of profileChunk from position 0, tokens taken from
// prompt in turn, or 1 where it is empty), none wanting logits.
func profileChunks(prompt []int32, n int) []runtime.SeqStep {
	var out []runtime.SeqStep
	for j := 0; n > 0; j++ {
		c := min(n, profileChunk)
		toks := make([]int32, c)
		for i := range toks {
			toks[i] = 1
			if len(prompt) > 0 {
				toks[i] = prompt[(i+j)%len(prompt)]
			}
		}
		out = append(out, runtime.SeqStep{Seq: runtime.SeqID(2000 + j), Tokens: toks})
		n -= c
	}
	return out
}
