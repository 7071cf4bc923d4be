package cpu

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// team is an executor's workers: threads−1 goroutines started once, beside
// the calling goroutine, which takes part as worker 0. A step runs a few
// hundred parallel sections (every product, every attention), some only
// tens of microseconds long: starting goroutines for each, or waking parked
// ones through the scheduler, cost as much as the work. Workers therefore
// spin on the job counter for a while after each job (spinWindow) before
// they park, and the caller spins the same way for their completion.
type team struct {
	workers int // goroutines besides the caller

	mu  sync.Mutex // one job at a time
	job func(w, lo, hi int)
	n   int
	chk int

	next    atomic.Int64  // the next chunk's start
	seq     atomic.Uint64 // jobs posted; a worker runs each once
	pending atomic.Int32  // workers still in the job
	quit    atomic.Bool

	sleeping []atomic.Bool // worker i parked, waiting on wake[i]
	wake     []chan struct{}
	waiting  atomic.Bool // the caller parked, waiting on done
	done     chan struct{}
	faults   faultCatcher
	stopOnce sync.Once
}

// spinWindow is about how long an idle worker, or a caller waiting for the
// workers, spins before it parks; it reads the clock once every spinEvery
// looks at the counter (a clock read costs more than a look).
const (
	spinWindow = 100 * time.Microsecond
	spinEvery  = 1024
)

func newTeam(workers int) *team {
	t := &team{workers: workers, sleeping: make([]atomic.Bool, workers),
		wake: make([]chan struct{}, workers), done: make(chan struct{}, 1)}
	for i := range workers {
		t.wake[i] = make(chan struct{}, 1)
		go t.work(i)
	}
	return t
}

// stop ends the worker goroutines once they are idle.
func (t *team) stop() {
	t.stopOnce.Do(func() {
		t.quit.Store(true)
		t.seq.Add(1)
		for i := range t.workers {
			if t.sleeping[i].CompareAndSwap(true, false) {
				t.wake[i] <- struct{}{}
			}
		}
	})
}

// run calls f(w, lo, hi) over [0, n) in chunks of chunk, on the caller
// (worker 0) and the team's goroutines (workers 1..), and returns when all
// are done. A memory fault in any worker is raised again in the caller.
func (t *team) run(n, chunk int, f func(w, lo, hi int)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.job, t.n, t.chk = f, n, chunk
	t.next.Store(0)
	t.pending.Store(int32(t.workers))
	t.faults = faultCatcher{}
	t.seq.Add(1)
	for i := range t.workers {
		if t.sleeping[i].CompareAndSwap(true, false) {
			t.wake[i] <- struct{}{}
		}
	}
	t.share(0)
	t.wait()
	t.job = nil
	t.faults.raise()
}

// share takes chunks of the current job until none is left.
func (t *team) share(w int) {
	defer t.faults.catch()
	for {
		lo := int(t.next.Add(int64(t.chk))) - t.chk
		if lo >= t.n {
			return
		}
		t.job(w, lo, min(lo+t.chk, t.n))
	}
}

// wait returns once every worker has finished the current job.
func (t *team) wait() {
	deadline := time.Time{}
	for i := 0; t.pending.Load() > 0; i++ {
		if i%spinEvery != spinEvery-1 {
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(spinWindow)
		} else if now.After(deadline) {
			t.waiting.Store(true)
			if t.pending.Load() == 0 && t.waiting.CompareAndSwap(true, false) {
				return
			}
			<-t.done
			return
		}
	}
}

// work is worker w's loop: run each job posted, then wait for the next.
func (t *team) work(w int) {
	debug.SetPanicOnFault(true)
	var seen uint64 // jobs start at 1; the first may be posted before this runs
	for {
		seen = t.await(w, seen)
		if t.quit.Load() {
			return
		}
		t.share(w + 1)
		if t.pending.Add(-1) == 0 && t.waiting.CompareAndSwap(true, false) {
			t.done <- struct{}{}
		}
	}
}

// await spins, then parks, until a job after seen is posted, and returns
// its number.
func (t *team) await(w int, seen uint64) uint64 {
	deadline := time.Time{}
	for i := 0; ; i++ {
		if s := t.seq.Load(); s != seen {
			return s
		}
		if i%spinEvery != spinEvery-1 {
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(spinWindow)
			continue
		}
		if now.Before(deadline) {
			continue
		}
		t.sleeping[w].Store(true)
		if s := t.seq.Load(); s != seen {
			if !t.sleeping[w].CompareAndSwap(true, false) {
				<-t.wake[w] // the poster saw us parked and sent
			}
			return s
		}
		<-t.wake[w]
		return t.seq.Load()
	}
}
