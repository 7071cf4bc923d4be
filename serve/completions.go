package serve

import (
	"encoding/json"
	"net/http"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	commonFields
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     *bool           `json:"echo"`
	Suffix   *string         `json:"suffix"`
	BestOf   *int            `json:"best_of"`
}

// Response shapes of text completions.
type (
	completion struct {
		ID      string             `json:"id"`
		Object  string             `json:"object"`
		Created int64              `json:"created"`
		Model   string             `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   *usage             `json:"usage,omitempty"`
	}
	completionChoice struct {
		Text         string        `json:"text"`
		Index        int           `json:"index"`
		Logprobs     *completionLP `json:"logprobs"`
		FinishReason *string       `json:"finish_reason"`
	}
	completionLP struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
)

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	m, e := s.lookupModel(req.Model)
	if e != nil {
		writeError(w, e)
		return
	}
	var p genParams
	if e := req.validate(m, req.MaxTokens, &p); e != nil {
		writeError(w, e)
		return
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > maxTopLogprobs {
			writeError(w, badRequest("logprobs", "logprobs must be between 0 and %d, got %d", maxTopLogprobs, *req.Logprobs))
			return
		}
		p.logprobs, p.topLogprobs = true, *req.Logprobs
	}
	if e := s.structured(m, &req.commonFields, &p); e != nil {
		writeError(w, e)
		return
	}
	if req.Suffix != nil && *req.Suffix != "" {
		writeError(w, badRequest("suffix", "suffix is not supported"))
		return
	}
	if req.BestOf != nil && *req.BestOf != 1 && *req.BestOf != p.n {
		writeError(w, badRequest("best_of", "best_of is not supported (only best_of equal to n)"))
		return
	}
	tok := m.Engine.Tokenizer()
	prompts, texts, e := parsePrompt(req.Prompt, tok)
	if e != nil {
		writeError(w, e)
		return
	}
	if len(prompts)*p.n > maxChoices {
		writeError(w, badRequest("n", "prompts × n is %d; at most %d choices per request", len(prompts)*p.n, maxChoices))
		return
	}
	for _, pr := range prompts {
		if e := p.checkFits(len(pr)); e != nil {
			e.Param = "prompt"
			writeError(w, e)
			return
		}
	}
	sh := completionShape{n: p.n}
	if req.Echo != nil && *req.Echo {
		if p.logprobs {
			writeError(w, badRequest("echo", "echo together with logprobs is not supported"))
			return
		}
		sh.echo = texts
	}
	s.generate(w, r, &p, prompts, sh)
}

// parsePrompt accepts a string, a list of strings, a list of token ids or a
// list of lists of token ids. It returns the token ids and the text of each.
func parsePrompt(raw json.RawMessage, tok Tokenizer) ([][]int32, []string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, badRequest("prompt", "prompt is required")
	}
	var one string
	var many []string
	var ids []int64
	var idLists [][]int64
	var texts []string
	switch {
	case json.Unmarshal(raw, &one) == nil:
		texts = []string{one}
	case json.Unmarshal(raw, &many) == nil:
		if len(many) == 0 {
			return nil, nil, badRequest("prompt", "prompt must not be an empty list")
		}
		texts = many
	case json.Unmarshal(raw, &ids) == nil:
		idLists = [][]int64{ids}
	case json.Unmarshal(raw, &idLists) == nil:
		if len(idLists) == 0 {
			return nil, nil, badRequest("prompt", "prompt must not be an empty list")
		}
	default:
		return nil, nil, badRequest("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	var out [][]int32
	for i, t := range texts {
		p := tok.Encode(t, true, true)
		if len(p) == 0 {
			return nil, nil, badRequest("prompt", "prompt %d is empty", i)
		}
		out = append(out, p)
	}
	vocab := tok.VocabSize()
	for i, l := range idLists {
		if len(l) == 0 {
			return nil, nil, badRequest("prompt", "prompt %d is an empty token list", i)
		}
		p, j := tokenIDs(l, vocab)
		if j >= 0 {
			return nil, nil, badRequest("prompt", "prompt %d token %d is %d, not a token id of this model (0 to %d)", i, j, l[j], vocab-1)
		}
		out = append(out, p)
		texts = append(texts, tok.Decode(p))
	}
	return out, texts, nil
}

// completionShape writes text_completion objects. echo holds each prompt's
// text when the request asked for it.
type completionShape struct {
	n    int
	echo []string
}

func (completionShape) idPrefix() string { return "cmpl-" }

func (c completionShape) prefix(index int) string {
	if c.echo == nil {
		return ""
	}
	return c.echo[index/c.n]
}

func (c completionShape) blocking(h *respHeader, res []choiceResult, u usage) any {
	out := completion{ID: h.id, Object: "text_completion", Created: h.created, Model: h.model, Usage: &u}
	for i := range res {
		reason := string(res[i].finish)
		ch := completionChoice{Index: i, Text: c.prefix(i) + res[i].text.String(), FinishReason: &reason}
		if h.logprobs {
			ch.Logprobs = completionLogprobs(res[i].tokens, 0)
		}
		out.Choices = append(out.Choices, ch)
	}
	return out
}

func (c completionShape) begin(h *respHeader, index int) any {
	if p := c.prefix(index); p != "" {
		return h.completionChunk(completionChoice{Index: index, Text: p})
	}
	return nil
}

func (completionShape) delta(h *respHeader, index int, d choiceDelta) []any {
	ch := completionChoice{Index: index, Text: d.text}
	if h.logprobs {
		ch.Logprobs = completionLogprobs(d.tokens, d.offset)
	}
	return []any{h.completionChunk(ch)}
}

func (completionShape) finish(h *respHeader, index int, reason string) []any {
	return []any{h.completionChunk(completionChoice{Index: index, FinishReason: &reason})}
}

func (completionShape) usage(h *respHeader, u usage) any {
	c := h.completionChunk()
	c.Choices = []completionChoice{}
	c.Usage = &u
	return c
}

func (h *respHeader) completionChunk(choices ...completionChoice) completion {
	return completion{ID: h.id, Object: "text_completion", Created: h.created, Model: h.model, Choices: choices}
}

// completionLogprobs is the legacy logprobs object; offset is the byte
// offset of the first token in the choice's text.
func completionLogprobs(toks []tokenInfo, offset int) *completionLP {
	lp := &completionLP{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, t := range toks {
		lp.Tokens = append(lp.Tokens, string(t.Bytes))
		lp.TokenLogprobs = append(lp.TokenLogprobs, finiteLogprob(t.Logprob))
		top := make(map[string]float64, len(t.Top))
		for _, a := range t.Top {
			if _, dup := top[string(a.Bytes)]; !dup {
				top[string(a.Bytes)] = finiteLogprob(a.Logprob)
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(t.Bytes)
	}
	return lp
}

// tokenIDs returns ids as token ids of a vocabulary of vocab, and -1; or
// nil and the index of the first id outside it.
func tokenIDs(ids []int64, vocab int) ([]int32, int) {
	out := make([]int32, len(ids))
	for j, id := range ids {
		if id < 0 || id >= int64(vocab) {
			return nil, j
		}
		out[j] = int32(id)
	}
	return out, -1
}
