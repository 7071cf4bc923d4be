package loadtest

import (
	"math/rand/v2"
	"sync/atomic"
)

// request is what one request sends: the messages of the chat endpoint or
// the prompt of the completions endpoint, and its turn in a conversation.
type request struct {
	messages []map[string]string
	prompt   string
	turn     int // from 1 under MultiTurn; 0 otherwise
}

// workload is the source of one worker's requests in one level.
type workload interface {
	// next returns the request to send as request seq of the level.
	next(seq int) request
	// record takes the outcome of the request next returned last and the
	// text the server streamed for it.
	record(s Sample, reply string)
}

// message is one chat message.
func message(role, content string) map[string]string {
	return map[string]string{"role": role, "content": content}
}

// single is a request of one text: the user message, or the prompt.
func (r *runner) single(text string) request {
	if r.cfg.Endpoint == Completions {
		return request{prompt: text}
	}
	return request{messages: []map[string]string{message("user", text)}}
}

// workload returns the request source of worker w of a level; conv numbers
// the level's conversations across its workers.
func (r *runner) workload(level int, conv *atomic.Int64) workload {
	switch r.cfg.Scenario {
	case SharedPrefix:
		return sharedPrefixWork{r: r, level: level}
	case MultiTurn:
		return &conversationWork{r: r, level: level, conv: conv}
	}
	return randomWork{r: r, level: level}
}

// randomWork sends prompts that share no prefix.
type randomWork struct {
	r     *runner
	level int
}

func (w randomWork) next(seq int) request {
	return w.r.single(promptFor(w.r.cfg.Seed, w.level, seq, w.r.cfg.PromptTokens))
}

func (randomWork) record(Sample, string) {}

// sharedPrefixWork sends request seq shared prompt seq mod Prefixes and a
// user text of its own.
type sharedPrefixWork struct {
	r     *runner
	level int
}

func (w sharedPrefixWork) next(seq int) request {
	c := w.r.cfg
	prefix := w.r.prefixes[seq%len(w.r.prefixes)]
	suffix := suffixFor(c.Seed, w.level, seq, c.PromptTokens-c.PrefixTokens)
	if c.Endpoint == Completions {
		return request{prompt: prefix + "\n\n" + suffix}
	}
	return request{messages: []map[string]string{message("system", prefix), message("user", suffix)}}
}

func (sharedPrefixWork) record(Sample, string) {}

// conversationWork runs one conversation after another. A turn refused
// with 429 is sent again; a turn that fails otherwise ends its
// conversation, and the next request starts a new one.
type conversationWork struct {
	r     *runner
	level int
	conv  *atomic.Int64

	turn     int        // turns answered in the current conversation
	rng      *rand.Rand // nil between conversations
	messages []map[string]string
	prompt   string // the completions prompt so far
	pending  string // the user message of the turn in flight; "" when none
}

func (w *conversationWork) next(int) request {
	c := w.r.cfg
	n := c.shareTokens()
	if w.rng == nil {
		w.rng = rngFor(c.Seed, streamConversation, w.level, int(w.conv.Add(1)-1))
		system := randomWords(w.rng, n)
		w.turn, w.messages, w.prompt = 0, []map[string]string{message("system", system)}, system
	}
	if w.pending == "" {
		w.pending = randomWords(w.rng, n)
	}
	req := request{turn: w.turn + 1}
	if c.Endpoint == Completions {
		req.prompt = w.prompt + "\n\n" + w.pending
	} else {
		req.messages = append(w.messages[:len(w.messages):len(w.messages)], message("user", w.pending))
	}
	return req
}

func (w *conversationWork) record(s Sample, reply string) {
	switch {
	case s.RateLimited():
		return
	case !s.OK():
		w.rng, w.pending = nil, ""
		return
	}
	w.turn++
	w.messages = append(w.messages, message("user", w.pending), message("assistant", reply))
	w.prompt += "\n\n" + w.pending + reply
	w.pending = ""
	if w.turn == w.r.cfg.Turns {
		w.rng = nil
	}
}
