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
// printed beside the sum so the gap between kernels shows.
func profileDecode(ctx context.Context, w io.Writer, b *cuda.Backend, prompt []int32, bs, reps int, stepSecs float64) error {
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
	times, err := b.ProfileDecode(ctx, batch, reps)
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
		a.bytes += t.WeightBytes
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
	fmt.Fprintf(w, "\nprofile: decode step, batch %d at position %d, %d launches, median of %d (plain launches, no PDL)\n", bs, len(prompt), len(times), reps)
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
