package main

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"slices"
	"time"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
)

// specPassage is the text of bench --spec's prompt: told twice, then begun
// a third time, so that a model that continues it copies it (the case
// prompt lookup exists for: quoting, editing, code, structured text).
const specPassage = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her " +
	"friends. One day, she saw a big red ball under a tree. She wanted to play with it, but it was too high for her to reach. "

// specPrompt is bench --spec's prompt: the passage twice and its start with
// the model's tokenizer, or p random-free tokens (a repeated ramp) without one.
func specPrompt(m *load.Model, p int) []int32 {
	if tok := m.Tokenizer; tok != nil {
		return tok.Encode(specPassage+specPassage+"Once upon a time,", true, false)
	}
	out := make([]int32, max(p, 2))
	for i := range out {
		out[i] = int32(i % 64)
	}
	return out
}

// benchSpec times greedy generation of gen tokens through the engine with
// speculative decoding off and on, reps times each (alternating), and
// prints the medians, the speed-up and the drafts' acceptance.
func benchSpec(ctx context.Context, w io.Writer, m *load.Model, b runtime.Backend, spec runtime.SpecConfig, rows, gen, reps int) error {
	eng := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: rows, MaxQueue: 1, Spec: spec})
	defer eng.Close()
	prompt := specPrompt(m, 64)
	if ctxLen := b.Info().ContextLength; ctxLen > 0 && len(prompt)+gen > ctxLen {
		gen = ctxLen - len(prompt)
		if gen < 2 {
			return fmt.Errorf("bench --spec: the prompt of %d tokens leaves no room in a context of %d", len(prompt), ctxLen)
		}
	}
	// one timed generation: decode tokens a second, after the first token
	once := func(on bool) (float64, error) {
		req := runtime.Request{Prompt: prompt, MaxTokens: gen, IgnoreEOS: true, Speculative: &on}
		ch, err := eng.Submit(ctx, req)
		if err != nil {
			return 0, err
		}
		var first, last time.Time
		n := 0
		var end runtime.Event
		for ev := range ch {
			if len(ev.Tokens) > 0 {
				if first.IsZero() {
					first = time.Now()
					n -= len(ev.Tokens) // the prefill's token is not decode
				}
				last = time.Now()
				n += len(ev.Tokens)
			}
			end = ev
		}
		if end.Err != nil {
			return 0, end.Err
		}
		if n <= 0 || !last.After(first) {
			return 0, fmt.Errorf("bench --spec: %d decoded tokens", n)
		}
		return float64(n) / last.Sub(first).Seconds(), nil
	}
	if _, err := once(true); err != nil { // warm-up: graphs, caches
		return err
	}
	before := eng.Stats()
	var off, on []float64
	for range reps {
		r, err := once(false)
		if err != nil {
			return err
		}
		off = append(off, r)
		if r, err = once(true); err != nil {
			return err
		}
		on = append(on, r)
	}
	st := eng.Stats()
	drafted, accepted, steps := st.SpecDrafted-before.SpecDrafted, st.SpecAccepted-before.SpecAccepted, st.SpecSteps-before.SpecSteps
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	fmt.Fprintf(w, "| mode | prompt | tokens | decode tok/s (median of %d) | min–max | drafted | accepted | tokens a step |\n", reps)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| off | %d | %d | %.2f | %.2f–%.2f | – | – | 1.00 |\n", len(prompt), gen, med(off), slices.Min(off), slices.Max(off))
	rate, per := 0.0, 1.0
	if drafted > 0 {
		rate = 100 * float64(accepted) / float64(drafted)
	}
	if steps > 0 {
		per = 1 + float64(accepted)/float64(steps)
	}
	fmt.Fprintf(w, "| %s | %d | %d | %.2f | %.2f–%.2f | %d | %d (%.1f %%) | %.2f |\n", spec.Mode, len(prompt), gen, med(on),
		slices.Min(on), slices.Max(on), drafted, accepted, rate, per)
	fmt.Fprintf(w, "\nspeculative decoding: %.2f× plain decode\n", med(on)/med(off))
	return nil
}

// runBenchSpec is bench with --spec or --draft: one backend (and the draft
// model's) sized for a sequence and its drafts, then benchSpec.
func runBenchSpec(cmd *cobra.Command, m *load.Model, o *benchOptions, stderr io.Writer) error {
	rows := 1 + o.spec.maxDraft
	ctxLen := len(specPrompt(m, 64)) + o.gen
	if cl := m.HParams.ContextLength; cl > 0 {
		ctxLen = min(ctxLen, cl)
	}
	b, err := benchBackend(m, o, ctxLen, rows, stderr)
	if err != nil {
		return err
	}
	device := o.device
	if device == "" {
		device = b.Info().Device
	}
	spec, release, err := o.spec.config(cmd, m, device, o.threads, rows, gpuOptions{kvCache: o.kvCache, kvMemory: o.kvMemory, batchInvariant: o.batchInvariant, cpuProducts: o.cpuProducts})
	if err != nil {
		b.Close()
		return err
	}
	defer release()
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return benchSpec(ctx, cmd.OutOrStdout(), m, b, spec, rows, o.gen, o.reps)
}
