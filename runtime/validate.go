package runtime

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// Request limits the engine enforces beyond the model's context.
const (
	MaxTopLogprobs = 20 // most alternatives per token
	MaxStopStrings = 64 // most stop strings per request
)

// validate checks req against the model and returns an error wrapping
// ErrBadRequest or ErrTooLong.
func validate(req *Request, info ModelInfo) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
	}
	if len(req.Prompt) == 0 {
		return bad("empty prompt (start it with the BOS token at least)")
	}
	if info.VocabSize > 0 {
		for i, id := range req.Prompt {
			if id < 0 || int(id) >= info.VocabSize {
				return bad("prompt token %d at index %d outside vocabulary of %d", id, i, info.VocabSize)
			}
		}
	}
	if info.ContextLength > 0 && len(req.Prompt)+1 > info.ContextLength {
		return fmt.Errorf("%w: prompt of %d tokens leaves no room to generate in a context of %d",
			ErrTooLong, len(req.Prompt), info.ContextLength)
	}
	if req.MaxTokens < 0 {
		return bad("max tokens %d is negative", req.MaxTokens)
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs {
		return bad("top logprobs %d outside 0–%d", req.TopLogprobs, MaxTopLogprobs)
	}
	if len(req.Stop) > MaxStopStrings {
		return bad("%d stop strings, at most %d", len(req.Stop), MaxStopStrings)
	}
	for i, s := range req.Stop {
		if !utf8.ValidString(s) {
			return bad("stop string %d is not valid UTF-8", i)
		}
	}
	p := &req.Sampling
	for _, f := range []struct {
		name string
		v    float32
	}{
		{"temperature", p.Temperature}, {"top_p", p.TopP}, {"min_p", p.MinP},
		{"repeat_penalty", p.RepeatPenalty}, {"presence_penalty", p.PresencePenalty},
		{"frequency_penalty", p.FrequencyPenalty},
	} {
		if math.IsNaN(float64(f.v)) || math.IsInf(float64(f.v), 0) {
			return bad("%s is %v", f.name, f.v)
		}
	}
	if p.MinP > 1 {
		return bad("min_p %v above 1", p.MinP)
	}
	for id, b := range p.LogitBias {
		if id < 0 || (info.VocabSize > 0 && int(id) >= info.VocabSize) {
			return bad("logit bias for token %d outside vocabulary of %d", id, info.VocabSize)
		}
		if math.IsNaN(float64(b)) {
			return bad("logit bias for token %d is NaN", id)
		}
	}
	return nil
}

// nonEmpty returns stops without empty strings (an empty stop string would
// match at once; it is ignored).
func nonEmpty(stops []string) []string {
	var out []string
	for _, s := range stops {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
