package autotune

import (
	"context"
	"fmt"
	"time"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/tunedb"
)

// E2ERunner times whole decode steps of a model whose kernels take the
// arms pick chooses (codegen.LowerOptions.Pick), checked against a
// reference step. It confirms kernel-level winners in the place they run:
// on the H200 the fastest int8 decode products timed alone made whole
// steps slower (docs/AUTOTUNE.md). cmd/memra implements it on the CUDA
// backend.
type E2ERunner interface {
	// Step lowers and loads the model with pick in the numerical class
	// numerics (a name the runner knows; "" its default), runs decode
	// steps of batch sequences and returns the median µs per step, with
	// the relative error of a step's logits against the runner's reference
	// for batch and numerics (the first Step there is its own reference).
	Step(ctx context.Context, pick codegen.ArmPicker, batch int, numerics string) (Measurement, error)
}

// E2EResult is the end-to-end comparison of two pickers at one batch.
type E2EResult struct {
	Batch     int
	Numerics  string // the numerical class the steps ran in ("" the runner's default)
	Tuned     Measurement
	Baseline  Measurement
	Speedup   float64 // Baseline.TimeUS / Tuned.TimeUS
	TunedPass bool
}

// CompareE2E measures tuned against baseline at each batch size in the
// numerical class numerics, the baseline first (it is the reference of the
// tuned step's logits). A tuned step outside the tolerance is reported
// with TunedPass false; the caller must then not keep the tuned arms.
func CompareE2E(ctx context.Context, r E2ERunner, tuned, baseline codegen.ArmPicker, batches []int, numerics string) ([]E2EResult, error) {
	var out []E2EResult
	for _, b := range batches {
		base, err := r.Step(ctx, baseline, b, numerics)
		if err != nil {
			return out, fmt.Errorf("autotune: e2e baseline at batch %d: %w", b, err)
		}
		tm, err := r.Step(ctx, tuned, b, numerics)
		if err != nil {
			return out, fmt.Errorf("autotune: e2e tuned at batch %d: %w", b, err)
		}
		res := E2EResult{Batch: b, Numerics: numerics, Tuned: tm, Baseline: base, TunedPass: tm.Pass()}
		if tm.TimeUS > 0 {
			res.Speedup = base.TimeUS / tm.TimeUS
		}
		out = append(out, res)
	}
	return out, nil
}

// Overlay returns a picker that chooses entries' arms for their (family,
// class) and asks base for everything else (base may be nil: the family
// defaults).
func Overlay(base codegen.ArmPicker, entries []tunedb.Entry) codegen.ArmPicker {
	by := map[[2]string]codegen.Point{}
	for _, e := range entries {
		by[[2]string{e.Family, e.Class}] = e.Arm
	}
	return func(family, class string) (codegen.Point, bool) {
		if p, ok := by[[2]string{family, class}]; ok {
			return p, true
		}
		if base == nil {
			return nil, false
		}
		return base(family, class)
	}
}

// ConfirmGroup is a set of tuned entries judged together end to end, at
// the batch size their kernels serve (the one-row arms at 1, the batch
// arms at the batch they were tuned at) and in the numerical class they
// run in: kernels that only one class launches would otherwise be judged
// by steps that never run them.
type ConfirmGroup struct {
	Name     string
	Batch    int
	Numerics string // the runner's name of the class ("" its default)
	Entries  []tunedb.Entry
}

// Confirmed is a group's end-to-end verdict.
type Confirmed struct {
	Group  ConfirmGroup
	Result E2EResult
	Keep   bool
}

// ConfirmMargin is how much faster than the baseline a group's steps must
// be for Confirm to keep it: within it, a difference is noise and the
// untuned arms stay.
const ConfirmMargin = 0.01

// Confirm judges each group in turn: steps with the group's entries over
// base against base alone, at the group's batch. A group is kept when its
// step passes and is at least ConfirmMargin faster; a kept group's entries
// join the base of the groups after it. No group starts after until (the
// end of the run's budget; zero: none), but one started before it runs to
// its end: cut mid-way, the steps it ran would be wasted (on an 18.5 GB
// model a group is two backends of about a minute each), and so was every
// group of an H100 run whose budget ended inside its first. Once ctx is
// done (an interrupt) nothing more runs. The verdicts so far are returned
// with the error, and the caller writes none of the groups without one.
func Confirm(ctx context.Context, r E2ERunner, base codegen.ArmPicker, groups []ConfirmGroup, until time.Time) ([]Confirmed, error) {
	var out []Confirmed
	var kept []tunedb.Entry
	for _, g := range groups {
		if len(g.Entries) == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("autotune: confirming %s: %w", g.Name, err)
		}
		if !until.IsZero() && !time.Now().Before(until) {
			return out, fmt.Errorf("autotune: confirming %s: the budget ended before it: %w", g.Name, context.DeadlineExceeded)
		}
		b := Overlay(base, kept)
		res, err := CompareE2E(ctx, r, Overlay(b, g.Entries), b, []int{g.Batch}, g.Numerics)
		if err != nil {
			return out, fmt.Errorf("autotune: confirming %s: %w", g.Name, err)
		}
		c := Confirmed{Group: g, Result: res[0]}
		c.Keep = c.Result.TunedPass && c.Result.Speedup >= 1+ConfirmMargin
		if c.Keep {
			kept = append(kept, g.Entries...)
		}
		out = append(out, c)
	}
	return out, nil
}
