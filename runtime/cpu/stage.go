package cpu

import (
	"context"
	"fmt"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/pipeline"
)

// Stage runs one pipeline stage of a model on the CPU: the graph of layers
// [first, last) from arch.BuildStage, with the KV caches of those layers.
// It implements pipeline.StageBackend.
type Stage struct {
	b           *Backend
	first, last int
	layers      int
	width       int
	outs        [2][]float32 // hidden_out of each micro-batch slot
}

var _ pipeline.StageBackend = (*Stage)(nil)

// NewStage builds the CPU stage of m holding layers [first, last); m must
// stay open while it runs.
func NewStage(m *load.Model, first, last int, opts Options) (*Stage, error) {
	return NewStageFromSource(m.HParams, modelSource{m}, first, last, opts)
}

// NewStageFromSource builds the CPU stage of the model hp describes holding
// layers [first, last), reading only the tensors that stage uses.
func NewStageFromSource(hp ir.HParams, src Source, first, last int, opts Options) (*Stage, error) {
	b, err := newBackend(hp, src, first, last, opts)
	if err != nil {
		return nil, err
	}
	return &Stage{b: b, first: first, last: last, layers: hp.Layers, width: hp.Embedding}, nil
}

// NewStages builds a CPU stage per range of a split of m at the layers
// bounds (the first layer of every stage after the first).
func NewStages(m *load.Model, bounds []int, opts Options) ([]pipeline.StageBackend, error) {
	var out []pipeline.StageBackend
	first := 0
	for i := 0; i <= len(bounds); i++ {
		last := m.HParams.Layers
		if i < len(bounds) {
			last = bounds[i]
		}
		s, err := NewStage(m, first, last, opts)
		if err != nil {
			for _, o := range out {
				_ = o.Close()
			}
			return nil, fmt.Errorf("stage %d (layers %d..%d): %w", i, first, last, err)
		}
		out = append(out, s)
		first = last
	}
	return out, nil
}

// StageInfo describes the stage.
func (s *Stage) StageInfo() pipeline.StageInfo {
	return pipeline.StageInfo{First: s.first, Last: s.last, Layers: s.layers, Width: s.width, Model: s.b.info}
}

// Graph returns the stage's graph (after passes).
func (s *Stage) Graph() *ir.Graph { return s.b.e.g }

// StepStage runs the stage over batch; see pipeline.StageBackend. The
// hidden states in are read in place (host memory); a stage that is not the
// last copies its hidden_out into the buffer of slot.
func (s *Stage) StepStage(ctx context.Context, slot int, batch []runtime.SeqStep, in pipeline.Hidden) (pipeline.Hidden, [][]float32, error) {
	if slot < 0 || slot >= len(s.outs) {
		return nil, nil, fmt.Errorf("%w: micro-batch slot %d", ErrBatch, slot)
	}
	var hidden []float32
	if s.b.hidden != nil {
		h, ok := in.(pipeline.HostHidden)
		if !ok || h.E != s.width {
			return nil, nil, fmt.Errorf("%w: stage %d..%d wants host hidden states of width %d, got %T", pipeline.ErrBoundary, s.first, s.last, s.width, in)
		}
		hidden = h.Data
	} else if in != nil {
		return nil, nil, fmt.Errorf("%w: the first stage takes tokens, not hidden states", pipeline.ErrBoundary)
	}
	if err := s.b.forward(ctx, batch, hidden); err != nil {
		return nil, nil, err
	}
	res := s.b.e.g.Result()
	if res.Op == ir.OpOutput {
		return nil, s.b.logitsOf(batch), nil
	}
	v := s.b.e.f32[res.ID]
	buf := s.outs[slot]
	if cap(buf) < len(v) {
		buf = make([]float32, len(v), len(v)+len(v)/4)
	}
	buf = buf[:len(v)]
	copy(buf, v)
	s.outs[slot] = buf
	return pipeline.HostHidden{Data: buf, E: s.width}, nil, nil
}

// Free drops the stage's KV cache of seq.
func (s *Stage) Free(seq runtime.SeqID) { s.b.Free(seq) }

// Close releases the stage's caches.
func (s *Stage) Close() error { return s.b.Close() }
