// Package pipeline runs a model split by layers into stages, each stage on
// its own backend (a GPU each, or the CPU), as one runtime.Backend: pipeline
// parallelism for models that do not fit one device.
//
// Stage 1 holds the embedding and layers [0, k), stage 2 layers [k, n), the
// output norm and the logits (see arch.BuildStage). A step runs the batch
// through stage 1, moves the residual stream (T rows of E float32) across
// the boundary and runs stage 2. A batch of several sequences is split into
// micro-batches, and each stage runs on its own goroutine fed by a channel,
// so stage 1 works on micro-batch 2 while stage 2 works on micro-batch 1.
// Each sequence's KV cache stays in the stage that owns each layer.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/memra-ai/memra/runtime"
)

// Errors of the pipeline.
var (
	// ErrStages: the stages do not form a pipeline (too few, ranges that do
	// not chain, different models).
	ErrStages = errors.New("pipeline: bad stages")
	// ErrBoundary: the hidden states crossing a boundary have the wrong
	// shape or live where the next stage cannot read them.
	ErrBoundary = errors.New("pipeline: bad boundary")
	// ErrClosed: the pipeline was closed.
	ErrClosed = errors.New("pipeline: closed")
)

// Hidden is the residual stream crossing a stage boundary: Rows() rows
// (the tokens of a micro-batch, in batch order) of Width() float32 each.
// Its storage belongs to the stage that produced it (host memory, or device
// memory of the next stage) and stays valid until that stage's next step
// with the same slot.
type Hidden interface {
	Rows() int
	Width() int
}

// HostHidden is a Hidden in host memory, row-major.
type HostHidden struct {
	Data []float32
	E    int
}

// Rows returns len(Data)/E.
func (h HostHidden) Rows() int { return len(h.Data) / max(h.E, 1) }

// Width returns E.
func (h HostHidden) Width() int { return h.E }

// StageInfo describes a stage.
type StageInfo struct {
	First, Last int // the layers [First, Last) the stage holds
	Layers      int // the model's layers
	Width       int // the hidden size E at the boundary
	// Model is the backend-level description (ModelInfo.VocabSize is set
	// only by the last stage).
	Model runtime.ModelInfo
}

// StageBackend runs one stage's graph. A stage is used from one goroutine
// at a time.
type StageBackend interface {
	StageInfo() StageInfo
	// StepStage runs the stage over batch. in holds the hidden states
	// entering the stage, one row per token of batch in order (nil for the
	// first stage, which embeds batch's tokens). slot (0 or 1) names the
	// micro-batch: a stage keeps the out of each slot apart, so the next
	// stage may read slot 0 while this one writes slot 1. A stage that is
	// not the last returns its hidden states out; the last returns, in batch
	// order, the logits after the last token of each entry whose Logits is
	// set (valid until its next StepStage).
	StepStage(ctx context.Context, slot int, batch []runtime.SeqStep, in Hidden) (out Hidden, logits [][]float32, err error)
	// Free drops the stage's KV cache of seq.
	Free(seq runtime.SeqID)
	Close() error
}

// GreedyStage is a last stage that can return the argmax of its logits
// instead of the logits (computed where the logits are).
type GreedyStage interface {
	StepStageGreedy(ctx context.Context, slot int, batch []runtime.SeqStep, in Hidden) ([]int32, error)
}

// Options configure a Pipeline.
type Options struct {
	// MicroBatches is the number of micro-batches a step of several
	// sequences is split into (default 2; 1 runs the stages one after the
	// other on the whole batch).
	MicroBatches int
}

// Pipeline is a runtime.Backend over its stages. Build it with New.
type Pipeline struct {
	stages []StageBackend
	info   runtime.ModelInfo
	micro  int

	mu      sync.Mutex // guards stats
	stats   Stats
	result  [][]float32
	logits  [][]float32 // pipeline-owned copies, per batch entry
	greedy  []int32
	closed  bool
	closeMu sync.Once
}

// greedyPipeline adds runtime.GreedyStepper when the last stage is a
// GreedyStage.
type greedyPipeline struct{ *Pipeline }

var (
	_ runtime.Backend       = (*Pipeline)(nil)
	_ runtime.GreedyStepper = greedyPipeline{}
)

// Stats are the pipeline's cumulative timings.
type Stats struct {
	Steps        int64
	MicroBatches int64
	// StageBusy is each stage's time inside StepStage.
	StageBusy []time.Duration
	// Boundary is the time spent moving hidden states across boundaries, as
	// the stages report it (see BoundaryTimer).
	Boundary time.Duration
}

// BoundaryTimer is implemented by stages that measure their boundary copy
// (device-to-device or host-staged) separately.
type BoundaryTimer interface {
	// BoundaryTime returns the cumulative time spent copying hidden states
	// out of the stage.
	BoundaryTime() time.Duration
}

// New joins stages (at least two, in order) into one backend. The stages'
// layer ranges must chain from 0 to the model's layers. The result
// implements runtime.GreedyStepper when the last stage is a GreedyStage.
func New(stages []StageBackend, opts Options) (runtime.Backend, error) {
	p, err := newPipeline(stages, opts)
	if err != nil {
		return nil, err
	}
	if _, ok := stages[len(stages)-1].(GreedyStage); ok {
		return greedyPipeline{p}, nil
	}
	return p, nil
}

func newPipeline(stages []StageBackend, opts Options) (*Pipeline, error) {
	if len(stages) < 2 {
		return nil, fmt.Errorf("%w: %d stages, want at least 2", ErrStages, len(stages))
	}
	next := 0
	var first StageInfo
	for i, s := range stages {
		si := s.StageInfo()
		if i == 0 {
			first = si
		}
		if si.First != next || si.Last <= si.First || si.Layers != first.Layers || si.Width != first.Width {
			return nil, fmt.Errorf("%w: stage %d holds layers [%d,%d) of %d (width %d), want it to start at %d of %d (width %d)",
				ErrStages, i, si.First, si.Last, si.Layers, si.Width, next, first.Layers, first.Width)
		}
		next = si.Last
	}
	if next != first.Layers {
		return nil, fmt.Errorf("%w: the stages end at layer %d of %d", ErrStages, next, first.Layers)
	}
	last := stages[len(stages)-1].StageInfo().Model
	info := last
	info.Device = ""
	for i, s := range stages {
		if i > 0 {
			info.Device += "+"
		}
		info.Device += s.StageInfo().Model.Device
	}
	for _, s := range stages[:len(stages)-1] {
		if mb := s.StageInfo().Model.MaxBatchTokens; mb > 0 && (info.MaxBatchTokens == 0 || mb < info.MaxBatchTokens) {
			info.MaxBatchTokens = mb
		}
	}
	micro := opts.MicroBatches
	if micro <= 0 {
		micro = 2
	}
	micro = min(micro, 2) // stages double-buffer: slots 0 and 1
	return &Pipeline{stages: stages, info: info, micro: micro, stats: Stats{StageBusy: make([]time.Duration, len(stages))}}, nil
}

// Info describes the model; Device lists the stages' devices ("cuda:0+cuda:1").
func (p *Pipeline) Info() runtime.ModelInfo { return p.info }

// Stages returns the stage backends, in order.
func (p *Pipeline) Stages() []StageBackend { return p.stages }

// Stats returns a snapshot of the cumulative timings.
func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.StageBusy = append([]time.Duration(nil), p.stats.StageBusy...)
	s.Boundary = 0
	for _, st := range p.stages {
		if bt, ok := st.(BoundaryTimer); ok {
			s.Boundary += bt.BoundaryTime()
		}
	}
	return s
}

// Free drops seq's KV cache in every stage.
func (p *Pipeline) Free(seq runtime.SeqID) {
	for _, s := range p.stages {
		s.Free(seq)
	}
}

// Close closes every stage and returns their errors joined.
func (p *Pipeline) Close() error {
	var err error
	p.closeMu.Do(func() {
		p.closed = true
		var errs []error
		for i, s := range p.stages {
			if e := s.Close(); e != nil {
				errs = append(errs, fmt.Errorf("stage %d: %w", i, e))
			}
		}
		err = errors.Join(errs...)
	})
	return err
}

// Step runs batch through every stage; see runtime.Backend.
func (p *Pipeline) Step(ctx context.Context, batch []runtime.SeqStep) ([][]float32, error) {
	if err := p.run(ctx, batch, false); err != nil {
		return nil, err
	}
	return p.result, nil
}

// StepGreedy runs batch through every stage and returns the last stage's
// argmaxes; see runtime.GreedyStepper.
func (g greedyPipeline) StepGreedy(ctx context.Context, batch []runtime.SeqStep) ([]int32, error) {
	if err := g.run(ctx, batch, true); err != nil {
		return nil, err
	}
	return g.greedy, nil
}

// Split returns the micro-batches of a batch of n entries: the index
// ranges [lo, hi) of at most parts nearly equal contiguous pieces (the
// first pieces one larger), never empty.
func Split(n, parts int) [][2]int {
	parts = max(min(parts, n), 1)
	var out [][2]int
	lo := 0
	for i := range parts {
		size := n / parts
		if i < n%parts {
			size++
		}
		out = append(out, [2]int{lo, lo + size})
		lo += size
	}
	return out
}

// item is one micro-batch travelling down the pipeline.
type item struct {
	mb  int
	in  Hidden
	err error
}

// run executes batch: one goroutine per stage, connected by channels, each
// taking the micro-batches in order.
func (p *Pipeline) run(ctx context.Context, batch []runtime.SeqStep, greedy bool) error {
	if p.closed {
		return ErrClosed
	}
	if len(batch) == 0 {
		return fmt.Errorf("%w: empty batch", runtime.ErrBackend)
	}
	mbs := Split(len(batch), p.micro)
	p.prepare(len(batch), greedy)
	chans := make([]chan item, len(p.stages)+1)
	for i := range chans {
		chans[i] = make(chan item, len(mbs))
	}
	for mb := range mbs {
		chans[0] <- item{mb: mb}
	}
	close(chans[0])
	busy := make([]time.Duration, len(p.stages))
	for i, st := range p.stages {
		last := i == len(p.stages)-1
		go func() {
			defer close(chans[i+1])
			for it := range chans[i] {
				if it.err == nil {
					it.err = ctx.Err()
				}
				if it.err != nil {
					chans[i+1] <- it
					continue
				}
				r := mbs[it.mb]
				sub := batch[r[0]:r[1]]
				t0 := time.Now()
				out, err := p.stepStage(ctx, st, i, it.mb, sub, it.in, last, greedy, r[0])
				busy[i] += time.Since(t0)
				if err != nil {
					err = fmt.Errorf("stage %d, micro-batch %d: %w", i, it.mb, err)
				}
				chans[i+1] <- item{mb: it.mb, in: out, err: err}
			}
		}()
	}
	var errs []error
	for it := range chans[len(p.stages)] {
		if it.err != nil {
			errs = append(errs, it.err)
		}
	}
	p.mu.Lock()
	p.stats.Steps++
	p.stats.MicroBatches += int64(len(mbs))
	for i, d := range busy {
		p.stats.StageBusy[i] += d
	}
	p.mu.Unlock()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// prepare sizes the result slices for a batch of n entries.
func (p *Pipeline) prepare(n int, greedy bool) {
	p.result = p.result[:0]
	p.greedy = p.greedy[:0]
	for range n {
		p.result = append(p.result, nil)
		p.greedy = append(p.greedy, -1)
	}
	for len(p.logits) < n {
		p.logits = append(p.logits, nil)
	}
}

// stepStage runs one micro-batch on stage i; the last stage's logits are
// copied into pipeline-owned rows at once, since the stage reuses its
// buffers for the next micro-batch.
func (p *Pipeline) stepStage(ctx context.Context, st StageBackend, i, mb int, sub []runtime.SeqStep, in Hidden,
	last, greedy bool, base int) (Hidden, error) {
	slot := mb % 2
	if !last {
		out, _, err := st.StepStage(ctx, slot, sub, in)
		if err != nil {
			return nil, err
		}
		if out == nil || out.Width() != p.stages[0].StageInfo().Width {
			return nil, fmt.Errorf("%w: stage %d returned no hidden states of width %d", ErrBoundary, i, p.stages[0].StageInfo().Width)
		}
		return out, nil
	}
	if greedy {
		ids, err := st.(GreedyStage).StepStageGreedy(ctx, slot, sub, in)
		if err != nil {
			return nil, err
		}
		copy(p.greedy[base:base+len(sub)], ids)
		return nil, nil
	}
	_, logits, err := st.StepStage(ctx, slot, sub, in)
	if err != nil {
		return nil, err
	}
	for j, l := range logits {
		if l == nil {
			continue
		}
		dst := p.logits[base+j]
		if cap(dst) < len(l) {
			dst = make([]float32, len(l))
		}
		dst = dst[:len(l)]
		copy(dst, l)
		p.logits[base+j] = dst
		p.result[base+j] = dst
	}
	return nil, nil
}
