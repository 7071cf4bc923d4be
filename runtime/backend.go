// Package runtime is memra's backend-independent engine: the seam every
// backend implements, the sampler, stop handling, streaming text and the
// scheduler that batches sequences from many requests into shared steps.
package runtime

import (
	"context"
	"errors"
	"time"

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

// SamplingStepper is an optional fast path of a Backend: it chooses the
// next tokens where the logits are (on the GPU), following Sampler's
// order of transforms, and moves token ids (and the logprobs asked for)
// to the host instead of a vocabulary of floats per sequence. Its random
// stream is its own: a seed gives the same tokens on the same device
// whatever else the step holds, not the CPU sampler's tokens.
type SamplingStepper interface {
	// StepSample runs one forward pass like Step. For each entry of batch
	// whose Logits is set it returns, in batch order, the token chosen
	// under params[i] or, where params[i] is nil or the backend cannot
	// take it (its data does not fit the device's buffers), the entry's
	// logits as Step returns them (Sampled.Logits) for the caller to
	// sample. Entries without Logits get the zero Sampled. The results
	// stay valid until the next step.
	StepSample(ctx context.Context, batch []SeqStep, params []*DeviceSampling) ([]Sampled, error)
}

// PipelinedStepper is an optional fast path of a GreedyStepper or
// SamplingStepper backend: it queues a step and returns before the step
// has run, and it can feed a decode step the tokens the step before it
// chose without the host seeing them first. The engine launches step n+1
// before it takes step n's tokens, so the host's work between steps
// (emitting text, stop strings, the next step's inputs) overlaps the
// device's.
type PipelinedStepper interface {
	// Launch queues one step over batch, as StepGreedy runs it where
	// params is nil and as StepSample where it is set (then with every
	// params[i] set), every entry with one token and Logits. With feed,
	// the step launched before it had as many entries and the same kind
	// of sampling, and the backend replaces entry i's token with the one
	// that step chose for its entry i. Launch queues nothing and returns
	// an error wrapping ErrNotPipelined where it cannot run batch this
	// way; at most two launched steps wait for Collect. Launch reads batch
	// and params before it returns.
	Launch(ctx context.Context, batch []SeqStep, params []*DeviceSampling, feed bool) error
	// Collect waits for the oldest launched step not yet collected and
	// returns its results as StepGreedy (greedy launches) or StepSample
	// would. They stay valid until the next Collect.
	Collect(ctx context.Context) (greedy []int32, sampled []Sampled, err error)
}

// DeviceTimer is a PipelinedStepper that times its launched steps on the
// device: where the host's time between collections (the step period)
// exceeds the device's time a step, the device waited between steps.
type DeviceTimer interface {
	// DeviceTimes returns, over the launched steps collected so far, how
	// many were timed and the device's time of their inputs (from the
	// first input copy to the launches: copies, the fed tokens) and of
	// the rest (the launches and the copy of the results to the host).
	// Safe to call from any goroutine.
	DeviceTimes() (steps int64, inputs, step time.Duration)
}

// ErrNotPipelined is PipelinedStepper.Launch's refusal of a step it can
// only run as a whole (Step, StepGreedy or StepSample).
var ErrNotPipelined = errors.New("the step cannot be pipelined")

// DeviceSampling is one entry's sampling as a SamplingStepper takes it:
// the request's parameters, with what depends on the sequence's history
// worked out on the host (Sampler.Device).
type DeviceSampling struct {
	// Params are the request's parameters: the device reads Temperature,
	// TopK, TopP, MinP, RepeatPenalty, PresencePenalty and
	// FrequencyPenalty (LogitBias comes as Bias, PenaltyLastN is applied
	// in Penalties, Seed is Seed).
	Params SamplingParams
	// Bias is LogitBias: ids inside the vocabulary, increasing.
	Bias []TokenBias
	// Penalties are the tokens the penalties touch, ids increasing, with
	// their counts among the generated tokens of the window (0: seen in
	// the prompt only); empty when no penalty is set.
	Penalties []TokenCount
	// Masked: only the tokens Mask allows may be chosen (bit id%64 of word
	// id/64, BitsetMask.AllowedBits; ids past it are not allowed).
	Masked bool
	Mask   []uint64
	// Seed keys the sequence's random stream; Index is the number of
	// tokens the sequence generated before this one (the stream's
	// counter).
	Seed, Index uint64
	// Logprobs asks for the chosen token's logprob, TopLogprobs for that
	// many alternatives (0–MaxTopLogprobs), both of the raw logits.
	Logprobs    bool
	TopLogprobs int
}

// TokenBias is one entry of a logit bias.
type TokenBias struct {
	Token int32
	Bias  float32
}

// TokenCount is a token the penalties touch and how often it was
// generated inside the window (0: seen in the prompt only).
type TokenCount struct {
	Token int32
	Count int32
}

// Sampled is a SamplingStepper's result for one entry.
type Sampled struct {
	// Token is the chosen token, or SampledNone, SampledNaN or
	// SampledNoFinite.
	Token int32
	// Logprob is the chosen token's logprob (DeviceSampling.Logprobs),
	// Top the alternatives, most likely first, ties by id.
	Logprob float32
	Top     []TokenLogprob
	// Logits, when set, are the entry's logits instead of a token: the
	// caller samples it.
	Logits []float32
}

// Token codes of an entry a SamplingStepper chose no token for.
const (
	// SampledNone: every token was ruled out (ErrNoCandidates) while
	// some logit is finite.
	SampledNone int32 = -1
	// SampledNaN: the entry's logits hold a NaN.
	SampledNaN int32 = -2
	// SampledNoFinite: every token was ruled out and no logit is finite.
	SampledNoFinite int32 = -3
)
