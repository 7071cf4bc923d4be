package serve

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/memra-ai/memra/runtime"
)

// fakeTokenizer is byte-level: ids 0–255 are bytes, 256 is <s>, 257 is </s>.
type fakeTokenizer struct{}

const (
	fakeBOS   = 256
	fakeEOS   = 257
	fakeVocab = 258
)

func (fakeTokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var ids []int32
	if addSpecial {
		ids = append(ids, fakeBOS)
	}
	for len(text) > 0 {
		if parseSpecial && strings.HasPrefix(text, "<s>") {
			ids, text = append(ids, fakeBOS), text[3:]
			continue
		}
		if parseSpecial && strings.HasPrefix(text, "</s>") {
			ids, text = append(ids, fakeEOS), text[4:]
			continue
		}
		ids, text = append(ids, int32(text[0])), text[1:]
	}
	return ids
}

func (fakeTokenizer) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		if id < 256 {
			b = append(b, byte(id))
		}
	}
	return string(b)
}

func (fakeTokenizer) TokenText(id int32) string {
	switch id {
	case fakeBOS:
		return "<s>"
	case fakeEOS:
		return "</s>"
	}
	return string([]byte{byte(id)})
}

func (fakeTokenizer) BOS() int32     { return fakeBOS }
func (fakeTokenizer) EOS() int32     { return fakeEOS }
func (fakeTokenizer) AddBOS() bool   { return true }
func (fakeTokenizer) VocabSize() int { return fakeVocab }

// fakeTemplate renders "<s>role: content\n…assistant:".
type fakeTemplate struct{}

func (fakeTemplate) Render(ctx json.RawMessage) (string, error) {
	var c struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		BOS string `json:"bos_token"`
	}
	if err := json.Unmarshal(ctx, &c); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(c.BOS)
	for _, m := range c.Messages {
		var s string
		if json.Unmarshal(m.Content, &s) != nil {
			var parts []struct{ Text string }
			_ = json.Unmarshal(m.Content, &parts)
			for _, p := range parts {
				s += p.Text
			}
		}
		b.WriteString(m.Role + ": " + s + "\n")
	}
	b.WriteString("assistant:")
	return b.String(), nil
}

// fakeScript is the text the fake engine generates, from an offset that
// depends on the prompt (and on the seed when sampling).
const fakeScript = "Once upon a time there was a little fox who lived in a wood. "

// fakeEngine generates fakeScript bytes deterministically, with the
// engine's admission rules (MaxRunning, MaxQueue), stop strings,
// max_tokens, an EOS after eosAfter tokens, and cancellation.
type fakeEngine struct {
	ctxLen     int
	maxRunning int
	maxQueue   int
	eosAfter   int
	delay      time.Duration // per token

	mu       sync.Mutex
	admitted int
	running  int
	draining bool
	sem      chan struct{}

	cancelled atomic.Int64 // sequences ended by their context
	finished  atomic.Int64 // sequences ended normally
	panics    bool
	failWith  atomic.Pointer[error]           // when set, every sequence ends with this error
	last      atomic.Pointer[runtime.Request] // the last request submitted
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{ctxLen: 256, maxRunning: 64, maxQueue: 64, eosAfter: 40}
}

func (f *fakeEngine) Info() runtime.ModelInfo {
	return runtime.ModelInfo{Name: "fake", Arch: "fake", VocabSize: fakeVocab, ContextLength: f.ctxLen, Device: "cpu"}
}

func (f *fakeEngine) Tokenizer() Tokenizer { return fakeTokenizer{} }

func (f *fakeEngine) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{Running: f.running, Queued: f.admitted - f.running, KVTokensUsed: f.running * 10, KVTokensTotal: 1000}
}

func (f *fakeEngine) Drain() {
	f.mu.Lock()
	f.draining = true
	f.mu.Unlock()
}

func (f *fakeEngine) Submit(ctx context.Context, req runtime.Request) (<-chan runtime.Event, error) {
	if f.panics {
		panic("fake engine: asked to panic")
	}
	f.last.Store(&req)
	if len(req.Prompt)+req.MaxTokens > f.ctxLen {
		return nil, runtime.ErrTooLong
	}
	f.mu.Lock()
	if f.draining {
		f.mu.Unlock()
		return nil, runtime.ErrDraining
	}
	if f.sem == nil {
		f.sem = make(chan struct{}, f.maxRunning)
	}
	if f.admitted >= f.maxRunning+f.maxQueue {
		f.mu.Unlock()
		return nil, runtime.ErrOverloaded
	}
	f.admitted++
	f.mu.Unlock()
	out := make(chan runtime.Event, 1)
	go f.run(ctx, req, out)
	return out, nil
}

func (f *fakeEngine) run(ctx context.Context, req runtime.Request, out chan<- runtime.Event) {
	defer close(out)
	release := func(ran bool) {
		f.mu.Lock()
		f.admitted--
		if ran {
			f.running--
		}
		f.mu.Unlock()
	}
	select {
	case f.sem <- struct{}{}:
		f.mu.Lock()
		f.running++
		f.mu.Unlock()
	case <-ctx.Done():
		release(false)
		f.cancelled.Add(1)
		out <- runtime.Event{Err: ctx.Err()}
		return
	}
	defer func() { <-f.sem }()
	defer release(true)
	if err := f.failWith.Load(); err != nil {
		out <- runtime.Event{Err: *err}
		return
	}

	off := 0
	for _, t := range req.Prompt {
		off += int(t)
	}
	if req.Sampling.Temperature > 0 && req.Sampling.Seed != nil {
		off += int(*req.Sampling.Seed % 1000)
	} else if req.Sampling.Temperature > 0 {
		off += int(time.Now().UnixNano() % 1000)
	}
	limit := req.MaxTokens
	if limit <= 0 || len(req.Prompt)+limit > f.ctxLen {
		limit = f.ctxLen - len(req.Prompt)
	}
	var pending string
	var pendingToks []runtime.GeneratedToken
	send := func(ev runtime.Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			f.cancelled.Add(1)
			out <- runtime.Event{Err: ctx.Err()}
			return false
		}
	}
	for n := 0; ; n++ {
		if f.delay > 0 {
			select {
			case <-time.After(f.delay):
			case <-ctx.Done():
				f.cancelled.Add(1)
				out <- runtime.Event{Err: ctx.Err()}
				return
			}
		}
		usage := runtime.Usage{PromptTokens: len(req.Prompt), CompletionTokens: n}
		if n == limit {
			f.finished.Add(1)
			send(runtime.Event{Text: pending, Tokens: pendingToks, Done: true, Finish: runtime.FinishLength, Usage: usage})
			return
		}
		if n == f.eosAfter && !req.IgnoreEOS {
			usage.CompletionTokens++
			f.finished.Add(1)
			send(runtime.Event{Text: pending, Tokens: pendingToks, Done: true, Finish: runtime.FinishStop, Usage: usage})
			return
		}
		c := fakeScript[(off+n)%len(fakeScript)]
		tok := runtime.GeneratedToken{TokenLogprob: runtime.TokenLogprob{Token: int32(c), Bytes: []byte{c},
			Logprob: -float32(n%4+1) / 4}}
		for k := 0; k < req.TopLogprobs; k++ {
			alt := byte('a' + (n+k)%26)
			if k == 0 {
				alt = c
			}
			tok.Top = append(tok.Top, runtime.TokenLogprob{Token: int32(alt), Bytes: []byte{alt}, Logprob: -float32(k) - float32(n%4+1)/4})
		}
		pending += string(c)
		pendingToks = append(pendingToks, tok)
		usage.CompletionTokens++
		if cut, ok := stopAt(pending, req.Stop); ok {
			f.finished.Add(1)
			send(runtime.Event{Text: pending[:cut], Tokens: pendingToks, Done: true, Finish: runtime.FinishStop, Usage: usage})
			return
		}
		if held := holdBack(pending, req.Stop); held < len(pending) {
			if !send(runtime.Event{Text: pending[:len(pending)-held], Tokens: pendingToks}) {
				return
			}
			pending, pendingToks = pending[len(pending)-held:], nil
		}
	}
}

// stopAt finds the first stop string in s.
func stopAt(s string, stops []string) (int, bool) {
	best := -1
	for _, st := range stops {
		if i := strings.Index(s, st); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best, best >= 0
}

// holdBack is the length of the longest suffix of s that is a proper prefix
// of a stop string.
func holdBack(s string, stops []string) int {
	held := 0
	for _, st := range stops {
		for k := min(len(st)-1, len(s)); k > held; k-- {
			if strings.HasSuffix(s, st[:k]) {
				held = k
				break
			}
		}
	}
	return held
}

// TokenBytes and IsEOG let the grammar package build a vocabulary of the
// fake tokenizer: ids 0–255 are their byte, </s> ends generation.
func (fakeTokenizer) TokenBytes(id int32) []byte {
	if id >= 0 && id < 256 {
		return []byte{byte(id)}
	}
	return nil
}

func (fakeTokenizer) IsEOG(id int32) bool { return id == fakeEOS }
