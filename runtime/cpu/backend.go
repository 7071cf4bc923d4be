// Package cpu is memra's reference executor: every IR op in plain Go,
// float32 math with float64 accumulation where it matters (norms, softmax),
// matrix products reading the stored (possibly quantised) weight rows
// directly. It is the spec every generated GPU kernel is checked against.
//
// Options.Products = ProductsInt8 makes it the CPU's serving backend
// instead: matrices repacked at load and multiplied with activations
// quantised to int8 (dtype.Packed, vector kernels), a float32 vector
// attention. That is a numerical class of its own, defined to the bit by
// portable Go kernels; the reference (the zero Options) is unchanged.
package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/kv"
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
	// ErrOptions: a setting of the backend is not one it knows.
	ErrOptions = errors.New("cpu: bad option")
)

// Options configure a Backend.
type Options struct {
	// Threads is the number of goroutines products and attention use;
	// 0 means runtime.NumCPU().
	Threads int
	// MaxSeqs bounds the sequences whose pages the backend keeps itself
	// (SeqStep.Pages nil) at once; 0 means no bound.
	MaxSeqs int
	// Context caps the positions of a sequence below the model's context
	// length; 0 means the model's.
	Context int
	// PageSize is the KV page in positions (0: DefaultPageSize).
	PageSize int
	// KVMemory bounds the KV cache in bytes (the pool's pages times their
	// float32 size; pages are allocated on first use); KVFraction, when
	// KVMemory is 0, as a fraction of the machine's memory; with neither,
	// half of it.
	KVMemory   int64
	KVFraction float64
	// Embedding prepares the model for embeddings (runtime.Embedder): a
	// second executor of the graph without its head (arch.BuildHidden)
	// over the same weights and KV pool. A pipeline stage has none.
	Embedding bool
	// Products is the matrix products' numerical class: ProductsExact (the
	// reference, the default) or ProductsInt8.
	Products Products
	// Tiles chooses each int8 product's blocking (the CPU tunedb's arms);
	// nil: every product's kernel takes its most tokens a call and all of
	// a step's tokens at once. The blocking changes no result.
	Tiles TilesFunc
	// Routes, when set, sees every mixture-of-experts routing a step
	// makes: the chosen experts of each of the step's tokens, k a token,
	// in the order of the graph's layers (gpu-parity compares two
	// backends' choices with it). The slice is the callee's.
	Routes func(ids []int32, k int)
}

// DefaultPageSize is the KV page of Options.PageSize 0: the GPU's
// (codegen.DefaultPageSize), so the engine behaves the same on both.
const DefaultPageSize = 16

// maxContexts bounds the default pool: a pool holds at most this many whole
// contexts of pages (memory is allocated on use, so the bound only keeps
// the pool's records small).
const maxContexts = 256

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
	pool   *kv.Pool
	own    *kv.Tables // pages of sequences stepped without SeqStep.Pages
	tokens *ir.Node
	pos    *ir.Node
	hidden *ir.Node // hidden_in of a pipeline stage after the first, else nil
	result [][]float32
	closed bool
	fault  error // the ErrWeightFault that put the backend out of service

	emb    *Backend             // the headless executor of embeddings (embed.go), or nil
	pooler runtime.HiddenPooler // the final norm embeddings apply on the host
}

var _ runtime.PagedBackend = (*Backend)(nil)

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
	b, err := newExecutor(hp, src, g, opts, nil)
	if err != nil {
		return nil, err
	}
	if err := b.newPool(); err != nil {
		return nil, err
	}
	if opts.Embedding && first == 0 && last == hp.Layers {
		if err := b.prepareEmbedding(src); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// newExecutor runs the standard passes on g (verifying after each) and
// prepares an executor of it over the tensors of src, without a KV pool.
// With the int8 products, the weights share packs the executor share
// already made (by tensor name) instead of packing them again.
func newExecutor(hp ir.HParams, src Source, g *ir.Graph, opts Options, share *exec) (*Backend, error) {
	if err := ir.RunPasses(g, ir.Passes); err != nil {
		return nil, err
	}
	weights := make([]*weight, len(g.Nodes))
	b := &Backend{hp: hp, opts: opts}
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
	b.e.routes = opts.Routes
	if opts.Products == ProductsInt8 {
		b.e.fast = true
		b.e.tilesOf = opts.Tiles
		if err := b.e.guarded(func() error { b.e.packWeights(share); return nil }); err != nil {
			return nil, err
		}
	}
	b.info = runtime.ModelInfo{Name: hp.Name, Arch: hp.Arch, ContextLength: hp.ContextLength, Device: "cpu"}
	if out := g.Output(); out != nil {
		b.info.VocabSize = int(out.Shape[1])
	}
	return b, nil
}

// newPool sizes the KV page pool from Options and the model and caps the
// context to what it holds.
func (b *Backend) newPool() error {
	o := b.opts
	size := o.PageSize
	if size == 0 {
		size = DefaultPageSize
	}
	if size < 1 || size > 1024 || size&(size-1) != 0 {
		return fmt.Errorf("%w: KV page size %d (a power of two from 1 to 1024)", ErrBatch, size)
	}
	if o.Context < 0 || o.KVMemory < 0 || o.KVFraction < 0 || o.KVFraction > 1 {
		return fmt.Errorf("%w: context %d, KV memory %d bytes or a fraction %g: want 0 (the default) or more, a fraction at most 1",
			ErrBatch, o.Context, o.KVMemory, o.KVFraction)
	}
	ctx := b.info.ContextLength
	if ctx <= 0 {
		ctx = 4096
	}
	if o.Context > 0 {
		if o.Context > ctx && b.info.ContextLength > 0 {
			return fmt.Errorf("%w: context %d is past the model's %d", ErrContext, o.Context, b.info.ContextLength)
		}
		ctx = o.Context
	}
	pageBytes := int64(0)
	for _, R := range b.e.kvRow {
		pageBytes += 2 * 4 * int64(size) * int64(R)
	}
	perCtx := (ctx + size - 1) / size
	pages := maxContexts * perCtx
	budget := o.KVMemory
	switch {
	case budget > 0:
	case o.KVFraction > 0:
		budget = int64(o.KVFraction * float64(systemMemory()))
	default:
		budget = systemMemory() / 2
	}
	if pageBytes > 0 {
		pages = int(min(int64(pages), budget/pageBytes))
	}
	if pages < 1 {
		return fmt.Errorf("%w: a KV memory of %d bytes holds no page of %d bytes", ErrBatch, budget, pageBytes)
	}
	if pages < perCtx {
		if o.Context > 0 {
			return fmt.Errorf("%w: a KV memory of %d bytes holds %d positions, less than the context of %d", ErrContext, budget, pages*size, ctx)
		}
		ctx = pages * size // a smaller context, not a refusal
	}
	b.info.ContextLength = ctx
	var err error
	if b.pool, err = kv.NewPool(pages, size); err != nil {
		return err
	}
	b.own = kv.NewTables(b.pool)
	b.e.kv = newPagedCache(b.e.kvRow, pages, size)
	return nil
}

// KVPool returns the backend's KV page pool (runtime.PagedBackend).
func (b *Backend) KVPool() *kv.Pool { return b.pool }

// PoisonFreePages fills every free page of the pool with NaN: a step that
// then reads one (a page-table bug) makes NaN logits. Tests call it between
// steps to prove that no sequence reads memory it does not own.
func (b *Backend) PoisonFreePages() { b.e.kv.poison(b.pool.FreePages()) }

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

// Products is the class of the backend's matrix products.
func (b *Backend) Products() Products { return b.opts.Products }

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
	if b.fault != nil {
		return b.fault
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
	if err := b.e.guarded(func() error { return b.e.run(ctx.Err) }); err != nil {
		if errors.Is(err, ErrWeightFault) {
			b.fault = err
		}
		return err
	}
	for s, e := range batch {
		if e.Pages == nil {
			b.own.Commit(uint64(e.Seq), b.e.step.length[s])
		}
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
	*st = layout{seqOf: st.seqOf[:0], pos: st.pos[:0], last: st.last[:0], length: st.length[:0], tables: st.tables[:0]}
	var toks []int32
	if b.tokens != nil {
		toks = b.e.i32[b.tokens.ID][:0]
	}
	fresh := 0
	var stepPages map[int32]bool // pages this step writes, entry by entry
	for s, e := range batch {
		if len(e.Tokens) == 0 {
			return fmt.Errorf("%w: sequence %d has no tokens", ErrBatch, e.Seq)
		}
		for _, o := range batch[:s] {
			if o.Seq == e.Seq {
				return fmt.Errorf("%w: sequence %d appears twice", ErrBatch, e.Seq)
			}
		}
		end := e.Pos + len(e.Tokens)
		if e.Pages == nil {
			have := b.own.Len(uint64(e.Seq))
			if have == 0 {
				fresh++
			}
			if e.Pos < 0 || e.Pos > have {
				return fmt.Errorf("%w: sequence %d starts at %d but %d positions are cached", ErrBatch, e.Seq, e.Pos, have)
			}
		} else {
			if err := b.checkPages(e, stepPages); err != nil {
				return err
			}
			if stepPages == nil {
				stepPages = map[int32]bool{}
			}
			size := b.pool.PageSize()
			for p := e.Pos / size; p*size < end; p++ {
				stepPages[e.Pages[p]] = true
			}
		}
		if end > b.info.ContextLength {
			return fmt.Errorf("%w: sequence %d reaches %d positions, context is %d", ErrContext, e.Seq, end, b.info.ContextLength)
		}
		for i, id := range e.Tokens {
			st.seqOf = append(st.seqOf, s)
			st.pos = append(st.pos, int32(e.Pos+i))
			toks = append(toks, id)
		}
		st.last = append(st.last, len(st.seqOf)-1)
		st.length = append(st.length, end)
	}
	if b.opts.MaxSeqs > 0 && b.own.Seqs()+fresh > b.opts.MaxSeqs {
		return fmt.Errorf("%w: %d sequences would exceed the limit of %d", ErrBatch, b.own.Seqs()+fresh, b.opts.MaxSeqs)
	}
	for s, e := range batch {
		pt := e.Pages
		if pt == nil {
			var err error
			if pt, err = b.own.Grow(uint64(e.Seq), st.length[s]); err != nil {
				return fmt.Errorf("%w: %w", ErrBatch, err)
			}
		}
		st.tables = append(st.tables, pt)
	}
	st.T, st.S = len(st.seqOf), len(batch)
	if b.tokens != nil {
		b.e.i32[b.tokens.ID] = toks
	}
	b.e.i32[b.pos.ID] = st.pos
	return nil
}

// checkPages checks a caller's page table: it covers the step, names pages
// of the pool, and the pages before Pos were written, by an earlier step or
// an earlier entry of this one (in stepPages: a speculating sequence's
// drafts read the keys of the entries before them).
func (b *Backend) checkPages(e runtime.SeqStep, stepPages map[int32]bool) error {
	size := b.pool.PageSize()
	end := e.Pos + len(e.Tokens)
	if e.Pos < 0 || len(e.Pages)*size < end {
		return fmt.Errorf("%w: sequence %d: %d pages of %d positions for positions %d..%d", ErrBatch, e.Seq, len(e.Pages), size, e.Pos, end)
	}
	for i, id := range e.Pages[:b.pool.PagesFor(end)] {
		if id < 0 || int(id) >= b.pool.Pages() {
			return fmt.Errorf("%w: sequence %d: page %d is not in the pool of %d", ErrBatch, e.Seq, id, b.pool.Pages())
		}
		if i*size < e.Pos && !b.e.kv.written(id) && !stepPages[id] {
			return fmt.Errorf("%w: sequence %d starts at %d, but its page %d (positions %d..) was never written", ErrBatch, e.Seq, e.Pos, id, i*size)
		}
	}
	return nil
}

// Free returns the pages the backend kept for seq (SeqStep.Pages nil).
func (b *Backend) Free(seq runtime.SeqID) { b.own.Free(uint64(seq)) }

// Close releases the caches; the backend cannot be used afterwards.
func (b *Backend) Close() error {
	b.closed = true
	b.e.kv = nil
	if b.e.team != nil {
		b.e.team.stop()
	}
	return nil
}
