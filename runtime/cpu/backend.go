// Package cpu is memra's reference executor: every IR op in plain Go,
// float32 math with float64 accumulation where it matters (norms, softmax),
// matrix products reading the stored (possibly quantised) weight rows
// directly. It is the spec every generated GPU kernel is checked against,
// and a working backend for small models.
package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

// Errors returned by the executor, wrapped with context.
var (
	// ErrBatch: a Step's batch is malformed (empty entry, repeated sequence,
	// position past the cached length, too many sequences).
	ErrBatch = errors.New("cpu: bad batch")
	// ErrToken: a token id is outside the vocabulary.
	ErrToken = errors.New("cpu: token id out of range")
	// ErrContext: a sequence would grow past the model's context length.
	ErrContext = errors.New("cpu: context length exceeded")
	// ErrWeight: a tensor cannot be read or has an unsupported type.
	ErrWeight = errors.New("cpu: bad weight")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("cpu: backend closed")
)

// Options configure a Backend.
type Options struct {
	// Threads is the number of goroutines products and attention use;
	// 0 means runtime.NumCPU().
	Threads int
	// MaxSeqs bounds the sequences holding a KV cache at once; 0 means no bound.
	MaxSeqs int
}

// Source gives the executor a model's tensors by GGUF name: their type and
// ne-order shape, and their stored bytes.
type Source interface {
	arch.Weights
	Data(name string) ([]byte, error)
}

// Backend runs a model on the CPU. It implements runtime.Backend.
type Backend struct {
	hp     ir.HParams
	info   runtime.ModelInfo
	opts   Options
	e      *exec
	seqs   map[runtime.SeqID]*kvCache
	tokens *ir.Node
	pos    *ir.Node
	hidden *ir.Node // hidden_in of a pipeline stage after the first, else nil
	result [][]float32
	closed bool
}

var _ runtime.Backend = (*Backend)(nil)

// NewFromSource builds the graph of the model hp describes with ir/arch, runs
// the standard passes (verifying after each) and prepares an executor over
// the tensors of src. Weight bytes are used in place; only 1-D weights
// (norms, biases) are converted to float32.
func NewFromSource(hp ir.HParams, src Source, opts Options) (*Backend, error) {
	return newBackend(hp, src, 0, hp.Layers, opts)
}

// newBackend prepares the executor of the pipeline stage of layers
// [first, last) (the whole model for 0, hp.Layers).
func newBackend(hp ir.HParams, src Source, first, last int, opts Options) (*Backend, error) {
	g, err := arch.BuildStage(hp, src, first, last)
	if err != nil {
		return nil, err
	}
	if err := ir.RunPasses(g, ir.Passes); err != nil {
		return nil, err
	}
	weights := make([]*weight, len(g.Nodes))
	b := &Backend{hp: hp, opts: opts, seqs: map[runtime.SeqID]*kvCache{}}
	for _, n := range g.Nodes {
		switch n.Op {
		case ir.OpWeight:
			w, err := loadWeight(n, src)
			if err != nil {
				return nil, err
			}
			weights[n.ID] = w
		case ir.OpTokens:
			b.tokens = n
		case ir.OpPositions:
			b.pos = n
		case ir.OpHiddenIn:
			b.hidden = n
		}
	}
	if (b.tokens == nil) == (b.hidden == nil) || b.pos == nil {
		return nil, fmt.Errorf("%w: graph has no tokens (or hidden_in) or positions input", ir.ErrVerify)
	}
	b.e = newExec(g, weights, opts.Threads)
	b.info = runtime.ModelInfo{Name: hp.Name, Arch: hp.Arch, ContextLength: hp.ContextLength, Device: "cpu"}
	if out := g.Output(); out != nil {
		b.info.VocabSize = int(out.Shape[1])
	}
	return b, nil
}

// loadWeight checks and wraps the tensor of a weight node.
func loadWeight(n *ir.Node, src Source) (*weight, error) {
	name, t, ne := n.Str("name"), n.DType("type"), n.Ints("ne")
	data, err := src.Data(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWeight, name, err)
	}
	rowBytes, err := t.RowBytes(ne[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWeight, name, err)
	}
	rows := 1
	for _, d := range ne[1:] {
		rows *= d
	}
	if len(data) != rows*rowBytes {
		return nil, fmt.Errorf("%w: %s holds %d bytes, want %d", ErrWeight, name, len(data), rows*rowBytes)
	}
	w := &weight{name: name, t: t, data: data, rows: rows, cols: ne[0], rowBytes: rowBytes}
	probe := make([]float32, ne[0])
	if err := dtype.Dequantize(t, w.row(0), probe); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWeight, name, err)
	}
	if len(ne) == 1 {
		w.vec = probe
	}
	return w, nil
}

// Info describes the model.
func (b *Backend) Info() runtime.ModelInfo { return b.info }

// Graph returns the executed graph (after passes).
func (b *Backend) Graph() *ir.Graph { return b.e.g }

// Step runs one forward pass over batch; see runtime.Backend.
func (b *Backend) Step(ctx context.Context, batch []runtime.SeqStep) ([][]float32, error) {
	if b.hidden != nil || b.e.g.Output() == nil {
		return nil, fmt.Errorf("%w: a pipeline stage steps through StepStage", ErrBatch)
	}
	if err := b.forward(ctx, batch, nil); err != nil {
		return nil, err
	}
	return b.logitsOf(batch), nil
}

// forward runs the graph over batch; hidden is the value of hidden_in (nil
// for a graph that starts from tokens).
func (b *Backend) forward(ctx context.Context, batch []runtime.SeqStep, hidden []float32) error {
	if b.closed {
		return ErrClosed
	}
	if err := b.plan(batch); err != nil {
		return err
	}
	if b.hidden != nil {
		if want := b.e.step.T * int(b.hidden.Shape[1]); len(hidden) != want {
			return fmt.Errorf("%w: %d hidden floats for %d tokens of width %v", ErrBatch, len(hidden), b.e.step.T, b.hidden.Shape[1])
		}
		b.e.f32[b.hidden.ID] = hidden
	}
	st := &b.e.step
	for s, e := range batch {
		st.caches[s].n = e.Pos // truncate; extended below on success
	}
	if err := b.e.run(ctx.Err); err != nil {
		return err
	}
	for s := range batch {
		st.caches[s].n = st.length[s]
	}
	return nil
}

// logitsOf returns the logits rows of the last forward step, in batch order.
func (b *Backend) logitsOf(batch []runtime.SeqStep) [][]float32 {
	logits := b.e.f32[b.e.g.Output().ID]
	V := b.info.VocabSize
	b.result = b.result[:0]
	for s, e := range batch {
		var l []float32
		if e.Logits {
			l = logits[s*V : (s+1)*V : (s+1)*V]
		}
		b.result = append(b.result, l)
	}
	return b.result
}

// plan checks batch and lays out the step: token order, positions, caches.
func (b *Backend) plan(batch []runtime.SeqStep) error {
	if len(batch) == 0 {
		return fmt.Errorf("%w: empty batch", ErrBatch)
	}
	st := &b.e.step
	*st = layout{seqOf: st.seqOf[:0], pos: st.pos[:0], last: st.last[:0], length: st.length[:0], caches: st.caches[:0]}
	var toks []int32
	if b.tokens != nil {
		toks = b.e.i32[b.tokens.ID][:0]
	}
	fresh := 0
	for s, e := range batch {
		if len(e.Tokens) == 0 {
			return fmt.Errorf("%w: sequence %d has no tokens", ErrBatch, e.Seq)
		}
		for _, o := range batch[:s] {
			if o.Seq == e.Seq {
				return fmt.Errorf("%w: sequence %d appears twice", ErrBatch, e.Seq)
			}
		}
		c := b.seqs[e.Seq]
		have := 0
		if c != nil {
			have = c.n
		} else {
			fresh++
		}
		if e.Pos < 0 || e.Pos > have {
			return fmt.Errorf("%w: sequence %d starts at %d but %d positions are cached", ErrBatch, e.Seq, e.Pos, have)
		}
		end := e.Pos + len(e.Tokens)
		if b.hp.ContextLength > 0 && end > b.hp.ContextLength {
			return fmt.Errorf("%w: sequence %d reaches %d positions, context is %d", ErrContext, e.Seq, end, b.hp.ContextLength)
		}
		for i, id := range e.Tokens {
			st.seqOf = append(st.seqOf, s)
			st.pos = append(st.pos, int32(e.Pos+i))
			toks = append(toks, id)
		}
		st.last = append(st.last, len(st.seqOf)-1)
		st.length = append(st.length, end)
	}
	if b.opts.MaxSeqs > 0 && len(b.seqs)+fresh > b.opts.MaxSeqs {
		return fmt.Errorf("%w: %d sequences would exceed the limit of %d", ErrBatch, len(b.seqs)+fresh, b.opts.MaxSeqs)
	}
	for s, e := range batch {
		c := b.seqs[e.Seq]
		if c == nil {
			c = &kvCache{k: make([][]float32, len(b.e.kvRow)), v: make([][]float32, len(b.e.kvRow))}
			b.seqs[e.Seq] = c
		}
		c.reserve(b.e.kvRow, st.length[s])
		st.caches = append(st.caches, c)
	}
	st.T, st.S = len(st.seqOf), len(batch)
	if b.tokens != nil {
		b.e.i32[b.tokens.ID] = toks
	}
	b.e.i32[b.pos.ID] = st.pos
	return nil
}

// reserve grows every layer of c to hold n positions, keeping its contents.
func (c *kvCache) reserve(rows []int, n int) {
	for l, R := range rows {
		if len(c.k[l]) >= n*R {
			continue
		}
		size := max(n, 2*len(c.k[l])/max(R, 1), 16) * R
		k, v := make([]float32, size), make([]float32, size)
		copy(k, c.k[l])
		copy(v, c.v[l])
		c.k[l], c.v[l] = k, v
	}
}

// Free drops the KV cache of seq.
func (b *Backend) Free(seq runtime.SeqID) { delete(b.seqs, seq) }

// Close releases the caches; the backend cannot be used afterwards.
func (b *Backend) Close() error {
	b.closed = true
	b.seqs = nil
	return nil
}
