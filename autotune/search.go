package autotune

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"
)

// Tune searches every task in order and returns one Result per task. The
// budget is shared: each task gets an equal share of what is left when it
// starts, so time one task does not use passes to the next. A task that runs
// out of time still returns the best arm measured so far; a task that starts
// with none left measures its default arm only. The arms compiled and
// measured together are fewer where the tasks so far say a share holds
// fewer of them, and a task stops before a chunk of arms that would end
// past its share, so that early tasks do not overrun theirs and starve the
// last ones. Cancelling ctx stops the search between measurements; the
// results so far are returned with ctx's error.
func Tune(ctx context.Context, r Runner, tasks []Task, o Options) ([]Result, error) {
	o = o.withDefaults()
	start := o.Clock.Now()
	var out []Result
	var spent time.Duration // on the arms tried so far
	tried := 0
	for i, t := range tasks {
		var deadline time.Time
		chunk := 2 * o.Parallel
		if o.Budget > 0 {
			left := o.Budget - o.Clock.Now().Sub(start)
			share := left / time.Duration(len(tasks)-i)
			deadline = o.Clock.Now().Add(share)
			if tried > 0 && spent > 0 {
				per := spent / time.Duration(tried)
				chunk = max(min(chunk, int(share/per)), 1)
			}
		}
		t0 := o.Clock.Now()
		res := search(ctx, r, t, o, deadline, chunk)
		spent += o.Clock.Now().Sub(t0)
		tried += res.Tried
		out = append(out, res)
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Search tunes one task within budget (0: no limit).
func Search(ctx context.Context, r Runner, t Task, o Options, budget time.Duration) Result {
	o = o.withDefaults()
	var deadline time.Time
	if budget > 0 {
		deadline = o.Clock.Now().Add(budget)
	}
	return search(ctx, r, t, o, deadline, 2*o.Parallel)
}

// candidates returns the default arm followed by every other arm of the space.
func candidates(t Task) []*ArmResult {
	def := t.Space.Default
	out := []*ArmResult{{Arm: def, Name: t.Space.ArmName(def), Round: -1}}
	for _, p := range t.Space.Arms() {
		if !p.Equal(def) {
			out = append(out, &ArmResult{Arm: p, Name: t.Space.ArmName(p), Round: -1})
		}
	}
	return out
}

// plan returns the samples per round: one round of o.Reps when the space is
// small enough to sweep, else successive halving from o.MinReps up by Eta
// until a round keeps at most Eta arms, which is measured with o.Reps.
func plan(n int, o Options) (strategy string, reps []int, measurements int) {
	if n <= o.ExhaustiveMax {
		return "exhaustive", []int{o.Reps}, n
	}
	k, rep := n, o.MinReps
	for {
		if k <= o.Eta {
			return "halving", append(reps, o.Reps), measurements + k
		}
		reps = append(reps, min(rep, o.Reps))
		measurements += k
		k = (k + o.Eta - 1) / o.Eta
		rep *= o.Eta
	}
}

// search tunes t until deadline (zero: none), compiling chunk arms at a
// time between measurements.
func search(ctx context.Context, r Runner, t Task, o Options, deadline time.Time, chunk int) Result {
	arms := candidates(t)
	strategy, reps, planned := plan(len(arms), o)
	res := Result{Task: t, Strategy: strategy}
	if o.Observer != nil {
		o.Observer.Start(t, strategy, planned)
	}
	expired := func() bool { return !deadline.IsZero() && !o.Clock.Now().Before(deadline) }
	var best *ArmResult
	pool := sweepOrder(t, arms) // arms entering the current round
	for round, n := range reps {
		complete := true
		// compile a few arms, measure them, go on: a space too large for the
		// budget still gets the default and a spread of arms measured
		var chunkAt time.Time // when the round's current chunk started
		for i, a := range pool {
			// the default is measured even past the deadline: every task
			// reports the baseline its tunedb entry is compared with
			first := round == 0 && i == 0
			if i%chunk == 0 && i > 0 {
				took := o.Clock.Now().Sub(chunkAt) // the last whole chunk
				if !deadline.IsZero() && o.Clock.Now().Add(took).After(deadline) {
					// the next chunk would end past the deadline: stop here
					complete, res.OutOfTime = false, ctx.Err() == nil
					break
				}
			}
			if i%chunk == 0 {
				chunkAt = o.Clock.Now()
			}
			if i%chunk == 0 && ctx.Err() == nil && (first || !expired()) {
				end := min(i+chunk, len(pool))
				if expired() {
					end = i + 1
				}
				compileAll(r, t, pool[i:end], o.Parallel)
			}
			if a.Failed {
				continue
			}
			if ctx.Err() != nil || (expired() && !first) {
				complete, res.OutOfTime = false, ctx.Err() == nil
				break
			}
			m, err := r.Measure(t, a.Arm, n)
			a.Meas, a.Round = m, round
			switch {
			case err != nil:
				a.Failed, a.Reason = true, err.Error()
			case !m.Pass():
				a.Failed, a.Reason = true, fmt.Sprintf("rel. error %.3g above tolerance %.3g", m.RelErr, m.Tol)
			case best == nil || m.TimeUS < best.Meas.TimeUS || best.Failed:
				best = a
			}
			if o.Observer != nil {
				o.Observer.Measured(t, *a, best)
			}
		}
		ranked := rank(pool)
		if !complete || round == len(reps)-1 {
			break
		}
		keep := (len(ranked) + o.Eta - 1) / o.Eta
		if round+1 == len(reps)-1 {
			keep = min(keep, o.Eta)
		}
		pool = ranked[:min(keep, len(ranked))]
		if len(pool) == 0 {
			break
		}
	}
	// the final ranking: the arms of the last round entered, by their latest
	// measurement; those never measured in it rank by their earlier one
	final := rank(pool)
	if len(final) > 0 {
		res.Best = final[0]
	}
	if len(final) > 1 {
		res.RunnerUp = final[1]
	}
	for _, a := range arms {
		res.Arms = append(res.Arms, *a)
		if a.Round >= 0 || a.Failed {
			res.Tried++
		}
	}
	if arms[0].Round >= 0 || arms[0].Failed {
		res.Default = &res.Arms[0]
	}
	// Best and RunnerUp point into res.Arms so the result is self-contained
	for i := range res.Arms {
		if res.Best != nil && res.Arms[i].Name == res.Best.Name {
			res.Best = &res.Arms[i]
		}
		if res.RunnerUp != nil && res.Arms[i].Name == res.RunnerUp.Name {
			res.RunnerUp = &res.Arms[i]
		}
	}
	if o.Observer != nil {
		o.Observer.Done(res)
	}
	return res
}

// sweepOrder is the order the first round measures arms in: the default
// first, the rest shuffled by a seed of the task's ID, so that a round the
// budget cuts short has sampled the whole space rather than one corner of
// its enumeration order. It is the same for the same task on every run.
func sweepOrder(t Task, arms []*ArmResult) []*ArmResult {
	out := slices.Clone(arms)
	h := fnv.New64a()
	h.Write([]byte(t.ID()))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x6d656d7261))
	rest := out[1:]
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return out
}

// rank returns the measured, passing arms of pool, fastest first (ties by
// name, for a stable order).
func rank(pool []*ArmResult) []*ArmResult {
	var ok []*ArmResult
	for _, a := range pool {
		if !a.Failed && a.Round >= 0 {
			ok = append(ok, a)
		}
	}
	sort.SliceStable(ok, func(i, j int) bool {
		if ok[i].Meas.TimeUS != ok[j].Meas.TimeUS {
			return ok[i].Meas.TimeUS < ok[j].Meas.TimeUS
		}
		return ok[i].Name < ok[j].Name
	})
	return ok
}

// compileAll compiles the arms of pool not yet failed, parallel workers at a
// time; a compile error marks the arm failed.
func compileAll(r Runner, t Task, pool []*ArmResult, parallel int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, a := range pool {
		if a.Failed {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(a *ArmResult) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.Compile(t, a.Arm); err != nil {
				a.Failed, a.Reason = true, "compile: "+err.Error()
			}
		}(a)
	}
	wg.Wait()
}
