package autotune

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/tunedb"
)

// fakeE2E: a step costs the sum over classes of the picked arm's cost (10
// µs for an arm it has no cost of, or for no pick), times the batch; one
// planted arm corrupts the logits. It records the pickers' choices.
type fakeE2E struct {
	classes []string           // the (gemv) classes of the model
	cost    map[string]float64 // class:arm name → µs
	wrong   string             // class:arm name
	steps   int
	byClass map[string]int // numerical class → steps run in it
}

func (f *fakeE2E) Step(_ context.Context, pick codegen.ArmPicker, batch int, numerics string) (Measurement, error) {
	f.steps++
	if f.byClass == nil {
		f.byClass = map[string]int{}
	}
	f.byClass[numerics]++
	sp, err := codegen.SpaceByName("gemv")
	if err != nil {
		return Measurement{}, err
	}
	m := Measurement{Tol: 1e-3, Samples: 10}
	for _, class := range f.classes {
		key := class + ":default"
		if pick != nil {
			if p, ok := pick("gemv", class); ok {
				key = class + ":" + sp.ArmName(p)
			}
		}
		c, ok := f.cost[key]
		if !ok {
			c = 10
		}
		m.TimeUS += c * float64(batch)
		if key == f.wrong {
			m.RelErr = 0.5
		}
	}
	return m, nil
}

func entry(class string, a codegen.GEMVArm) tunedb.Entry {
	return tunedb.Entry{Family: "gemv", Class: class, Arm: a.Point(), ArmName: a.String()}
}

func TestCompareE2E(t *testing.T) {
	fast := codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1}
	f := &fakeE2E{classes: []string{"a", "b"}, cost: map[string]float64{"a:" + fast.String(): 5}}
	tuned := Overlay(nil, []tunedb.Entry{entry("a", fast)})
	res, err := CompareE2E(context.Background(), f, tuned, nil, []int{1, 4}, "")
	require.NoError(t, err)
	require.Len(t, res, 2)
	for _, r := range res {
		require.True(t, r.TunedPass)
		require.InDelta(t, 20.0/15.0, r.Speedup, 1e-9)
	}
	f.wrong = "a:" + fast.String()
	res, err = CompareE2E(context.Background(), f, tuned, nil, []int{1}, "off")
	require.NoError(t, err)
	require.False(t, res[0].TunedPass, "a wrong step is refused")
	require.Equal(t, "off", res[0].Numerics)
	require.Equal(t, map[string]int{"": 4, "off": 2}, f.byClass, "each step in its comparison's class")
}

// TestOverlay: entries win for their class, the base answers the rest.
func TestOverlay(t *testing.T) {
	a := codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1}
	b := codegen.DefaultGEMVArm
	base := func(family, class string) (codegen.Point, bool) {
		if family == "gemv" && (class == "x" || class == "y") {
			return b.Point(), true
		}
		return nil, false
	}
	pick := Overlay(base, []tunedb.Entry{entry("x", a)})
	p, ok := pick("gemv", "x")
	require.True(t, ok)
	require.Equal(t, a.Point(), p)
	p, ok = pick("gemv", "y")
	require.True(t, ok)
	require.Equal(t, b.Point(), p)
	_, ok = pick("gemv", "z")
	require.False(t, ok)
	_, ok = pick("mma", "x")
	require.False(t, ok, "entries are by family and class")
	_, ok = Overlay(nil, nil)("gemv", "x")
	require.False(t, ok)
}

// TestConfirm: a group that makes steps faster is kept and joins the base
// of the next; one that makes them slower, or within the margin, or wrong,
// is dropped.
func TestConfirm(t *testing.T) {
	fast := codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1}
	slow := codegen.GEMVArm{Threads: 64, RowsPerBlock: 2, Unroll: 1, SharedX: 0}
	f := &fakeE2E{classes: []string{"a", "b", "c", "d"}, cost: map[string]float64{
		"a:" + fast.String(): 5,     // kept: 35 against 40 µs
		"b:" + slow.String(): 20,    // dropped: slower
		"c:" + fast.String(): 9.995, // dropped: within the margin
		"d:" + fast.String(): 1,     // dropped: wrong logits
	}, wrong: "d:" + fast.String()}
	groups := []ConfirmGroup{
		{Name: "one-row a", Batch: 1, Entries: []tunedb.Entry{entry("a", fast)}},
		{Name: "empty", Batch: 1},
		{Name: "one-row b", Batch: 1, Entries: []tunedb.Entry{entry("b", slow)}},
		{Name: "batch c", Batch: 16, Entries: []tunedb.Entry{entry("c", fast)}},
		{Name: "batch d", Batch: 16, Numerics: "off", Entries: []tunedb.Entry{entry("d", fast)}},
	}
	res, err := Confirm(context.Background(), f, nil, groups, time.Time{})
	require.NoError(t, err)
	require.Len(t, res, 4, "the empty group is not measured")
	require.Equal(t, 8, f.steps)
	keep := map[string]bool{}
	for _, c := range res {
		keep[c.Group.Name] = c.Keep
	}
	require.Equal(t, map[string]bool{"one-row a": true, "one-row b": false, "batch c": false, "batch d": false}, keep)
	// the second group's baseline already has the first group's arm
	require.InDelta(t, 35.0, res[1].Result.Baseline.TimeUS, 1e-9)
	require.InDelta(t, 45.0, res[1].Result.Tuned.TimeUS, 1e-9)
	require.False(t, res[3].Result.TunedPass)
	require.Equal(t, "off", res[3].Result.Numerics, "a group is judged in its class")
	require.Equal(t, map[string]int{"": 6, "off": 2}, f.byClass)
}

// TestConfirmStopsAtDeadline: a group is not started once the context is
// done; the verdicts so far come back with the error.
func TestConfirmStopsAtDeadline(t *testing.T) {
	fast := codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1}
	f := &fakeE2E{classes: []string{"a", "b"}, cost: map[string]float64{"a:" + fast.String(): 5, "b:" + fast.String(): 5}}
	ctx, cancel := context.WithCancel(context.Background())
	groups := []ConfirmGroup{
		{Name: "one-row a", Batch: 1, Entries: []tunedb.Entry{entry("a", fast)}},
		{Name: "one-row b", Batch: 1, Entries: []tunedb.Entry{entry("b", fast)}},
	}
	stop := &stopAfter{fakeE2E: f, n: 2, cancel: cancel}
	res, err := Confirm(ctx, stop, nil, groups, time.Time{})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, res, 1)
	require.Equal(t, "one-row a", res[0].Group.Name)
	require.Equal(t, 2, f.steps, "the second group never ran a step")
}

// TestConfirmBudget: a group started before the budget's end runs to its
// end (its steps are not cut), and none starts after it; the verdicts so
// far come back with a deadline error.
func TestConfirmBudget(t *testing.T) {
	fast := codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1}
	f := &fakeE2E{classes: []string{"a", "b"}, cost: map[string]float64{"a:" + fast.String(): 5, "b:" + fast.String(): 5}}
	groups := []ConfirmGroup{
		{Name: "one-row a", Batch: 1, Entries: []tunedb.Entry{entry("a", fast)}},
		{Name: "one-row b", Batch: 1, Entries: []tunedb.Entry{entry("b", fast)}},
	}
	slow := &sleepy{fakeE2E: f, d: 30 * time.Millisecond}
	res, err := Confirm(context.Background(), slow, nil, groups, time.Now().Add(10*time.Millisecond))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "one-row b")
	require.Len(t, res, 1, "the first group ran past the budget's end to its verdict")
	require.True(t, res[0].Keep)
	require.Equal(t, 2, f.steps, "the second group never ran a step")
	res, err = Confirm(context.Background(), slow, nil, groups, time.Now().Add(-time.Second))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, res)
}

// sleepy takes d a step.
type sleepy struct {
	*fakeE2E
	d time.Duration
}

func (s *sleepy) Step(ctx context.Context, pick codegen.ArmPicker, batch int, numerics string) (Measurement, error) {
	time.Sleep(s.d)
	return s.fakeE2E.Step(ctx, pick, batch, numerics)
}

// stopAfter cancels its context after n steps.
type stopAfter struct {
	*fakeE2E
	n      int
	cancel context.CancelFunc
}

func (s *stopAfter) Step(ctx context.Context, pick codegen.ArmPicker, batch int, numerics string) (Measurement, error) {
	m, err := s.fakeE2E.Step(ctx, pick, batch, numerics)
	if s.fakeE2E.steps >= s.n {
		s.cancel()
	}
	return m, err
}
