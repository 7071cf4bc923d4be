package runtime

import "errors"

// Errors the scheduler returns from Submit; the server maps them to HTTP
// statuses (ErrOverloaded → 429, ErrTooLong/ErrBadRequest → 400,
// ErrDraining → 503).
var (
	ErrOverloaded = errors.New("runtime: too many requests running and queued")
	ErrTooLong    = errors.New("runtime: request does not fit the model's context")
	ErrBadRequest = errors.New("runtime: invalid request")
	ErrDraining   = errors.New("runtime: shutting down, not admitting requests")
	// ErrTooMany: a group of requests (a request's n choices) larger than
	// the engine can ever hold running and queued at once.
	ErrTooMany = errors.New("runtime: more requests in one group than the engine holds")
)

// SamplingParams choose the next token from logits. The zero value is greedy
// decoding with no penalties.
type SamplingParams struct {
	Temperature      float32 // ≤ 0: greedy (argmax)
	TopK             int     // ≤ 0: off
	TopP             float32 // ≤ 0 or ≥ 1: off
	MinP             float32 // ≤ 0: off
	RepeatPenalty    float32 // ≤ 0 or 1: off (llama.cpp semantics)
	PresencePenalty  float32 // OpenAI semantics
	FrequencyPenalty float32 // OpenAI semantics
	PenaltyLastN     int     // tokens of history the penalties look at; ≤ 0: all
	LogitBias        map[int32]float32
	Seed             *uint64 // nil: a random seed per request
}

// FinishReason says why a generation ended, with OpenAI's spellings.
type FinishReason string

const (
	FinishStop   FinishReason = "stop"   // end-of-generation token or a stop string
	FinishLength FinishReason = "length" // max tokens or the context filled
)

// TokenLogprob is one candidate token with its log-probability under the
// model's distribution (before sampling filters).
type TokenLogprob struct {
	Token   int32
	Bytes   []byte // the bytes this token decodes to
	Logprob float32
}

// GeneratedToken is one sampled token, with its logprob and the top
// alternatives when the request asked for them.
type GeneratedToken struct {
	TokenLogprob
	Top []TokenLogprob
}

// Request is one generation: a prompt already tokenized, and how to continue it.
type Request struct {
	Prompt      []int32
	MaxTokens   int // ≤ 0: until the context is full
	Sampling    SamplingParams
	Stop        []string // stop strings: matched across token boundaries, never emitted
	IgnoreEOS   bool
	Logprobs    bool // fill Event.Tokens with logprobs
	TopLogprobs int  // alternatives per token (0–20)
	// Mask, when set, constrains every sampled token (structured output);
	// see Mask. It must not be shared between requests.
	Mask Mask
	// CacheScope is the prefix-cache scope: a request reuses the cached KV
	// pages only of requests of the same scope (the server passes the
	// tenant: the API key's identity and the request's cache_salt). The
	// empty scope is one scope like any other.
	CacheScope string
	// Speculative, when set, turns speculative decoding on or off for this
	// request (nil: the engine's EngineConfig.Spec).
	Speculative *bool
}

// Usage counts tokens as OpenAI's usage object does.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens are the prompt tokens whose keys and values came from
	// the prefix cache instead of being computed.
	CachedTokens int
}

// Event is one piece of a streamed generation. Text is always whole UTF-8
// characters and never includes a stop string or text that might still
// become one. The last event has Done set, with Finish and Usage, or Err.
type Event struct {
	Text   string
	Tokens []GeneratedToken // the tokens behind Text (logprobs when asked)
	Done   bool
	Finish FinishReason
	Usage  Usage
	Err    error
}
