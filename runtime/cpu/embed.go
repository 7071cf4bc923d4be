package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

var _ runtime.Embedder = (*Backend)(nil)

// prepareEmbedding builds the executor of the model without its head
// (arch.BuildHidden) over b's KV pool and cache, and reads the final
// norm's weight for the host's pooling.
func (b *Backend) prepareEmbedding(src Source) error {
	g, fn, err := arch.BuildHidden(b.hp, src)
	if err != nil {
		return err
	}
	emb, err := newExecutor(b.hp, src, g, b.opts, b.e) // the same weights, packed once
	if err != nil {
		return err
	}
	emb.info, emb.pool, emb.own, emb.e.kv = b.info, b.pool, b.own, b.e.kv
	emb.e.team = b.e.workers() // one team of threads: the engine runs one executor at a time
	t, ne, ok := src.Lookup(fn.Weight)
	if !ok || len(ne) != 1 || ne[0] != b.hp.Embedding {
		return fmt.Errorf("%w: %s: the final norm has shape %v, want [%d]", ErrWeight, fn.Weight, ne, b.hp.Embedding)
	}
	data, err := src.Data(fn.Weight)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrWeight, fn.Weight, err)
	}
	norm := make([]float32, ne[0])
	if err := dtype.Dequantize(t, data, norm); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrWeight, fn.Weight, err)
	}
	b.emb, b.pooler = emb, runtime.HiddenPooler{Norm: norm, Eps: fn.Eps}
	return nil
}

// EmbedWidth returns the hidden size when the backend was built with
// Options.Embedding, else 0 (runtime.Embedder).
func (b *Backend) EmbedWidth() int {
	if b.emb == nil {
		return 0
	}
	return b.hp.Embedding
}

// Embed runs every entry's tokens from position 0 through the model
// without its head, in one forward pass, and pools each sequence's rows
// (runtime.Embedder). Entries without Pages take pages the backend keeps
// until Free, as in Step.
func (b *Backend) Embed(ctx context.Context, batch []runtime.EmbedStep, pool runtime.Pooling) ([][]float32, error) {
	switch {
	case b.emb == nil:
		return nil, fmt.Errorf("%w: the backend was not built for embeddings", runtime.ErrNotEmbedding)
	case b.closed:
		return nil, ErrClosed
	case b.fault != nil:
		return nil, b.fault
	}
	steps := make([]runtime.SeqStep, len(batch))
	for i, e := range batch {
		steps[i] = runtime.SeqStep{Seq: e.Seq, Tokens: e.Tokens, Pages: e.Pages}
	}
	if err := b.emb.forward(ctx, steps, nil); err != nil {
		if errors.Is(err, ErrWeightFault) {
			b.fault = err
		}
		return nil, err
	}
	return b.poolHidden(b.emb.e.f32[b.emb.e.g.Result().ID], batch, pool), nil
}

// poolHidden pools the hidden states [T][E] of a step whose sequences
// are batch's, their tokens one after another.
func (b *Backend) poolHidden(hidden []float32, batch []runtime.EmbedStep, pool runtime.Pooling) [][]float32 {
	E := b.hp.Embedding
	out := make([][]float32, len(batch))
	t0 := 0
	for i, e := range batch {
		lo, hi := pool.Rows(len(e.Tokens))
		rows := make([][]float32, 0, hi-lo)
		for t := t0 + lo; t < t0+hi; t++ {
			rows = append(rows, hidden[t*E:(t+1)*E])
		}
		out[i] = b.pooler.Pool(rows, pool)
		t0 += len(e.Tokens)
	}
	return out
}
