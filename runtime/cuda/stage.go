package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/pipeline"
)

// ErrBoundary: the copy across a pipeline stage boundary failed its
// start-up check (the bytes that arrived differ from those sent).
var ErrBoundary = errors.New("cuda: pipeline boundary copy check failed")

// Boundary modes: how a stage's hidden states reach the next stage.
const (
	BoundarySame = "same-device" // both stages on one GPU: a device-to-device copy
	BoundaryPeer = "peer"        // cuMemcpyPeerAsync with peer access enabled
	BoundaryHost = "host"        // staged through host memory (MEMRA_PP_HOST_BOUNCE=1, or no peer access)
)

// DeviceHidden is a pipeline.Hidden in device memory of the stage that
// reads it (written there by the previous stage's boundary copy).
type DeviceHidden struct {
	Ptr      DevicePtr
	RowCount int
	E        int
}

// Rows returns the number of token rows.
func (h DeviceHidden) Rows() int { return h.RowCount }

// Width returns the hidden size.
func (h DeviceHidden) Width() int { return h.E }

// stageIO is a stage backend's side of its boundaries.
type stageIO struct {
	width int
	in    pipeline.Hidden // the running step's input (nil for the first stage)
	slot  int

	// The outgoing boundary (nil next for the last stage).
	next     *Stage
	mode     string
	peer     *peerDriver
	nextCtx  ctxHandle
	bounce   [2][]float32 // host staging of each slot (BoundaryHost)
	copyTime time.Duration

	recv [2]DevicePtr // incoming boundary buffers on this device, per slot
	rows int          // rows each boundary buffer holds
}

// fill queues the copy of T rows of the step's input from row row0 into
// dst (the program's hidden_in buffer).
func (s *stageIO) fill(c *Ctx, st Stream, dst DevicePtr, row0, T int) error {
	E := s.width
	switch in := s.in.(type) {
	case pipeline.HostHidden:
		if (row0+T)*E > len(in.Data) {
			return fmt.Errorf("%w: %d hidden rows for a step of %d tokens", pipeline.ErrBoundary, in.Rows(), row0+T)
		}
		return c.CopyHtoDAsync(dst, f32AsBytes(in.Data[row0*E:(row0+T)*E]), st)
	case DeviceHidden:
		if row0+T > in.RowCount {
			return fmt.Errorf("%w: %d hidden rows for a step of %d tokens", pipeline.ErrBoundary, in.RowCount, row0+T)
		}
		return c.CopyDtoDAsync(dst, in.Ptr+DevicePtr(row0*E*4), T*E*4, st)
	}
	return fmt.Errorf("%w: a stage after the first needs hidden states, got %T", pipeline.ErrBoundary, s.in)
}

// send copies T rows of hidden_out (src) to row row0 of the next stage's
// boundary buffer of the running slot, and waits for the copy.
func (s *stageIO) send(c *Ctx, st Stream, src DevicePtr, row0, T int) error {
	E := s.width
	if row0+T > s.next.io.rows {
		return fmt.Errorf("%w: %d rows exceed the boundary buffer of %d", pipeline.ErrBoundary, row0+T, s.next.io.rows)
	}
	start := time.Now()
	defer func() { s.copyTime += time.Since(start) }()
	n := T * E * 4
	dst := s.next.io.recv[s.slot] + DevicePtr(row0*E*4)
	switch s.mode {
	case BoundarySame:
		if err := c.CopyDtoDAsync(dst, src, n, st); err != nil {
			return err
		}
	case BoundaryPeer:
		if err := c.copyPeerAsync(s.peer, dst, s.nextCtx, src, n, st); err != nil {
			return err
		}
	default:
		return c.CopyDtoH(f32AsBytes(s.bounce[s.slot][row0*E:(row0+T)*E]), src)
	}
	return c.StreamSync(st)
}

// out returns the hidden states the running step sent to the next stage.
func (s *stageIO) out(T int) pipeline.Hidden {
	if s.mode == BoundaryHost {
		return pipeline.HostHidden{Data: s.bounce[s.slot][:T*s.width], E: s.width}
	}
	return DeviceHidden{Ptr: s.next.io.recv[s.slot], RowCount: T, E: s.width}
}

// cacheLayers returns the layers whose KV cache p's launches use, sorted.
func cacheLayers(p *codegen.Program) []int {
	var ls []int
	for _, l := range p.Launches {
		for _, a := range l.Args {
			if (a.Kind == codegen.ArgKCache || a.Kind == codegen.ArgVCache) && !slices.Contains(ls, a.Index) {
				ls = append(ls, a.Index)
			}
		}
	}
	slices.Sort(ls)
	return ls
}

// Stage is one pipeline stage on one GPU: the generated programs of layers
// [first, last), the KV caches of those layers only, and the boundary to
// the next stage. It implements pipeline.StageBackend and GreedyStage.
type Stage struct {
	b                          *Backend
	first, last, layers, width int
	io                         *stageIO
}

var (
	_ pipeline.StageBackend  = (*Stage)(nil)
	_ pipeline.GreedyStage   = (*Stage)(nil)
	_ pipeline.BoundaryTimer = (*Stage)(nil)
)

// NewStages builds one Stage per range of a split of m at the layers
// bounds (the first layer of each stage after the first), stage i on GPU
// devices[i] (an ordinal may repeat: two stages on one GPU), and links
// them. Each boundary copies device to device on one GPU, peer to peer
// where cuDeviceCanAccessPeer allows, else through host memory
// (MEMRA_PP_HOST_BOUNCE=1 forces that); it is checked byte for byte at
// start (a random buffer sent across and read back), and a mismatch
// refuses to start with ErrBoundary.
func NewStages(m *load.Model, bounds, devices []int, opts BackendOptions) ([]pipeline.StageBackend, error) {
	if len(devices) != len(bounds)+1 {
		return nil, fmt.Errorf("%w: %d stages on %d devices", ErrArg, len(bounds)+1, len(devices))
	}
	var stages []*Stage
	closeAll := func(err error) ([]pipeline.StageBackend, error) {
		for _, s := range stages {
			err = errors.Join(err, s.Close())
		}
		return nil, err
	}
	first := 0
	for i := 0; i <= len(bounds); i++ {
		last := m.HParams.Layers
		if i < len(bounds) {
			last = bounds[i]
		}
		o := opts
		o.Device = devices[i]
		b, err := newBackend(m, o, first, last)
		if err != nil {
			return closeAll(fmt.Errorf("stage %d (layers %d..%d, cuda:%d): %w", i, first, last, devices[i], err))
		}
		b.stage = &stageIO{width: m.HParams.Embedding}
		stages = append(stages, &Stage{b: b, first: first, last: last, layers: m.HParams.Layers, width: m.HParams.Embedding, io: b.stage})
		first = last
	}
	force := os.Getenv("MEMRA_PP_HOST_BOUNCE") == "1"
	for i := 0; i+1 < len(stages); i++ {
		if err := link(stages[i], stages[i+1], force); err != nil {
			return closeAll(fmt.Errorf("boundary %d→%d: %w", i, i+1, err))
		}
		if opts.Logf != nil {
			opts.Logf("pipeline: boundary %d→%d (cuda:%d→cuda:%d) copies %s, checked byte for byte", i, i+1,
				devices[i], devices[i+1], stages[i].io.mode)
		}
	}
	out := make([]pipeline.StageBackend, len(stages))
	for i, s := range stages {
		out[i] = s
	}
	return out, nil
}

// link allocates the receiver's boundary buffers, picks the copy mode and
// checks it with a random buffer.
func link(from, to *Stage, forceHost bool) error {
	rows := from.b.inCap
	n := rows * from.width * 4
	var toCtx ctxHandle
	err := to.b.dev.Do(func(c *Ctx) error {
		toCtx = c.handle()
		for slot := range to.io.recv {
			p, err := to.b.alloc(c, n)
			if err != nil {
				return err
			}
			to.io.recv[slot] = p
		}
		to.io.rows = rows
		return nil
	})
	if err != nil {
		return err
	}
	io := from.io
	io.next, io.nextCtx = to, toCtx
	sameDev := from.b.opts.Device == to.b.opts.Device
	switch {
	case forceHost:
		io.mode = BoundaryHost
	case sameDev:
		io.mode = BoundarySame
	default:
		io.mode = BoundaryHost
		if p, err := loadPeer(); err == nil {
			io.peer = p
			err = from.b.dev.Do(func(c *Ctx) error {
				ok, err := c.canAccessPeer(p, toCtx)
				if err != nil || !ok {
					return err
				}
				if err := c.enablePeerAccess(p, toCtx); err != nil {
					return err
				}
				io.mode = BoundaryPeer
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	if io.mode == BoundaryHost {
		for slot := range io.bounce {
			io.bounce[slot] = make([]float32, rows*from.width)
		}
	}
	return checkBoundary(from, to, n)
}

// checkBoundary sends a random buffer of n bytes across the boundary, into
// each receiving slot, reads it back and compares.
func checkBoundary(from, to *Stage, n int) error {
	want := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 0x9e3779b97f4a7c15))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	rows := n / (4 * from.width)
	io := from.io
	for slot := range to.io.recv {
		io.slot = slot
		err := from.b.dev.Do(func(c *Ctx) error {
			src, err := c.Alloc(n)
			if err != nil {
				return err
			}
			defer func() { _ = c.Free(src) }()
			if err := c.CopyHtoD(src, want); err != nil {
				return err
			}
			return io.send(c, from.b.stream, src, 0, rows)
		})
		if err != nil {
			return err
		}
		got := make([]byte, n)
		h := io.out(rows)
		err = to.b.dev.Do(func(c *Ctx) error {
			to.io.in = h
			defer func() { to.io.in = nil }()
			dst, err := c.Alloc(n)
			if err != nil {
				return err
			}
			defer func() { _ = c.Free(dst) }()
			if err := to.io.fill(c, to.b.stream, dst, 0, rows); err != nil {
				return err
			}
			if err := c.StreamSync(to.b.stream); err != nil {
				return err
			}
			return c.CopyDtoH(got, dst)
		})
		if err != nil {
			return err
		}
		if i := firstDiff(want, got); i >= 0 {
			return fmt.Errorf("%w: %s copy of %d bytes into slot %d differs first at byte %d (sent %#02x, got %#02x)",
				ErrBoundary, io.mode, n, slot, i, want[i], got[i])
		}
	}
	io.copyTime = 0
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// StageInfo describes the stage.
func (s *Stage) StageInfo() pipeline.StageInfo {
	return pipeline.StageInfo{First: s.first, Last: s.last, Layers: s.layers, Width: s.width, Model: s.b.info}
}

// Backend returns the stage's underlying backend (its programs, memory).
func (s *Stage) Backend() *Backend { return s.b }

// BoundaryMode returns how the stage's hidden states reach the next stage
// ("" for the last stage).
func (s *Stage) BoundaryMode() string { return s.io.mode }

// BoundaryTime returns the cumulative time of the stage's outgoing boundary
// copies (from the end of its launches to the copy's completion).
func (s *Stage) BoundaryTime() time.Duration { return s.io.copyTime }

// begin checks the input of a step and records its slot.
func (s *Stage) begin(slot int, batch []runtime.SeqStep, in pipeline.Hidden) error {
	if slot < 0 || slot >= 2 {
		return fmt.Errorf("%w: micro-batch slot %d", ErrBatch, slot)
	}
	if (s.first == 0) != (in == nil) {
		return fmt.Errorf("%w: stage of layers %d..%d given hidden states %T", pipeline.ErrBoundary, s.first, s.last, in)
	}
	T := 0
	for _, e := range batch {
		T += len(e.Tokens)
	}
	if in != nil && (in.Rows() != T || in.Width() != s.width) {
		return fmt.Errorf("%w: %d×%d hidden states for %d tokens of width %d", pipeline.ErrBoundary, in.Rows(), in.Width(), T, s.width)
	}
	if s.io.next != nil && T > s.io.next.io.rows {
		return fmt.Errorf("%w: %d tokens in a step, the boundary holds %d", ErrBatch, T, s.io.next.io.rows)
	}
	s.io.in, s.io.slot = in, slot
	return nil
}

// StepStage runs the stage; see pipeline.StageBackend.
func (s *Stage) StepStage(ctx context.Context, slot int, batch []runtime.SeqStep, in pipeline.Hidden) (pipeline.Hidden, [][]float32, error) {
	if err := s.begin(slot, batch, in); err != nil {
		return nil, nil, err
	}
	defer func() { s.io.in = nil }()
	if err := s.b.step(ctx, batch, stepLogits); err != nil {
		return nil, nil, err
	}
	if s.io.next != nil {
		return s.io.out(s.b.rowBase), nil, nil
	}
	return nil, s.b.result, nil
}

// StepStageGreedy runs the last stage and returns the argmaxes computed on
// the device; see pipeline.GreedyStage.
func (s *Stage) StepStageGreedy(ctx context.Context, slot int, batch []runtime.SeqStep, in pipeline.Hidden) ([]int32, error) {
	if s.io.next != nil {
		return nil, fmt.Errorf("%w: greedy step of a stage before the last", ErrBatch)
	}
	if err := s.begin(slot, batch, in); err != nil {
		return nil, err
	}
	defer func() { s.io.in = nil }()
	if err := s.b.step(ctx, batch, stepGreedy); err != nil {
		return nil, err
	}
	return s.b.greedy, nil
}

// Free releases seq's KV cache slot in this stage.
func (s *Stage) Free(seq runtime.SeqID) { s.b.Free(seq) }

// Close releases the stage's GPU resources.
func (s *Stage) Close() error { return s.b.Close() }
