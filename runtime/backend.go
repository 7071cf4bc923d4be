// Package runtime is memra's backend-independent engine: the seam every
// backend implements, the sampler, stop handling, streaming text and the
// scheduler that batches sequences from many requests into shared steps.
package runtime

import (
	"context"

	"github.com/memra-ai/memra/runtime/kv"
)

// SeqID identifies one sequence, and so one KV cache, inside a backend.
type SeqID uint64

// SeqStep is one sequence's share of a forward step.
type SeqStep struct {
	Seq SeqID
	// Pos is the position of Tokens[0]: the number of this sequence's tokens
	// the backend keeps in its KV cache from earlier steps. A Pos below the
	// cached length discards the cached entries from Pos on.
	Pos    int
	Tokens []int32 // new tokens, at positions Pos, Pos+1, …
	Logits bool    // whether the logits after the last token are wanted
	// Pages, when set, is the sequence's page table in the backend's pool
	// (PagedBackend.KVPool): page i holds positions [i·P, (i+1)·P), P the
	// pool's page size, and the table covers Pos+len(Tokens) positions.
	// The caller owns the pages and what they hold: the backend writes the
	// new tokens' keys and values into them, reads positions below Pos from
	// them (written by earlier steps, of this sequence or of another whose
	// tokens began the same way) and keeps no state of the sequence. When
	// nil, the backend keeps the sequence's pages itself, from the same
	// pool, until Free.
	Pages []int32
}

// ModelInfo describes a loaded model to the engine.
type ModelInfo struct {
	Name          string
	Arch          string
	VocabSize     int // logits per token
	ContextLength int // maximum positions per sequence
	// MaxBatchTokens bounds the tokens of one step (all sequences together);
	// 0 means no bound.
	MaxBatchTokens int
	Device         string // "cpu", "cuda:0", …
}

// Backend executes whole forward steps of one loaded model. It is the only
// interface between the engine and a device: a new op never touches it.
//
// A Backend is used from one goroutine at a time.
type Backend interface {
	Info() ModelInfo
	// Step runs one forward pass over every entry of batch and returns, in
	// batch order, the logits after the last token of each entry whose Logits
	// is set (nil for the others). The returned slices stay valid until the
	// next call of Step.
	Step(ctx context.Context, batch []SeqStep) ([][]float32, error)
	// Free drops the KV cache of seq; freeing an unknown seq is a no-op.
	Free(seq SeqID)
	Close() error
}

// PagedBackend is a Backend whose KV memory is a pool of pages that the
// caller may manage (SeqStep.Pages): the engine shares pages between
// sequences with a common prefix and keeps them after a request ends.
type PagedBackend interface {
	Backend
	KVPool() *kv.Pool
}

// GreedyStepper is an optional fast path of a Backend: a step whose
// sampling is greedy runs the argmax where the logits are (on the GPU) and
// moves one int32 per sequence to the host instead of a vocabulary of
// floats.
type GreedyStepper interface {
	// StepGreedy runs one forward pass like Step and returns, in batch
	// order, the index of the largest logit after the last token of each
	// entry whose Logits is set (the lowest index on ties), -1 for the
	// others and for an entry whose logits hold a NaN. The slice stays valid
	// until the next step.
	StepGreedy(ctx context.Context, batch []SeqStep) ([]int32, error)
}
