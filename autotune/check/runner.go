package check

import (
	"fmt"

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
