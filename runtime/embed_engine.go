package runtime

import (
	"context"
	"fmt"
	"time"
)

// EmbedRequest is one embedding request: its inputs, already tokenized.
type EmbedRequest struct {
	Inputs  [][]int32
	Pooling Pooling // how a vector is made of an input's hidden states (not PoolNone)
	// Dimensions, when positive and below the model's width, truncates
	// each vector to its first Dimensions elements, normalised again.
	Dimensions int
}

// embedJob is one EmbedRequest inside the engine.
type embedJob struct {
	ctx  context.Context
	req  EmbedRequest
	next int // inputs already computed (loop goroutine only)
	out  [][]float32
	done chan error // buffered 1: nil once out is complete
}

// embedQueue holds the embedding requests waiting for the loop; guarded by
// Engine.mu.
type embedQueue struct {
	jobs []*embedJob
}

// EmbedWidth returns the width of the model's embeddings, 0 when its
// backend serves none.
func (e *Engine) EmbedWidth() int {
	if em, ok := e.b.(Embedder); ok {
		return em.EmbedWidth()
	}
	return 0
}

// Embed returns the embedding of each input of req, in order: the final
// hidden states pooled by req.Pooling, L2-normalised. The inputs run
// through the scheduler's loop, batched with those of other embedding
// requests (several inputs per backend call, at most MaxBatchTokens
// tokens) between generation steps, and are admitted as generation
// requests are: ErrOverloaded when the running and queued slots are full
// (an embedding request takes one queue slot while it waits), ErrDraining,
// ErrTooLong and ErrBadRequest; ErrNotEmbedding when the backend serves no
// embeddings. Cancelling ctx abandons the request.
func (e *Engine) Embed(ctx context.Context, req EmbedRequest) ([][]float32, error) {
	width := e.EmbedWidth()
	if width == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotEmbedding, e.info.Name)
	}
	if err := validateEmbed(&req, e.info, width); err != nil {
		return nil, err
	}
	job := &embedJob{ctx: ctx, req: req, out: make([][]float32, len(req.Inputs)), done: make(chan error, 1)}
	e.mu.Lock()
	if err := e.admits(1); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	e.embeds.jobs = append(e.embeds.jobs, job)
	e.mu.Unlock()
	e.poke()
	var err error
	select {
	case err = <-job.done:
	case <-ctx.Done():
		return nil, ctx.Err() // the loop drops the job
	case <-e.done:
		select {
		case err = <-job.done:
		default:
			return nil, ErrClosed
		}
	}
	if err != nil {
		return nil, err
	}
	for i, v := range job.out {
		job.out[i] = Truncate(v, req.Dimensions)
	}
	return job.out, nil
}

// validateEmbed checks req against the model.
func validateEmbed(req *EmbedRequest, info ModelInfo, width int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
	}
	if req.Pooling <= PoolNone || req.Pooling > PoolLast {
		return bad("pooling %v", req.Pooling)
	}
	if len(req.Inputs) == 0 {
		return bad("no inputs")
	}
	if req.Dimensions < 0 || req.Dimensions > width {
		return bad("dimensions %d outside 1–%d", req.Dimensions, width)
	}
	for i, in := range req.Inputs {
		if len(in) == 0 {
			return bad("input %d is empty", i)
		}
		if info.ContextLength > 0 && len(in) > info.ContextLength {
			return fmt.Errorf("%w: input %d has %d tokens, the context %d", ErrTooLong, i, len(in), info.ContextLength)
		}
		for j, id := range in {
			if id < 0 || (info.VocabSize > 0 && int(id) >= info.VocabSize) {
				return bad("input %d token %d is %d, outside the vocabulary of %d", i, j, id, info.VocabSize)
			}
		}
	}
	return nil
}

// embedPiece is one input of an embedding step and the job it belongs to.
type embedPiece struct {
	job   *embedJob
	index int
	pages []int32
}

// embedStep runs one Embed call of the backend over the inputs of the
// queued embedding requests, in order, up to MaxBatchTokens tokens (at
// least one input) of one pooling, each with fresh KV pages from the
// pool, which it gives back at once. running is the number of generating
// sequences: with none, an input whose pages the pool cannot give fails
// with ErrTooLong, else it waits for them to end. It pokes the loop when
// requests remain. Called by the loop goroutine between steps.
func (e *Engine) embedStep(running int) {
	e.mu.Lock()
	var gone []*embedJob
	keep := e.embeds.jobs[:0]
	for _, j := range e.embeds.jobs {
		if j.ctx.Err() != nil {
			gone = append(gone, j)
			continue
		}
		keep = append(keep, j)
	}
	clear(e.embeds.jobs[len(keep):])
	e.embeds.jobs = keep
	jobs := append([]*embedJob(nil), keep...)
	e.mu.Unlock()
	for _, j := range gone {
		j.done <- j.ctx.Err()
	}
	if len(jobs) == 0 {
		return
	}
	start := time.Now()
	em := e.b.(Embedder)
	pool := jobs[0].req.Pooling
	budget := e.cfg.MaxBatchTokens
	var batch []EmbedStep
	var pieces []embedPiece
	var tokens int64
	short := false
collect:
	for _, j := range jobs {
		if j.req.Pooling != pool {
			continue
		}
		for i := j.next; i < len(j.req.Inputs); i++ {
			in := j.req.Inputs[i]
			if len(batch) > 0 && len(in) > budget {
				break collect
			}
			var pages []int32
			if e.share {
				var err error
				if pages, err = e.pool.Alloc(e.pool.PagesFor(len(in))); err != nil {
					short = true
					break collect
				}
			}
			batch = append(batch, EmbedStep{Tokens: in, Pages: pages})
			pieces = append(pieces, embedPiece{job: j, index: i, pages: pages})
			budget -= len(in)
			tokens += int64(len(in))
		}
	}
	if len(batch) == 0 {
		if short && running == 0 {
			j := jobs[0]
			e.finishEmbed(j, fmt.Errorf("%w: input %d (%d tokens) needs more KV pages than the pool holds",
				ErrTooLong, j.next, len(j.req.Inputs[j.next])))
			e.poke()
		}
		return
	}
	e.mu.Lock()
	for i := range batch {
		e.nextID++
		batch[i].Seq = e.nextID
	}
	e.mu.Unlock()
	t0 := time.Now()
	vecs, err := em.Embed(e.stepCtx, batch, pool)
	t1 := time.Now()
	for i, p := range pieces {
		if p.pages != nil {
			e.pool.Release(p.pages)
		}
		e.b.Free(batch[i].Seq)
	}
	if err == nil && len(vecs) != len(batch) {
		err = fmt.Errorf("backend returned %d embeddings for %d inputs", len(vecs), len(batch))
	}
	for i := 0; err == nil && i < len(vecs); i++ {
		if len(vecs[i]) != em.EmbedWidth() {
			err = fmt.Errorf("backend returned an embedding of %d elements, want %d", len(vecs[i]), em.EmbedWidth())
		}
	}
	e.countStep(tokens, len(batch), t1.Sub(t0))
	e.mu.Lock()
	e.stats.HostSeconds += t0.Sub(start).Seconds() + time.Since(t1).Seconds()
	e.mu.Unlock()
	if err != nil {
		if e.stepCtx.Err() != nil {
			return // closing: Embed's callers see the loop end
		}
		for _, p := range pieces {
			e.finishEmbed(p.job, fmt.Errorf("%w: %w", ErrBackend, err))
		}
		e.poke()
		return
	}
	for i, p := range pieces {
		p.job.out[p.index] = vecs[i]
		p.job.next = p.index + 1
		if p.job.next == len(p.job.req.Inputs) {
			e.finishEmbed(p.job, nil)
		}
	}
	e.mu.Lock()
	more := len(e.embeds.jobs) > 0
	e.mu.Unlock()
	if more {
		e.poke()
	}
}

// finishEmbed takes j out of the queue and reports err (nil: done) to its
// caller; a job already finished is left alone.
func (e *Engine) finishEmbed(j *embedJob, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, o := range e.embeds.jobs {
		if o == j {
			e.embeds.jobs = append(e.embeds.jobs[:i], e.embeds.jobs[i+1:]...)
			j.done <- err
			return
		}
	}
}
