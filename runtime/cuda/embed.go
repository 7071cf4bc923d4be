package cuda

import (
	"context"
	"fmt"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
)

// Embeddings on the GPU (BackendOptions.Embedding): a third program, the
// prefill-class lowering of the model without its head
// (arch.BuildHidden), runs over the backend's weights, KV pool and arena.
// Its last buffer is the residual stream of every token after the last
// layer (hidden_out); after each launch sequence the rows a sequence's
// pooling reads are copied to the host, where runtime.HiddenPooler
// applies the final norm, pools and normalises, as the CPU backend does.
// Its products are the prefill program's kernels, so where the prefill
// products run on cuBLASLt so do these (sameProducts).

var _ runtime.Embedder = (*Backend)(nil)

// embedState is the backend's embedding program.
type embedState struct {
	ps     *progState
	blas   map[int]*blasProduct // its products that run on cuBLASLt, by kernel index
	pooler runtime.HiddenPooler
	width  int
}

// lowerHidden lowers the headless graph of m as a prefill-class program
// with opts (filled), and returns the final norm the host applies.
func lowerHidden(m *load.Model, opts BackendOptions) (*codegen.Program, arch.FinalNorm, error) {
	var fn arch.FinalNorm
	g, o, err := buildGraph(m, &opts, func() (g *ir.Graph, err error) {
		g, fn, err = arch.BuildHidden(m.HParams, m)
		return g, err
	})
	if err != nil {
		return nil, fn, err
	}
	o.Class, o.MaxTokens = codegen.Prefill, opts.PrefillTokens
	p, err := codegen.Lower(g, o)
	if err != nil {
		return nil, fn, fmt.Errorf("the embedding program: %w", err)
	}
	if p.HiddenOut < 0 {
		return nil, fn, fmt.Errorf("%w: the embedding program has no hidden_out buffer", codegen.ErrLower)
	}
	return p, fn, nil
}

// newEmbedState lowers the embedding program and reads the final norm.
func newEmbedState(m *load.Model, opts BackendOptions) (*embedState, error) {
	p, fn, err := lowerHidden(m, opts)
	if err != nil {
		return nil, err
	}
	E := m.HParams.Embedding
	t, ok := m.Tensors[fn.Weight]
	if !ok || len(t.Shape) != 1 || t.Shape[0] != E {
		return nil, fmt.Errorf("%w: the final norm %s is missing or not [%d]", ErrWeight, fn.Weight, E)
	}
	data, err := tensor(m, fn.Weight, t.Type, []int{E})
	if err != nil {
		return nil, err
	}
	norm := make([]float32, E)
	if err := dtype.Dequantize(t.Type, data, norm); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWeight, fn.Weight, err)
	}
	return &embedState{ps: &progState{p: p}, pooler: runtime.HiddenPooler{Norm: norm, Eps: fn.Eps}, width: E}, nil
}

// programs returns the programs the backend loads: decode, prefill and,
// with embeddings, the embedding program.
func (b *Backend) programs() []*codegen.Program {
	var ps []*codegen.Program
	for _, s := range b.states() {
		ps = append(ps, s.p)
	}
	return ps
}

// states returns the programs' device states, in programs' order.
func (b *Backend) states() []*progState {
	ps := []*progState{b.progs[0], b.progs[1]}
	if b.emb != nil {
		ps = append(ps, b.emb.ps)
	}
	if b.one != nil {
		ps = append(ps, b.one)
	}
	return ps
}

// sameProducts maps each kernel of emb that is a kernel of pre with a
// cuBLASLt replacement in prods (by pre's kernel index) to that
// replacement, by emb's kernel index. A kernel's name says everything its
// source specialises on, so equal names are the same product.
func sameProducts(pre, emb *codegen.Program, prods map[int]*blasProduct) map[int]*blasProduct {
	byName := map[string]*blasProduct{}
	for i, bp := range prods {
		byName[pre.Kernels[i].Name] = bp
	}
	out := map[int]*blasProduct{}
	for i, k := range emb.Kernels {
		if bp := byName[k.Name]; bp != nil {
			out[i] = bp
		}
	}
	return out
}

// EmbedWidth returns the hidden size when the backend was built with
// BackendOptions.Embedding, else 0 (runtime.Embedder).
func (b *Backend) EmbedWidth() int {
	if b.emb == nil {
		return 0
	}
	return b.emb.width
}

// Embed runs every entry's tokens from position 0 through the embedding
// program, in as few launch sequences as the program's sizes allow
// (a long input in chunks), copies the rows each pooling reads to the
// host and pools them there (runtime.Embedder).
func (b *Backend) Embed(ctx context.Context, batch []runtime.EmbedStep, pool runtime.Pooling) ([][]float32, error) {
	if b.emb == nil {
		return nil, fmt.Errorf("%w: the backend was not built for embeddings", runtime.ErrNotEmbedding)
	}
	steps := make([]runtime.SeqStep, len(batch))
	for i, e := range batch {
		steps[i] = runtime.SeqStep{Seq: e.Seq, Tokens: e.Tokens, Pages: e.Pages}
	}
	if err := b.check(steps); err != nil {
		return nil, err
	}
	if b.pipe.count > 0 {
		return nil, fmt.Errorf("%w: embeddings while %d launched steps wait for Collect", ErrBatch, b.pipe.count)
	}
	tables := make([][]int32, len(batch))
	need := make([][2]int, len(batch))
	rows := make([][]float32, len(batch)) // per entry: the rows its pooling reads, one after another
	E := b.emb.width
	for i, e := range batch {
		tables[i] = e.Pages
		if tables[i] == nil {
			pt, err := b.own.Grow(uint64(e.Seq), len(e.Tokens))
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBatch, err)
			}
			tables[i] = pt
		}
		lo, hi := pool.Rows(len(e.Tokens))
		need[i] = [2]int{lo, hi}
		rows[i] = make([]float32, (hi-lo)*E)
	}
	for _, cur := range splitPieces(steps, tables, b.opts.PrefillTokens, b.opts.MaxSeqs) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := b.runEmbed(cur, embedCopies(cur, need), rows); err != nil {
			return nil, err
		}
	}
	out := make([][]float32, len(batch))
	for i, e := range batch {
		if e.Pages == nil {
			b.own.Commit(uint64(e.Seq), len(e.Tokens))
		}
		lo, hi := need[i][0], need[i][1]
		rs := make([][]float32, hi-lo)
		for r := range rs {
			rs[r] = rows[i][r*E : (r+1)*E]
		}
		out[i] = b.emb.pooler.Pool(rs, pool)
	}
	return out, nil
}

// splitPieces cuts batch into launch sequences of at most maxTokens tokens
// and maxSeqs pieces, in order: a sequence longer than the room left goes
// on in the next launch sequence from where it stopped.
func splitPieces(batch []runtime.SeqStep, tables [][]int32, maxTokens, maxSeqs int) [][]piece {
	var out [][]piece
	var cur []piece
	curT := 0
	for i, e := range batch {
		toks, pos := e.Tokens, e.Pos
		for len(toks) > 0 {
			if curT == maxTokens || len(cur) == maxSeqs {
				out = append(out, cur)
				cur, curT = nil, 0
			}
			n := min(len(toks), maxTokens-curT)
			cur = append(cur, piece{entry: i, pages: tables[i], pos: pos, tokens: toks[:n], logits: e.Logits && n == len(toks)})
			pos, toks, curT = pos+n, toks[n:], curT+n
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// rowCopy is a run of hidden rows of one launch sequence that an entry's
// pooling reads: n rows from launch row src to the entry's row dst (its
// position less the first position the pooling reads).
type rowCopy struct{ entry, dst, src, n int }

// embedCopies lists the runs of rows of a launch sequence over pieces that
// the poolings read; need[entry] is the entry's [lo, hi) of positions.
func embedCopies(pieces []piece, need [][2]int) []rowCopy {
	var out []rowCopy
	t := 0
	for _, p := range pieces {
		lo, hi := need[p.entry][0], need[p.entry][1]
		a, z := max(lo, p.pos), min(hi, p.pos+len(p.tokens))
		if a < z {
			out = append(out, rowCopy{entry: p.entry, dst: a - lo, src: t + a - p.pos, n: z - a})
		}
		t += len(p.tokens)
	}
	return out
}

// runEmbed executes the embedding program over one launch sequence and
// copies the runs of hidden rows copies names into rows.
func (b *Backend) runEmbed(pieces []piece, copies []rowCopy, rows [][]float32) error {
	ps := b.emb.ps
	T := 0
	for _, p := range pieces {
		T += len(p.tokens)
	}
	S := len(pieces)
	b.fillInputs(pieces, T, S, ps.p.FlashRows)
	E := b.emb.width
	hidden := b.arena + DevicePtr(ps.p.Buffers.Buffers[ps.p.HiddenOut].Offset)
	return b.dev.Do(func(c *Ctx) error {
		if err := b.uploadInputs(c, ps, nil); err != nil {
			return err
		}
		if err := b.launchStep(c, ps, 0, T, S); err != nil {
			return err
		}
		if err := c.StreamSync(b.stream); err != nil {
			return err
		}
		for _, cp := range copies {
			dst := rows[cp.entry][cp.dst*E : (cp.dst+cp.n)*E]
			if err := c.CopyDtoH(f32AsBytes(dst), hidden+DevicePtr(cp.src*E*4)); err != nil {
				return err
			}
		}
		return nil
	})
}
