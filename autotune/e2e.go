package autotune

import (
	"context"
	"fmt"
	"sort"

	"github.com/memra-ai/memra/codegen"
)

// Assignment is a choice of arm per kernel family for a whole model (the
// form codegen's lowering takes its arms in).
type Assignment map[string]codegen.Point

// String lists the assignment as "family:arm" pairs, sorted.
func (a Assignment) String() string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		s += k + ":" + a[k].String()
	}
	return s
}

// E2ERunner times whole decode steps of a compiled model with an arm
// assignment, checked against the CPU reference step. It is the hook for
// end-to-end tuning on the GPU backend (runtime/cuda Backend with
// codegen.Lower's arms): kernel-level winners are confirmed, or a set of
// them rejected, by a real step at batch 1 and a few batch sizes.
type E2ERunner interface {
	// Step lowers and loads the model with arms, runs decode steps at
	// batch and returns the median µs per step, with the relative error of
	// the step's logits against the reference.
	Step(ctx context.Context, arms Assignment, batch int) (Measurement, error)
}

// E2EResult is the end-to-end comparison of two assignments at one batch.
type E2EResult struct {
	Batch     int
	Tuned     Measurement
	Baseline  Measurement
	Speedup   float64 // Baseline.TimeUS / Tuned.TimeUS
	TunedPass bool
}

// CompareE2E measures tuned against baseline (usually the family defaults)
// at each batch size. A tuned step that fails the gate is reported with
// TunedPass false; the caller must then not ship the tuned arms.
func CompareE2E(ctx context.Context, r E2ERunner, tuned, baseline Assignment, batches []int) ([]E2EResult, error) {
	var out []E2EResult
	for _, b := range batches {
		base, err := r.Step(ctx, baseline, b)
		if err != nil {
			return out, fmt.Errorf("autotune: e2e baseline at batch %d: %w", b, err)
		}
		tm, err := r.Step(ctx, tuned, b)
		if err != nil {
			return out, fmt.Errorf("autotune: e2e tuned at batch %d: %w", b, err)
		}
		res := E2EResult{Batch: b, Tuned: tm, Baseline: base, TunedPass: tm.Pass()}
		if tm.TimeUS > 0 {
			res.Speedup = base.TimeUS / tm.TimeUS
		}
		out = append(out, res)
	}
	return out, nil
}

// DefaultAssignment is every tunable family's default arm.
func DefaultAssignment() Assignment {
	a := Assignment{}
	for _, s := range codegen.Spaces() {
		a[s.Family] = s.Default
	}
	return a
}
