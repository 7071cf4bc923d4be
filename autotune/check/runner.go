package check

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/autotune"
	"github.com/memra-ai/memra/codegen"
)

// Runner is the autotune.Runner of a Device over a set of cases, matched to
// tasks by ID.
type Runner struct {
	Dev   *Device
	cases map[string]*Case
}

// NewRunner returns a runner over cases.
func NewRunner(dev *Device, cases []*Case) *Runner {
	r := &Runner{Dev: dev, cases: map[string]*Case{}}
	for _, c := range cases {
		r.cases[c.ID()] = c
	}
	return r
}

// Tasks returns the autotune tasks of cases, one per ID, in order.
func Tasks(cases []*Case) []autotune.Task {
	var out []autotune.Task
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.ID()] {
			continue
		}
		seen[c.ID()] = true
		out = append(out, autotune.Task{Family: c.Family, Class: c.Class, Label: c.Use, Space: c.Space()})
	}
	return out
}

// LoweringDefaults returns tasks with the baseline of each one-row int8
// product set to the arm lowering runs untuned on a card of
// multiprocessors multiprocessors: split over two warps a row set where
// the product has fewer blocks than that (codegen.SplitUntuned). So the
// arm a tunedb entry must beat is the one the program runs without it,
// and a pick of the baseline does not take the split away.
func (r *Runner) LoweringDefaults(tasks []autotune.Task, multiprocessors int) []autotune.Task {
	out := slices.Clone(tasks)
	for i, t := range out {
		c, err := r.lookup(t)
		if err != nil || c.Family != "gemv" {
			continue
		}
		a := codegen.GEMVArmOf(t.Space.Default)
		if !codegen.SplitUntuned(a, c.N, multiprocessors) {
			continue
		}
		split := a.Split(2).Point()
		if slices.ContainsFunc(t.Space.Arms(), split.Equal) {
			out[i].Space.Default = split
		}
	}
	return out
}

func (r *Runner) lookup(t autotune.Task) (*Case, error) {
	c, ok := r.cases[t.ID()]
	if !ok {
		return nil, fmt.Errorf("%w: no case for task %s", ErrCase, t.ID())
	}
	return c, nil
}

// Compile implements autotune.Runner.
func (r *Runner) Compile(t autotune.Task, arm codegen.Point) error {
	c, err := r.lookup(t)
	if err != nil {
		return err
	}
	return r.Dev.Compile(c, arm)
}

// Measure implements autotune.Runner.
func (r *Runner) Measure(t autotune.Task, arm codegen.Point, reps int) (autotune.Measurement, error) {
	c, err := r.lookup(t)
	if err != nil {
		return autotune.Measurement{}, err
	}
	res, err := r.Dev.Run(c, arm, reps)
	if err != nil {
		return autotune.Measurement{}, err
	}
	return autotune.Measurement{TimeUS: res.TimeUS, Samples: len(res.Samples), RelErr: res.RelErr, Tol: res.Tol}, nil
}
