package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/memra-ai/memra/autotune"
	"github.com/memra-ai/memra/autotune/check"
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/tunedb"
)

// Sizes of autotune's end-to-end confirmation: decode steps after a prompt
// of confirmPrompt random tokens (or the model's context, less), timed
// over confirmGen steps, confirmReps times.
const (
	confirmPrompt = 512
	confirmGen    = 32
	confirmReps   = 3
	// confirmTol bounds the relative difference of a step's logits between
	// the tuned and the untuned arms. Both quantise the same activations
	// to int8 and differ in summation order; over a 32-layer model with
	// random weights that reaches ~1e-2 (CPU parity's cosine 0.9996), while
	// a kernel that reads rows not yet written gives ~1 or non-finite logits.
	confirmTol = 0.1
)

// confirmGroups sorts the tuned entries into the groups an end-to-end step
// judges, each at the rows and in the numerical class whose steps launch
// its kernels. The decode step's attention arms and its other kernels
// (norms, RoPE, routing, argmax, …) go first, at batch 1 in the default
// class: their winners are measured alone at kernel-check's sizes (4,096
// keys for attention), and on an H100 a sweep's picks made batch-1 steps
// 6 % slower at 640 (docs/PERFORMANCE.md, session 30). Then the decode
// products (family gemv: the int8 products of repacked weights and the
// float ones): the one-row arms at batch 1, the XQ 2 batch arms at the
// batch they were tuned at (2 to 15 rows in both classes; the int8 class's
// ordered kernels from 16 rows keep their split) in the default class; in
// the speed class ("off"), the only one that launches them, the small-row
// f16 arms (codegen.GEMVSmallClass: steps of 3 to 16 rows), the large arms
// (GEMVLargeClass: from 16 rows) and the wide ones (GEMVWideClass: the
// widest steps) at the rows they were tuned at. Entries of the families
// only prefill launches (prefillFamilies) are not confirmed.
func confirmGroups(entries []tunedb.Entry) []autotune.ConfirmGroup {
	attn := autotune.ConfirmGroup{Name: "arms of the decode attention", Batch: 1}
	other := autotune.ConfirmGroup{Name: "arms of the decode step's other kernels", Batch: 1}
	one := autotune.ConfirmGroup{Name: "one-row arms of the decode products", Batch: 1}
	batch := autotune.ConfirmGroup{Name: "batch arms of the decode products", Batch: check.BatchTuneTokens}
	small := autotune.ConfirmGroup{Name: "small-row f16 arms of the decode products", Batch: check.SmallTuneTokens, Numerics: speedClass}
	large := autotune.ConfirmGroup{Name: "large arms of the decode products", Batch: check.LargeTuneTokens, Numerics: speedClass}
	wide := autotune.ConfirmGroup{Name: "wide f16 arms of the decode products", Batch: check.WideTuneTokens, Numerics: speedClass}
	for _, e := range entries {
		switch {
		case prefillFamilies[e.Family]:
		case strings.HasPrefix(e.Family, "attn_decode"):
			attn.Entries = append(attn.Entries, e)
		case e.Family != "gemv":
			other.Entries = append(other.Entries, e)
		case strings.HasSuffix(e.Class, codegen.GEMVBatchClass("")):
			batch.Entries = append(batch.Entries, e)
		case strings.HasSuffix(e.Class, codegen.GEMVSmallClass("")):
			small.Entries = append(small.Entries, e)
		case strings.HasSuffix(e.Class, codegen.GEMVLargeClass("")):
			large.Entries = append(large.Entries, e)
		case strings.HasSuffix(e.Class, codegen.GEMVWideClass("")):
			wide.Entries = append(wide.Entries, e)
		default:
			one.Entries = append(one.Entries, e)
		}
	}
	var out []autotune.ConfirmGroup
	for _, g := range []autotune.ConfirmGroup{attn, other, one, batch, small, large, wide} {
		if len(g.Entries) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// prefillFamilies are the tunable families that decode steps never launch
// (prompt attention and the prefill products): a decode step cannot judge
// them, so their entries are kept as measured.
var prefillFamilies = map[string]bool{"attn_prefill": true, "attn_flash": true, "gemm_small": true, "mma": true}

// speedClass is the numerical class in which the f16 and large decode
// products run (cuda.NumericsWidth's name).
var speedClass = cuda.NumericsWidth.String()

// confirmed returns the entries to write after verdicts: a kept group's as
// the sweep found them; for a group the steps judged and dropped, each
// class the card had no entry of its own for (own, the confirmation's
// baseline) gets the family default the sweep timed, with the sweep's
// winner as runner-up: the card's own measured choice, so it stops
// borrowing another card's entry for it (the start notice says when it
// does); an unjudged group's entries are not written.
func confirmed(entries []tunedb.Entry, verdicts []autotune.Confirmed, own codegen.ArmPicker) []tunedb.Entry {
	drop := map[[2]string]bool{}
	judged := map[[2]string]bool{}
	for _, v := range verdicts {
		if v.Keep {
			continue
		}
		for _, e := range v.Group.Entries {
			drop[[2]string{e.Family, e.Class}] = true
			judged[[2]string{e.Family, e.Class}] = v.Result.Baseline.TimeUS > 0
		}
	}
	var out []tunedb.Entry
	for _, e := range entries {
		id := [2]string{e.Family, e.Class}
		switch {
		case !drop[id]:
			out = append(out, e)
		case !judged[id] || e.Default == nil:
		default:
			if own != nil {
				if _, ok := own(e.Family, e.Class); ok {
					continue // the card's own entry was the baseline and stays
				}
			}
			if !e.Default.Arm.Equal(e.Arm) {
				e.RunnerUp = &tunedb.Timed{Arm: e.Arm, ArmName: e.ArmName, TimeUS: e.TimeUS}
				e.Arm, e.ArmName, e.TimeUS = e.Default.Arm, e.Default.ArmName, e.Default.TimeUS
			}
			out = append(out, e)
		}
	}
	return out
}

// ownPicker picks the card's own tunedb entries only: the confirmation's
// baseline is what the card runs without the sweep's arms and without
// another card's entries, so what it writes is the card's own measure.
func ownPicker(db *tunedb.DB, key tunedb.DeviceKey) codegen.ArmPicker {
	return func(family, class string) (codegen.Point, bool) {
		p, src := db.Lookup(key, family, class)
		return p, src.Kind == tunedb.KindExact && p != nil
	}
}

// unjudged returns a dropping verdict for each group of groups without one
// in verdicts (the confirmation stopped before it).
func unjudged(groups []autotune.ConfirmGroup, verdicts []autotune.Confirmed) []autotune.Confirmed {
	var out []autotune.Confirmed
	for _, g := range groups {
		if !slices.ContainsFunc(verdicts, func(v autotune.Confirmed) bool { return v.Group.Name == g.Name }) {
			out = append(out, autotune.Confirmed{Group: g})
		}
	}
	return out
}

// writeVerdicts prints one line a confirmed group.
func writeVerdicts(w io.Writer, verdicts []autotune.Confirmed) {
	for _, v := range verdicts {
		r := v.Result
		what := "dropped"
		if v.Keep {
			what = "kept"
		}
		class := cmp.Or(v.Group.Numerics, cuda.DefaultNumerics.String())
		fmt.Fprintf(w, "confirm: %s (%d entries) at batch %d, %s class: %.1f µs a step tuned, %.1f untuned (×%.3f), logits rel. err %.3g (tol %.3g): %s\n",
			v.Group.Name, len(v.Group.Entries), r.Batch, class, r.Tuned.TimeUS, r.Baseline.TimeUS, r.Speedup, r.Tuned.RelErr, r.Tuned.Tol, what)
	}
}

// confirmE2E judges groups end to end on the CUDA backend with model path
// (autotune.Confirm over base). An interrupted sweep confirms nothing.
func confirmE2E(ctx context.Context, until time.Time, path string, base codegen.ArmPicker, groups []autotune.ConfirmGroup, logf func(string, ...any)) ([]autotune.Confirmed, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("confirm: %w", err)
	}
	m, err := load.Open(path)
	if err != nil {
		return nil, fmt.Errorf("confirm: %w", err)
	}
	defer m.Close()
	return autotune.Confirm(ctx, newCudaE2E(m, 0, logf), base, groups, until)
}

// cudaE2E is autotune.E2ERunner on the CUDA backend: each Step builds the
// model with the picker (NVRTC's disk cache makes the kernels it compiled
// before cheap), prefills batch sequences with the same random prompt and
// times decode steps with bench's loop.
type cudaE2E struct {
	m      *load.Model
	device int
	prompt []int32
	gen    int
	reps   int
	ref    map[string][]float32 // batch/class → the first step's logits there
	logf   func(string, ...any)
}

func newCudaE2E(m *load.Model, device int, logf func(string, ...any)) *cudaE2E {
	p := confirmPrompt
	if cl := m.HParams.ContextLength; cl > 0 {
		p = max(min(p, cl-confirmGen-1), 1)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	prompt := make([]int32, p)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(max(m.HParams.VocabSize, 1)))
	}
	return &cudaE2E{m: m, device: device, prompt: prompt, gen: confirmGen, reps: confirmReps, ref: map[string][]float32{}, logf: logf}
}

func (r *cudaE2E) Step(ctx context.Context, pick codegen.ArmPicker, batch int, numerics string) (autotune.Measurement, error) {
	m := autotune.Measurement{Tol: confirmTol, Samples: r.reps}
	class, err := cuda.ParseNumerics(numerics)
	if err != nil {
		return m, err
	}
	b, err := cuda.NewBackend(r.m, cuda.BackendOptions{Device: r.device, MaxSeqs: batch, Context: len(r.prompt) + r.gen + 1,
		PrefillTokens: len(r.prompt), Pick: pick, Numerics: class, Logf: r.logf,
		// one prefill a backend: no bf16 copy of the weights kept for it
		PrefillWeights: "dequant"})
	if err != nil {
		return m, err
	}
	defer b.Close()
	logits, err := r.firstStep(ctx, b, batch)
	if err != nil {
		return m, err
	}
	key := fmt.Sprintf("%d/%v", batch, class)
	if ref, ok := r.ref[key]; ok {
		m.RelErr = codegen.RelErr(logits, ref)
	} else {
		r.ref[key] = logits
	}
	times := make([]float64, 0, r.reps)
	for range r.reps {
		d, err := benchBatch(ctx, b, r.prompt, batch, r.gen, false)
		if err != nil {
			return m, err
		}
		times = append(times, float64(d)/float64(time.Microsecond)/float64(r.gen))
	}
	slices.Sort(times)
	m.TimeUS = times[len(times)/2]
	return m, nil
}

// firstStep prefills batch sequences with the prompt and returns the
// logits of their first decode step, concatenated.
func (r *cudaE2E) firstStep(ctx context.Context, b runtime.Backend, batch int) ([]float32, error) {
	step := make([]runtime.SeqStep, batch)
	for i := range step {
		s := runtime.SeqID(200 + i)
		defer b.Free(s)
		if _, err := b.Step(ctx, []runtime.SeqStep{{Seq: s, Tokens: r.prompt}}); err != nil {
			return nil, fmt.Errorf("confirm: prompt of sequence %d: %w", i, err)
		}
		step[i] = runtime.SeqStep{Seq: s, Pos: len(r.prompt), Tokens: []int32{r.prompt[i%len(r.prompt)]}, Logits: true}
	}
	out, err := b.Step(ctx, step)
	if err != nil {
		return nil, fmt.Errorf("confirm: decode step: %w", err)
	}
	var flat []float32
	for _, l := range out {
		flat = append(flat, l...)
	}
	return flat, nil
}
