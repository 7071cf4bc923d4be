package serve

import (
	"context"
	"encoding/json"
	"time"

	"github.com/memra-ai/memra/runtime"
)

// Tokenizer is what the server needs from a model's tokenizer:
// *tokenizer.Tokenizer satisfies it.
type Tokenizer interface {
	// Encode turns text into token ids; addSpecial adds BOS (and whatever else
	// the vocabulary asks for), parseSpecial turns control-token text into the
	// control tokens.
	Encode(text string, addSpecial, parseSpecial bool) []int32
	// Decode turns ids back into text.
	Decode(ids []int32) string
	// TokenText is the text form of one token ("<s>", "<|im_end|>", "▁the").
	TokenText(id int32) string
	BOS() int32
	EOS() int32
	// AddBOS reports whether prompts start with BOS for this vocabulary.
	AddBOS() bool
	VocabSize() int
}

// Stats is the load an engine reports; the server exports it as metrics.
type Stats struct {
	Running       int // sequences generating now
	Queued        int // requests waiting to run: generation and embedding
	KVTokensUsed  int // KV cache positions in use
	KVTokensTotal int // KV cache positions available in all
	// KVPagesUsed, KVPagesCached and KVPagesTotal count the KV pool's
	// pages held by running sequences, kept by the prefix cache, and in all.
	KVPagesUsed, KVPagesCached, KVPagesTotal int
	CachedTokens                             int64 // prompt tokens taken from the prefix cache
	PromptTokens                             int64 // prompt tokens computed
	Preemptions                              int64 // sequences that gave their KV pages back and resumed
	// DecodeSteps and PrefillSteps count engine steps without and with
	// prompt tokens; BackendSeconds and HostSeconds split their time
	// between the device (or CPU backend) and the loop's own work.
	DecodeSteps, PrefillSteps   int64
	BackendSeconds, HostSeconds float64
	// PrefillSeconds is the backend time of the steps with prompt tokens;
	// DecodeRows and PrefillRows the entries of each kind of step.
	PrefillSeconds          float64
	DecodeRows, PrefillRows int64
	// SpecSteps counts sequence-steps that verified drafts, SpecDrafted
	// and SpecAccepted their drafted and accepted tokens.
	SpecSteps, SpecDrafted, SpecAccepted int64
	// FedSteps counts decode steps launched before the tokens of the step
	// before them reached the host (fed on the device).
	FedSteps int64
	// DeviceSteps counts the pipelined steps timed on the device, and
	// DeviceInputSeconds and DeviceStepSeconds their device time before
	// and from their launches (runtime.DeviceTimer).
	DeviceSteps                           int64
	DeviceInputSeconds, DeviceStepSeconds float64
}

// Engine is exactly what the server uses of a loaded model's engine
// (runtime.Engine, through a thin adapter, or a fake in tests).
type Engine interface {
	Info() runtime.ModelInfo
	Tokenizer() Tokenizer
	// Submit queues a generation. The channel yields events and is closed
	// after the one with Done or Err. Cancelling ctx stops the generation.
	// Errors: runtime.ErrOverloaded, ErrTooLong, ErrBadRequest, ErrDraining.
	Submit(ctx context.Context, req runtime.Request) (<-chan runtime.Event, error)
	Stats() Stats
	// Drain stops admitting new requests; running ones go on.
	Drain()
}

// GroupSubmitter is an Engine that queues a request's n choices together,
// all or none (runtime.Engine.SubmitGroup); the server uses it where the
// engine has it, and submits choices one by one where not.
type GroupSubmitter interface {
	SubmitGroup(ctx context.Context, reqs []runtime.Request) ([]<-chan runtime.Event, error)
}

// Template renders a chat: it is given the JSON object a chat template sees
// (messages, add_generation_prompt, bos_token, eos_token, tools…) with the
// client's key order kept. *chat.Template satisfies it.
type Template interface {
	Render(ctx json.RawMessage) (string, error)
}

// Model is one served model under its alias.
type Model struct {
	ID       string   // the alias clients name in "model"
	Engine   Engine   // the loaded model
	Template Template // its chat template; nil disables /v1/chat/completions for it
	Created  int64    // unix seconds reported by /v1/models; 0 = server start
	OwnedBy  string   // reported by /v1/models; "" = "memra"
	// Pooling, when set, makes the model serve /v1/embeddings and
	// /api/embed (its Engine must be an EmbedEngine).
	Pooling runtime.Pooling
	// Meta is the model's entry of Config.Metadata (set by New), or nil.
	Meta *ModelMeta
	// Facts describe the served file for Ollama's /api/tags and /api/show
	// (zero fields: unknown).
	Facts ModelFacts
}

// ModelFacts describe a served model's file.
type ModelFacts struct {
	Path         string    // the file or folder it was loaded from
	Format       string    // "gguf" or "safetensors"
	Parameters   int64     // parameter count
	Quantization string    // "Q4_K_M", "F16", …
	Size         int64     // bytes of its weights
	Modified     time.Time // the file's modification time
}
