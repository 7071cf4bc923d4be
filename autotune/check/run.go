package check

import (
	"fmt"

	"github.com/memra-ai/memra/runtime/cuda"
)

// run is one Launch on the GPU worker thread: its modules, and its buffers
// as sets of copies (set 0 holds the inputs; the others are device copies of
// it for rotation).
type run struct {
	x        *cuda.Ctx
	l        *Launch
	mods     []cuda.Module
	fns      []cuda.Function
	bufs     []*Buf             // distinct buffers, in first-use order
	sets     [][]cuda.DevicePtr // [set][buffer]
	setBytes int64
	index    map[*Buf]int
}

func (r *run) free() {
	for _, set := range r.sets {
		for _, p := range set {
			_ = r.x.Free(p)
		}
	}
	for _, m := range r.mods {
		_ = r.x.UnloadModule(m)
	}
}

func (r *run) load(images [][]byte) error {
	for i, k := range r.l.Kernels {
		m, err := r.x.LoadModule(images[i])
		if err != nil {
			return err
		}
		r.mods = append(r.mods, m)
		f, err := r.x.Function(m, k.Name)
		if err != nil {
			return err
		}
		if g := k.Launch(r.l.Dims); g.SharedOverDefault() {
			if err := r.x.SetMaxDynamicShared(f, int(g.Shared)); err != nil {
				return err
			}
		}
		r.fns = append(r.fns, f)
	}
	return nil
}

// upload allocates set 0 and copies the host buffers into it.
func (r *run) upload() error {
	r.index = map[*Buf]int{}
	for _, args := range r.l.Args {
		for _, a := range args {
			if a.Buf != nil {
				if _, ok := r.index[a.Buf]; !ok {
					r.index[a.Buf] = len(r.bufs)
					r.bufs = append(r.bufs, a.Buf)
					r.setBytes += int64(len(a.Buf.Data))
				}
			}
		}
	}
	set := make([]cuda.DevicePtr, 0, len(r.bufs))
	r.sets = append(r.sets, set)
	for _, bf := range r.bufs {
		p, err := r.x.Alloc(max(len(bf.Data), 4))
		if err != nil {
			return err
		}
		r.sets[0] = append(r.sets[0], p)
		if err := r.x.CopyHtoD(p, bf.Data); err != nil {
			return err
		}
	}
	return nil
}

// addSets makes copies of set 0 until there are n sets.
func (r *run) addSets(n int) error {
	for len(r.sets) < n {
		set := make([]cuda.DevicePtr, 0, len(r.bufs))
		r.sets = append(r.sets, nil)
		for i, bf := range r.bufs {
			p, err := r.x.Alloc(max(len(bf.Data), 4))
			if err != nil {
				return err
			}
			set = append(set, p)
			r.sets[len(r.sets)-1] = set
			if err := r.x.CopyDtoD(p, r.sets[0][i], len(bf.Data)); err != nil {
				return err
			}
		}
	}
	return r.x.Synchronize()
}

// launchSet launches the kernels on buffer set i on stream st.
func (r *run) launchSet(i int, st cuda.Stream) error {
	for k, kern := range r.l.Kernels {
		g := kern.Launch(r.l.Dims)
		vals := make([]any, len(r.l.Args[k]))
		for j, a := range r.l.Args[k] {
			if a.Buf != nil {
				vals[j] = r.sets[i][r.index[a.Buf]]
			} else {
				vals[j] = a.Scalar
			}
		}
		if err := r.x.Launch(r.fns[k], cuda.LaunchConfig{Grid: g.Grid, Block: g.Block, Shared: g.Shared, Stream: st}, vals...); err != nil {
			return fmt.Errorf("%s: %w", kern.Name, err)
		}
	}
	return nil
}

func (r *run) readOuts() ([][]byte, error) {
	outs := make([][]byte, len(r.l.Outs))
	for i, o := range r.l.Outs {
		outs[i] = make([]byte, len(o.Data))
		if err := r.x.CopyDtoH(outs[i], r.sets[0][r.index[o]]); err != nil {
			return nil, err
		}
	}
	return outs, nil
}

// time returns reps samples in µs per launch: each sample replays a graph
// of the launch over rot buffer sets (plain launches if capture fails).
func (r *run) time(rot, reps int) ([]float64, error) {
	if err := r.addSets(rot); err != nil {
		return nil, err
	}
	st, err := r.x.NewStream()
	if err != nil {
		return nil, err
	}
	defer r.x.DestroyStream(st)
	sample := func() error {
		for i := 0; i < rot; i++ {
			if err := r.launchSet(i, st); err != nil {
				return err
			}
		}
		return nil
	}
	if exec, ok := r.capture(st, sample); ok {
		defer r.x.DestroyGraphExec(exec)
		sample = func() error { return r.x.LaunchGraph(exec, st) }
	}
	e0, err := r.x.NewEvent()
	if err != nil {
		return nil, err
	}
	defer r.x.DestroyEvent(e0)
	e1, err := r.x.NewEvent()
	if err != nil {
		return nil, err
	}
	defer r.x.DestroyEvent(e1)
	for range 2 { // warm-up
		if err := sample(); err != nil {
			return nil, err
		}
	}
	out := make([]float64, 0, reps)
	for range reps {
		if err := r.x.Record(e0, st); err != nil {
			return nil, err
		}
		if err := sample(); err != nil {
			return nil, err
		}
		if err := r.x.Record(e1, st); err != nil {
			return nil, err
		}
		if err := r.x.EventSync(e1); err != nil {
			return nil, err
		}
		ms, err := r.x.Elapsed(e0, e1)
		if err != nil {
			return nil, err
		}
		out = append(out, float64(ms)*1000/float64(rot))
	}
	return out, nil
}

// capture records one sample into a CUDA graph; ok is false when capture
// is not possible, and the caller launches directly.
func (r *run) capture(st cuda.Stream, sample func() error) (cuda.GraphExec, bool) {
	if err := r.x.BeginCapture(st); err != nil {
		return 0, false
	}
	serr := sample()
	g, err := r.x.EndCapture(st)
	if serr != nil || err != nil {
		if err == nil {
			_ = r.x.DestroyGraph(g)
		}
		return 0, false
	}
	defer r.x.DestroyGraph(g)
	exec, err := r.x.Instantiate(g)
	if err != nil {
		return 0, false
	}
	return exec, true
}
