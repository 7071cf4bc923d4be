package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/memra-ai/memra/runtime/kv"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// Errors that end a request after Submit accepted it (in Event.Err).
var (
	// ErrSlowConsumer: the request's event buffer filled because its reader
	// fell behind; the request was cancelled so the batch does not stall.
	ErrSlowConsumer = errors.New("runtime: event reader too slow, request cancelled")
	// ErrClosed: the engine was closed while the request ran or waited.
	ErrClosed = errors.New("runtime: engine closed")
	// ErrBackend: the backend's step failed.
	ErrBackend = errors.New("runtime: backend step failed")
)

// Defaults for the zero fields of EngineConfig.
const (
	DefaultMaxRunning     = 8
	DefaultMaxQueue       = 64
	DefaultMaxBatchTokens = 2048
	DefaultPrefillChunk   = 512
	DefaultEventBuffer    = 1024
)

// NoQueue as EngineConfig.MaxQueue admits no request beyond MaxRunning.
const NoQueue = -1

// EngineConfig sizes the scheduler. Zero fields take the Default* values.
type EngineConfig struct {
	MaxRunning int // sequences decoding at once (one backend step holds them all)
	MaxQueue   int // requests waiting beyond MaxRunning; more → ErrOverloaded; NoQueue: none
	// MaxBatchTokens bounds the tokens of one step; the backend's own bound
	// (ModelInfo.MaxBatchTokens) wins when smaller.
	MaxBatchTokens int
	// PrefillChunk bounds the prompt tokens one sequence feeds per step, so a
	// long prompt is processed over several steps while others decode.
	PrefillChunk int
	// EventBuffer is how many events a request buffers for its reader. When
	// the reader falls that far behind, the request ends with ErrSlowConsumer
	// instead of stalling every other request in the batch.
	EventBuffer int
	// Spec configures speculative decoding (off by default). An invalid
	// Spec (SpecConfig.Check) turns it off.
	Spec SpecConfig
	// NoPrefixCache turns off the reuse of KV pages between requests: each
	// prompt is computed whole and a request's pages are freed at its end.
	// (Only a PagedBackend shares pages; over another backend the pages
	// are accounting alone and nothing is reused either way.)
	NoPrefixCache bool
}

func (c EngineConfig) withDefaults(info ModelInfo) EngineConfig {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxRunning, DefaultMaxRunning)
	if c.MaxQueue < 0 { // NoQueue
		c.MaxQueue = 0
	} else {
		def(&c.MaxQueue, DefaultMaxQueue)
	}
	def(&c.MaxBatchTokens, DefaultMaxBatchTokens)
	def(&c.PrefillChunk, DefaultPrefillChunk)
	def(&c.EventBuffer, DefaultEventBuffer)
	if info.MaxBatchTokens > 0 && c.MaxBatchTokens > info.MaxBatchTokens {
		c.MaxBatchTokens = info.MaxBatchTokens
	}
	// Every running sequence decodes in every step.
	c.MaxRunning = min(c.MaxRunning, c.MaxBatchTokens)
	return c
}

// Stats is a snapshot of the engine for metrics.
type Stats struct {
	// Running counts the generating sequences; Queued the requests that
	// wait, generation and embedding alike.
	Running, Queued int
	// KVTokensUsed counts the positions of the KV pages sequences hold;
	// KVTokensTotal the positions of the whole pool.
	KVTokensUsed, KVTokensTotal int
	// KVPagesUsed, KVPagesCached and KVPagesTotal count the pool's pages
	// held by sequences, kept for reuse by the prefix cache (free to
	// evict), and in all; KVPageSize is the positions of a page.
	KVPagesUsed, KVPagesCached, KVPagesTotal, KVPageSize int
	StepsRun                                             int64 // backend steps
	TokensGenerated                                      int64 // sampled tokens, all requests
	PromptTokens                                         int64 // prompt tokens computed, all requests
	CachedTokens                                         int64 // prompt tokens taken from the prefix cache
	// Preemptions counts running sequences that gave their pages back for
	// lack of memory (they resume by recomputing, from the prefix cache
	// where it still holds their pages).
	Preemptions int64
	// DecodeSteps and PrefillSteps count steps without and with prompt
	// tokens; BackendSeconds is the time of their backend calls and
	// HostSeconds the rest of the loop's work around them (admission,
	// pages, sampling on the host, text and events).
	DecodeSteps, PrefillSteps   int64
	BackendSeconds, HostSeconds float64
	// PrefillSeconds is the part of BackendSeconds spent in steps with
	// prompt tokens; DecodeRows and PrefillRows count the entries of the
	// decode and the prefill steps (a decode step's mean width is
	// DecodeRows ÷ DecodeSteps; a prefill step's rows count each prompt
	// chunk once and each decode beside it once).
	PrefillSeconds          float64
	DecodeRows, PrefillRows int64
	// SpecSteps counts sequence-steps that fed drafts, SpecDrafted their
	// drafted tokens and SpecAccepted those the target accepted.
	SpecSteps, SpecDrafted, SpecAccepted int64
	// FedSteps counts decode steps launched before the host had the
	// tokens of the step before them (pipelined.go), fed on the device.
	FedSteps int64
	// DeviceSteps counts the pipelined steps the backend timed on the
	// device (DeviceTimer); DeviceInputSeconds and DeviceStepSeconds are
	// their device time before and from their launches.
	DeviceSteps                           int64
	DeviceInputSeconds, DeviceStepSeconds float64
}

// vocabulary is what the engine needs of a tokenizer.
type vocabulary interface {
	newDecoder() textDecoder
	IsEOG(id int32) bool
	TokenBytes(id int32) []byte
}

// Engine is one loaded model, its scheduler and its tokenizer. One goroutine
// runs the scheduler loop: at every step it admits queued requests, builds
// one Backend.Step from every running sequence's next token plus chunks of
// new prompts (continuous batching with chunked prefill), samples, emits
// events and retires finished sequences.
type Engine struct {
	b     Backend
	pool  *kv.Pool // the backend's (PagedBackend), or the engine's own accounting
	share bool     // pages are the backend's: pass them and reuse them
	spec  SpecConfig
	info  ModelInfo
	vocab vocabulary
	tok   *tokenizer.Tokenizer
	cfg   EngineConfig

	wake chan struct{} // buffered 1: something to do
	quit chan struct{} // closed by Close
	done chan struct{} // closed when the loop returns

	stepCtx    context.Context
	stopSteps  context.CancelFunc
	closeOnce  sync.Once
	closeError error

	mu       sync.Mutex
	queue    []*sequence
	running  int
	draining bool
	closed   bool
	nextID   SeqID
	stats    Stats

	// inflight maps the keys of prompt pages a running sequence will write
	// to it; a queued request that needs such a page waits for it (loop
	// goroutine only)
	inflight map[kv.Key]*sequence

	embeds embedQueue // embedding requests (embed_engine.go); guarded by mu

	// flight is the step launched on a PipelinedStepper and not yet
	// collected (pipelined.go; loop goroutine only)
	flight *flight
	// collected is when the last pipelined step was collected
	collected time.Time
}

func newEngine(b Backend, v vocabulary, tok *tokenizer.Tokenizer, cfg EngineConfig) *Engine {
	info := b.Info()
	e := &Engine{
		b: b, info: info, vocab: v, tok: tok, cfg: cfg.withDefaults(info),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		inflight: map[kv.Key]*sequence{},
	}
	if pb, ok := b.(PagedBackend); ok && pb.KVPool() != nil {
		e.pool, e.share = pb.KVPool(), true
	} else {
		// pages as accounting only: every running sequence at its whole context
		ctx := cmp.Or(info.ContextLength, 4096)
		e.pool, _ = kv.NewPool(e.cfg.MaxRunning*((ctx+ownPageSize-1)/ownPageSize), ownPageSize)
	}
	var err error
	if e.spec, err = cfg.Spec.withDefaults(); err != nil {
		e.spec = SpecConfig{Draft: cfg.Spec.Draft} // off; the draft model is still closed with the engine
	}
	e.stepCtx, e.stopSteps = context.WithCancel(context.Background())
	e.stats.KVPagesTotal, e.stats.KVPageSize = e.pool.Pages(), e.pool.PageSize()
	e.stats.KVTokensTotal = e.pool.Pages() * e.pool.PageSize()
	go e.loop()
	return e
}

// ownPageSize is the page of the engine's own pool over a backend that has
// none.
const ownPageSize = 16

// Info describes the model the engine serves.
func (e *Engine) Info() ModelInfo { return e.info }

// Config returns the scheduler's configuration with defaults filled in.
func (e *Engine) Config() EngineConfig { return e.cfg }

// Submit queues req. The channel yields Events and is closed after the last
// one, which has Done set (with Finish and Usage, or with Err when the
// request failed). Cancelling ctx stops the generation and frees its
// sequence at the next step boundary. Submit itself fails at once with
// ErrOverloaded, ErrTooLong, ErrBadRequest or ErrDraining.
//
// Events are buffered (EngineConfig.EventBuffer); a reader that falls that
// far behind gets a last event with ErrSlowConsumer, because the scheduler
// never waits for one request's reader while the others' tokens are due.
func (e *Engine) Submit(ctx context.Context, req Request) (<-chan Event, error) {
	chans, err := e.SubmitGroup(ctx, []Request{req})
	if err != nil {
		return nil, err
	}
	return chans[0], nil
}

// admits reports (e.mu held) whether n more requests fit beside the
// running ones and every queued one, generation and embedding alike:
// ErrDraining while closing, ErrOverloaded past MaxRunning + MaxQueue.
func (e *Engine) admits(n int) error {
	switch {
	case e.closed || e.draining:
		return ErrDraining
	case e.running+e.queued()+n > e.cfg.MaxRunning+e.cfg.MaxQueue:
		return fmt.Errorf("%w: %d running, %d queued", ErrOverloaded, e.cfg.MaxRunning, e.cfg.MaxQueue)
	}
	return nil
}

// SubmitGroup queues reqs (the n choices of one API request) all at once
// or none of them: ErrOverloaded when the running and queued slots cannot
// take them all now, ErrTooMany when they could never (more than
// MaxRunning + MaxQueue), and Submit's other errors for any one of them.
// The channels are in reqs' order.
func (e *Engine) SubmitGroup(ctx context.Context, reqs []Request) ([]<-chan Event, error) {
	if len(reqs) > e.cfg.MaxRunning+e.cfg.MaxQueue {
		return nil, fmt.Errorf("%w: %d requests, at most %d (%d running + %d queued)", ErrTooMany, len(reqs),
			e.cfg.MaxRunning+e.cfg.MaxQueue, e.cfg.MaxRunning, e.cfg.MaxQueue)
	}
	seqs := make([]*sequence, len(reqs))
	for i := range reqs {
		s, err := e.newSequence(ctx, reqs[i])
		if err != nil {
			return nil, err
		}
		seqs[i] = s
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if err := e.admits(len(seqs)); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	chans := make([]<-chan Event, len(seqs))
	for i, s := range seqs {
		e.nextID++
		s.id = e.nextID
		s.stopWake = context.AfterFunc(ctx, e.poke)
		e.queue = append(e.queue, s)
		chans[i] = s.out
	}
	e.mu.Unlock()
	e.poke()
	return chans, nil
}

// newSequence validates req and prepares its sequence (not yet queued).
func (e *Engine) newSequence(ctx context.Context, req Request) (*sequence, error) {
	if err := validate(&req, e.info); err != nil {
		return nil, err
	}
	s := &sequence{
		ctx:     ctx,
		req:     req,
		out:     make(chan Event, e.cfg.EventBuffer+2), // 2 reserved for the end
		sampler: NewSampler(req.Sampling),
		all:     append(make([]int32, 0, len(req.Prompt)+16), req.Prompt...),
		buffer:  e.cfg.EventBuffer,
	}
	s.sampler.AddPrompt(req.Prompt)
	if req.Mask != nil {
		s.sampler.SetMask(req.Mask)
	}
	var dec textDecoder = nopDecoder{}
	if e.vocab != nil {
		dec = e.vocab.newDecoder()
	}
	s.text = newTextStream(dec, nonEmpty(req.Stop))
	if e.share && !e.cfg.NoPrefixCache {
		s.root = kv.Root(req.CacheScope)
		s.keys = kv.Chain(s.root, req.Prompt, e.pool.PageSize())
	}
	return s, nil
}

// Stats returns a snapshot of the scheduler's counters and of the KV
// page pool.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	st := e.stats
	st.Queued = e.queued()
	e.mu.Unlock()
	if dt, ok := e.b.(DeviceTimer); ok {
		n, in, step := dt.DeviceTimes()
		st.DeviceSteps, st.DeviceInputSeconds, st.DeviceStepSeconds = n, in.Seconds(), step.Seconds()
	}
	ps := e.pool.Stats()
	st.KVPagesUsed, st.KVPagesCached = ps.Used, ps.Cached
	st.KVTokensUsed = ps.Used * ps.PageSize
	return st
}

// queued is the number of requests waiting for a slot, generation and
// embedding ones together. The caller holds e.mu.
func (e *Engine) queued() int { return len(e.queue) + len(e.embeds.jobs) }

// KVPool returns the page pool the engine schedules (the backend's, or
// the engine's own accounting over a backend without one).
func (e *Engine) KVPool() *kv.Pool { return e.pool }

// Drain stops admitting: Submit returns ErrDraining from now on, while
// running and queued requests go on to their end. See WaitIdle.
func (e *Engine) Drain() {
	e.mu.Lock()
	e.draining = true
	e.mu.Unlock()
}

// WaitIdle waits until no request runs or waits, or ctx ends.
func (e *Engine) WaitIdle(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		e.mu.Lock()
		idle := e.running == 0 && len(e.queue) == 0
		e.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.done:
			return nil
		case <-t.C:
		}
	}
}

// Close stops the scheduler: requests still running or queued end with
// ErrClosed. It then closes the backend, which the engine owns.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.quit)
		e.stopSteps()
		<-e.done
		e.closeError = e.b.Close()
		if e.spec.Draft != nil {
			e.closeError = errors.Join(e.closeError, e.spec.Draft.Close())
		}
	})
	return e.closeError
}

// poke wakes the loop without blocking.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// nopDecoder is the text of an engine without a tokenizer: none.
type nopDecoder struct{}

func (nopDecoder) Add(int32) string { return "" }
func (nopDecoder) Flush() string    { return "" }
