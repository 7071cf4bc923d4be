package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrNotEmbedding: the model serves no embeddings (its backend has no
// Embedder, or was not built for them).
var ErrNotEmbedding = errors.New("runtime: the model does not serve embeddings")

// Pooling says how one vector is made of a sequence's final hidden states
// (the residual stream after the last layer and the model's final norm).
type Pooling int

const (
	PoolNone Pooling = iota // not an embedding model
	PoolMean                // the mean over every token
	PoolCLS                 // the first token's
	PoolLast                // the last token's (decoder embedding models: Qwen3-Embedding)
)

var poolingNames = [...]string{PoolNone: "none", PoolMean: "mean", PoolCLS: "cls", PoolLast: "last"}

// String returns the pooling's name: none, mean, cls or last.
func (p Pooling) String() string {
	if p < 0 || int(p) >= len(poolingNames) {
		return fmt.Sprintf("pooling(%d)", int(p))
	}
	return poolingNames[p]
}

// ParsePooling reads a pooling name (none, mean, cls, last; any case).
func ParsePooling(s string) (Pooling, error) {
	for i, n := range poolingNames {
		if strings.EqualFold(s, n) {
			return Pooling(i), nil
		}
	}
	return PoolNone, fmt.Errorf("%w: pooling %q (want mean, cls, last or none)", ErrBadRequest, s)
}

// Rows returns the token rows [lo, hi) of a sequence of n tokens that the
// pooling reads.
func (p Pooling) Rows(n int) (lo, hi int) {
	switch p {
	case PoolCLS:
		return 0, min(n, 1)
	case PoolLast:
		return max(n-1, 0), n
	}
	return 0, n
}

// EmbedStep is one sequence of an embedding step: its whole input,
// computed from position 0.
type EmbedStep struct {
	Seq    SeqID
	Tokens []int32
	// Pages is the sequence's page table as in SeqStep.Pages; nil: the
	// backend takes pages itself until Free.
	Pages []int32
}

// Embedder is an optional interface of a Backend: it runs sequences
// through the model (a prefill; nothing is sampled) and returns their
// pooled hidden states instead of logits.
type Embedder interface {
	// EmbedWidth is the width of the vectors Embed returns (the model's
	// hidden size), 0 when the backend was not prepared for embeddings.
	EmbedWidth() int
	// Embed returns, in batch order, each entry's final hidden states
	// pooled by pool and L2-normalised. The keys and values it writes are
	// of no further use: the caller frees the sequences.
	Embed(ctx context.Context, batch []EmbedStep, pool Pooling) ([][]float32, error)
}

// HiddenPooler turns a sequence's hidden states (the residual stream after
// the last layer, before the final norm) into its embedding: the model's
// final RMSNorm on each row the pooling reads, the pooling, then L2
// normalisation, in float64. Backends share it, so the CPU and the GPU
// differ only in the hidden states they compute.
type HiddenPooler struct {
	Norm []float32 // the final norm's weight
	Eps  float64
}

// Pool returns the embedding of rows, the hidden states of tokens lo … hi-1
// of a sequence of n tokens, where [lo, hi) = pool.Rows(n).
func (hp HiddenPooler) Pool(rows [][]float32, pool Pooling) []float32 {
	E := len(hp.Norm)
	acc := make([]float64, E)
	for _, x := range rows {
		ss := 0.0
		for _, v := range x[:E] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(E)+hp.Eps)
		for i, v := range x[:E] {
			acc[i] += float64(v) * inv * float64(hp.Norm[i])
		}
	}
	if pool == PoolMean && len(rows) > 0 {
		for i := range acc {
			acc[i] /= float64(len(rows))
		}
	}
	return normalized(acc)
}

// normalized returns x / |x| as float32 (x itself when its norm is 0).
func normalized(x []float64) []float32 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	out := make([]float32, len(x))
	scale := 1.0
	if ss > 0 {
		scale = 1 / math.Sqrt(ss)
	}
	for i, v := range x {
		out[i] = float32(v * scale)
	}
	return out
}

// Truncate returns the first dims elements of the unit vector v,
// normalised again (Matryoshka truncation); v itself when dims is 0 or
// not below len(v).
func Truncate(v []float32, dims int) []float32 {
	if dims <= 0 || dims >= len(v) {
		return v
	}
	x := make([]float64, dims)
	for i := range x {
		x[i] = float64(v[i])
	}
	return normalized(x)
}
