package autotune

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
)

// fakeClock advances only when the fake runner says so.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeRunner times arms from a table of true times with multiplicative
// noise; the clock advances by the kernel time of every sample plus a fixed
// overhead per measurement (and per compilation).
type fakeRunner struct {
	clock    *fakeClock
	times    map[string]float64 // arm name → true µs
	wrong    map[string]bool    // arms whose output is wrong
	broken   map[string]bool    // arms that fail to compile
	noise    float64
	overhead time.Duration
	compile  time.Duration // clock advance per compilation
	space    codegen.Space

	mu       sync.Mutex
	rng      *rand.Rand
	measured map[string]int // arm name → Measure calls
	compiled map[string]int
	perTask  map[string]int // task ID → Compile calls
}

func newFake(space codegen.Space, clock *fakeClock, seed uint64) *fakeRunner {
	f := &fakeRunner{clock: clock, times: map[string]float64{}, wrong: map[string]bool{}, broken: map[string]bool{},
		overhead: 10 * time.Millisecond, space: space, rng: rand.New(rand.NewPCG(seed, 7)),
		measured: map[string]int{}, compiled: map[string]int{}, perTask: map[string]int{}}
	for i, p := range space.Arms() {
		// a smooth-ish landscape: 20..60 µs, deterministic per arm
		f.times[space.ArmName(p)] = 20 + float64((i*37)%41)
	}
	return f
}

func (f *fakeRunner) Compile(t Task, arm codegen.Point) error {
	name := f.space.ArmName(arm)
	f.mu.Lock()
	f.compiled[name]++
	f.perTask[t.ID()]++
	f.mu.Unlock()
	f.clock.advance(f.compile)
	if f.broken[name] {
		return errors.New("nvrtc: planted compile error")
	}
	return nil
}

func (f *fakeRunner) Measure(t Task, arm codegen.Point, reps int) (Measurement, error) {
	name := f.space.ArmName(arm)
	f.mu.Lock()
	f.measured[name]++
	n := 1 + f.noise*(2*f.rng.Float64()-1)
	f.mu.Unlock()
	us, ok := f.times[name]
	if !ok {
		return Measurement{}, fmt.Errorf("fake: unknown arm %s", name)
	}
	f.clock.advance(f.overhead + time.Duration(float64(reps)*us*float64(time.Microsecond)))
	m := Measurement{TimeUS: us * n, Samples: reps, Tol: 1e-4, RelErr: 1e-6}
	if f.wrong[name] {
		m.RelErr = 0.3
	}
	return m, nil
}

func (f *fakeRunner) argmin() string {
	best := ""
	for n, us := range f.times {
		if f.wrong[n] || f.broken[n] {
			continue
		}
		if best == "" || us < f.times[best] {
			best = n
		}
	}
	return best
}

func space(t *testing.T, family string) codegen.Space {
	s, err := codegen.SpaceByName(family)
	require.NoError(t, err)
	return s
}

func task(t *testing.T, family string) Task {
	return Task{Family: family, Class: "test", Space: space(t, family)}
}

func TestExhaustiveFindsMinimum(t *testing.T) {
	for _, family := range []string{"rmsnorm", "attn_decode", "attn_prefill"} {
		t.Run(family, func(t *testing.T) {
			clock := &fakeClock{}
			f := newFake(space(t, family), clock, 1)
			res := Search(context.Background(), f, task(t, family), Options{Clock: clock}, 0)
			require.Equal(t, "exhaustive", res.Strategy)
			require.NotNil(t, res.Best)
			require.Equal(t, f.argmin(), res.Best.Name)
			require.Equal(t, len(f.times), res.Tried)
			for n := range f.times {
				require.Equal(t, 1, f.measured[n], "each arm measured once: %s", n)
			}
			require.NotNil(t, res.RunnerUp)
			require.Greater(t, res.RunnerUp.Meas.TimeUS, res.Best.Meas.TimeUS)
			require.NotNil(t, res.Default)
			require.Equal(t, res.Task.Space.ArmName(res.Task.Space.Default), res.Default.Name)
		})
	}
}

func TestHalvingFindsPlantedBest(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			clock := &fakeClock{}
			sp := space(t, "gemv")
			require.Greater(t, sp.Size(), 24, "gemv is large enough for halving")
			f := newFake(sp, clock, seed)
			f.noise = 0.05
			arms := sp.Arms()
			planted := sp.ArmName(arms[(int(seed)*13)%len(arms)])
			f.times[planted] = 12 // clearly best, beyond the noise
			res := Search(context.Background(), f, task(t, "gemv"), Options{Clock: clock}, 0)
			require.Equal(t, "halving", res.Strategy)
			require.Equal(t, planted, res.Best.Name)
			total := 0
			for _, n := range f.measured {
				total += n
			}
			_, _, planned := plan(len(arms), Options{}.withDefaults())
			require.Equal(t, planned, total, "measurements as planned")
			require.Less(t, total, 2*len(arms), "halving measures far fewer than exhaustive at full reps")
			require.Greater(t, f.measured[planted], 1, "the winner survives to later rounds")
		})
	}
}

func TestBudgetRespected(t *testing.T) {
	clock := &fakeClock{}
	sp := space(t, "gemv")
	f := newFake(sp, clock, 3)
	f.overhead = 100 * time.Millisecond
	budget := 2 * time.Second // room for ~20 of gemv's measurements
	start := clock.Now()
	res, err := Tune(context.Background(), f, []Task{task(t, "gemv")}, Options{Clock: clock, Budget: budget})
	require.NoError(t, err)
	used := clock.Now().Sub(start)
	// the search may start one measurement just before the deadline
	require.LessOrEqual(t, used, budget+f.overhead+time.Duration(20*60)*time.Microsecond)
	require.True(t, res[0].OutOfTime)
	require.NotNil(t, res[0].Best, "best so far is still returned")
	require.Less(t, res[0].Tried, sp.Size())

	// two tasks share the budget: the second is not starved
	clock = &fakeClock{}
	f = newFake(sp, clock, 3)
	f.overhead = 100 * time.Millisecond
	fr := newFake(space(t, "rmsnorm"), clock, 4)
	both := &routeRunner{by: map[string]Runner{"gemv": f, "rmsnorm": fr}}
	res, err = Tune(context.Background(), both, []Task{task(t, "gemv"), task(t, "rmsnorm")}, Options{Clock: clock, Budget: 4 * time.Second})
	require.NoError(t, err)
	require.NotNil(t, res[1].Best)
	require.Equal(t, fr.argmin(), res[1].Best.Name)
	require.LessOrEqual(t, clock.Now().Sub(time.Time{}), 4*time.Second+200*time.Millisecond)
}

// TestSpentBudgetMeasuresDefaults: tasks that start after the budget is
// spent (the earlier ones overran it) still measure their default arm, and
// only it, so each reports a baseline rather than "no arm passed".
func TestSpentBudgetMeasuresDefaults(t *testing.T) {
	clock := &fakeClock{}
	f := newFake(space(t, "gemv"), clock, 3)
	f.overhead = time.Second // the first measurement alone spends the budget
	f.compile = 100 * time.Millisecond
	tasks := []Task{task(t, "gemv"), {Family: "gemv", Class: "second", Space: space(t, "gemv")}, {Family: "gemv", Class: "third", Space: space(t, "gemv")}}
	res, err := Tune(context.Background(), f, tasks, Options{Clock: clock, Budget: 500 * time.Millisecond})
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.OutOfTime, r.Task.ID())
		require.Equal(t, 1, r.Tried, r.Task.ID())
		require.NotNil(t, r.Default, r.Task.ID())
		require.NotNil(t, r.Best, r.Task.ID())
		require.Equal(t, r.Default.Name, r.Best.Name)
	}
	require.Greater(t, f.perTask[tasks[0].ID()], 1, "the first task started within the budget")
	for _, tk := range tasks[1:] {
		require.Equal(t, 1, f.perTask[tk.ID()], "%s: once the budget is spent only the default is compiled", tk.ID())
	}
}

// routeRunner sends each task to the runner of its family.
type routeRunner struct{ by map[string]Runner }

func (r *routeRunner) Compile(t Task, arm codegen.Point) error { return r.by[t.Family].Compile(t, arm) }
func (r *routeRunner) Measure(t Task, arm codegen.Point, reps int) (Measurement, error) {
	return r.by[t.Family].Measure(t, arm, reps)
}

func TestGateRefusesWrongFastestArm(t *testing.T) {
	for _, family := range []string{"attn_decode", "gemv"} {
		t.Run(family, func(t *testing.T) {
			clock := &fakeClock{}
			sp := space(t, family)
			f := newFake(sp, clock, 9)
			arms := sp.Arms()
			wrong := sp.ArmName(arms[len(arms)/2])
			f.times[wrong] = 1 // by far the fastest, and wrong
			f.wrong[wrong] = true
			broken := sp.ArmName(arms[1])
			f.broken[broken] = true
			res := Search(context.Background(), f, task(t, family), Options{Clock: clock}, 0)
			require.NotNil(t, res.Best)
			require.NotEqual(t, wrong, res.Best.Name)
			if family == "attn_decode" {
				require.Equal(t, f.argmin(), res.Best.Name, "exhaustive: the fastest correct arm")
			}
			failed := map[string]string{}
			for _, a := range res.Failures() {
				failed[a.Name] = a.Reason
			}
			require.Contains(t, failed[wrong], "above tolerance")
			require.Contains(t, failed[broken], "compile")
			require.Zero(t, f.measured[broken])
			e, err := res.Entry("2026-12-02", "test", 13000)
			require.NoError(t, err)
			require.NotEqual(t, wrong, e.ArmName)
			names := []string{}
			for _, fl := range e.Failed {
				names = append(names, fl.ArmName)
			}
			require.Contains(t, names, wrong)
			require.Contains(t, names, broken)
		})
	}
}

func TestAllArmsWrong(t *testing.T) {
	clock := &fakeClock{}
	sp := space(t, "attn_prefill")
	f := newFake(sp, clock, 1)
	for n := range f.times {
		f.wrong[n] = true
	}
	res := Search(context.Background(), f, task(t, "attn_prefill"), Options{Clock: clock}, 0)
	require.Nil(t, res.Best)
	require.Len(t, res.Failures(), sp.Size())
	_, err := res.Entry("d", "v", 1)
	require.ErrorIs(t, err, ErrNoArm)
}

func TestCancel(t *testing.T) {
	clock := &fakeClock{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := newFake(space(t, "rmsnorm"), clock, 1)
	res, err := Tune(ctx, f, []Task{task(t, "rmsnorm"), task(t, "swiglu")}, Options{Clock: clock})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, res, 1)
	require.Nil(t, res[0].Best)
}

func TestPlan(t *testing.T) {
	o := Options{}.withDefaults()
	tests := []struct {
		n        int
		strategy string
		reps     []int
	}{
		{5, "exhaustive", []int{20}},
		{24, "exhaustive", []int{20}},
		{100, "halving", []int{3, 9, 20, 20, 20}}, // 100 → 34 → 12 → 4 → final 2
		{25, "halving", []int{3, 9, 20}},          // 25 → 9 → 3
	}
	for _, tc := range tests {
		s, reps, _ := plan(tc.n, o)
		require.Equal(t, tc.strategy, s, tc.n)
		require.Equal(t, tc.reps, reps, tc.n)
	}
}

// TestLargeSpaceWithinBudget: a space whose compilations alone outlast the
// budget (the GEMV space: hundreds of arms at ~50 ms of NVRTC each) still
// gets its default and a spread of arms measured, because arms are compiled
// a few at a time between measurements, in a shuffled order.
func TestLargeSpaceWithinBudget(t *testing.T) {
	clock := &fakeClock{}
	tk := task(t, "gemv")
	f := newFake(tk.Space, clock, 1)
	f.compile = 50 * time.Millisecond
	require.Greater(t, len(f.times), 200)
	res := Search(context.Background(), f, tk, Options{Clock: clock}, 2*time.Second)
	require.True(t, res.OutOfTime)
	require.NotNil(t, res.Default, "the default is measured first")
	require.NotNil(t, res.Best)
	require.GreaterOrEqual(t, res.Tried, 10)
	threads := map[int]bool{}
	for _, a := range res.Arms {
		if a.Round >= 0 {
			threads[a.Arm["threads"]] = true
		}
	}
	require.GreaterOrEqual(t, len(threads), 3, "measured arms spread over the space")
	// the same task sweeps in the same order
	clock2 := &fakeClock{}
	f2 := newFake(tk.Space, clock2, 1)
	f2.compile = f.compile
	res2 := Search(context.Background(), f2, tk, Options{Clock: clock2}, 2*time.Second)
	require.Equal(t, res.Best.Name, res2.Best.Name)
}

// TestSharesHoldAcrossTasks: where a chunk of arms costs more than a
// task's share (NVRTC compiles and measurements of ~0.2 s an arm, many
// tasks), the chunks shrink to what a share holds and no task starts a
// chunk it cannot finish, so the last tasks still try several arms instead
// of their default alone, and the sweep ends near its budget.
func TestSharesHoldAcrossTasks(t *testing.T) {
	clock := &fakeClock{}
	sp := space(t, "gemv")
	f := newFake(sp, clock, 5)
	f.overhead = 20 * time.Millisecond
	f.compile = 200 * time.Millisecond
	var tasks []Task
	for i := range 10 {
		tasks = append(tasks, Task{Family: "gemv", Class: fmt.Sprintf("c%d", i), Space: sp})
	}
	budget := 25 * time.Second
	res, err := Tune(context.Background(), f, tasks, Options{Clock: clock, Budget: budget})
	require.NoError(t, err)
	for _, r := range res {
		require.GreaterOrEqual(t, r.Tried, 4, "%s tried %d arms", r.Task.ID(), r.Tried)
	}
	require.LessOrEqual(t, clock.Now().Sub(time.Time{}), budget+time.Second)
}
