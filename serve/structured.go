package serve

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/grammar"
	"github.com/memra-ai/memra/serve/plugin"
	"github.com/memra-ai/memra/serve/tools"
)

// schemaCacheSize bounds the compiled response_format grammars kept.
const schemaCacheSize = 128

// constraints holds what structured output needs per server: one token
// vocabulary per model (built on first use) and the compiled schemas,
// keyed by a hash of their text, in a bounded LRU.
type constraints struct {
	mu      sync.Mutex
	vocabs  map[*Model]*modelVocab
	schemas map[[32]byte]*list.Element
	order   *list.List // of *schemaEntry, most recent first
}

type modelVocab struct {
	once  sync.Once
	vocab *grammar.Vocabulary
	eog   []int32
}

type schemaEntry struct {
	key [32]byte
	g   *grammar.Grammar
}

func newConstraints() *constraints {
	return &constraints{vocabs: map[*Model]*modelVocab{}, schemas: map[[32]byte]*list.Element{}, order: list.New()}
}

// vocabulary returns m's token vocabulary, or nil when m's tokenizer cannot
// give token bytes.
func (c *constraints) vocabulary(m *Model) *modelVocab {
	src, ok := m.Engine.Tokenizer().(grammar.TokenSource)
	if !ok {
		return nil
	}
	c.mu.Lock()
	mv := c.vocabs[m]
	if mv == nil {
		mv = &modelVocab{}
		c.vocabs[m] = mv
	}
	c.mu.Unlock()
	mv.once.Do(func() {
		mv.vocab = grammar.NewVocabulary(src)
		for id := 0; id < src.VocabSize(); id++ {
			if src.IsEOG(int32(id)) {
				mv.eog = append(mv.eog, int32(id))
			}
		}
	})
	return mv
}

// schema compiles (or finds) the grammar of a response_format object.
func (c *constraints) schema(raw []byte) (*grammar.Grammar, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("%w: %v", grammar.ErrSyntax, err)
	}
	key := sha256.Sum256(compact.Bytes())
	c.mu.Lock()
	if e, ok := c.schemas[key]; ok {
		c.order.MoveToFront(e)
		g := e.Value.(*schemaEntry).g
		c.mu.Unlock()
		return g, nil
	}
	c.mu.Unlock()
	g, err := grammar.FromResponseFormat(compact.Bytes())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.schemas[key]; ok {
		return e.Value.(*schemaEntry).g, nil
	}
	c.schemas[key] = c.order.PushFront(&schemaEntry{key: key, g: g})
	for c.order.Len() > schemaCacheSize {
		last := c.order.Back()
		delete(c.schemas, last.Value.(*schemaEntry).key)
		c.order.Remove(last)
	}
	return g, nil
}

// grammarError maps a compile failure to a 400 naming the field.
func grammarError(param string, err error) *apiError {
	switch {
	case errors.Is(err, grammar.ErrUnsupported), errors.Is(err, grammar.ErrSyntax),
		errors.Is(err, grammar.ErrInvalidSchema), errors.Is(err, grammar.ErrLeftRecursion),
		errors.Is(err, grammar.ErrEmpty), errors.Is(err, grammar.ErrTooLarge),
		errors.Is(err, tools.ErrBadTools), errors.Is(err, tools.ErrNoSyntax):
		return badRequest(param, "%s: %v", param, err)
	}
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: param + ": " + err.Error()}
}

// noVocab is the refusal for a model whose tokenizer gives no token bytes.
func noVocab(param string, m *Model) *apiError {
	return badRequest(param, "%s needs token bytes, which model %q's tokenizer does not give", param, m.ID)
}

// structured reads response_format and grammar into p.newMask. A grammar
// string is GBNF; an object names a grammar plugin.
func (s *Server) structured(m *Model, c *commonFields, p *genParams) *apiError {
	rf := bytes.TrimSpace(c.ResponseFormat)
	gr := bytes.TrimSpace(c.Grammar)
	var g *grammar.Grammar
	param := ""
	if len(rf) > 0 && string(rf) != "null" {
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(rf, &head); err != nil {
			return badRequest("response_format", "response_format must be an object with a type")
		}
		switch head.Type {
		case "", "text":
		case "json_object", "json_schema":
			var err error
			if g, err = s.cons.schema(rf); err != nil {
				return grammarError("response_format", err)
			}
			param = "response_format"
		default:
			return badRequest("response_format", "response_format type %q is not one of text, json_object, json_schema", head.Type)
		}
	}
	if len(gr) > 0 && string(gr) != "null" {
		if g != nil {
			return badRequest("grammar", "grammar and response_format cannot be combined")
		}
		if gr[0] == '{' {
			return s.pluginGrammar(m, gr, p)
		}
		var text string
		if err := json.Unmarshal(gr, &text); err != nil {
			return badRequest("grammar", "grammar must be a string of GBNF rules or an object {\"plugin\": NAME, \"source\": …}")
		}
		var err error
		if g, err = grammar.FromGBNF(text); err != nil {
			return grammarError("grammar", err)
		}
		param = "grammar"
	}
	if g == nil {
		return nil
	}
	mv := s.cons.vocabulary(m)
	if mv == nil {
		return noVocab(param, m)
	}
	p.newMask = func() (runtime.Mask, error) { return grammar.NewSamplerMask(g, mv.vocab), nil }
	return nil
}

// pluginGrammar installs a grammar plugin's mask for "grammar": {"plugin":
// NAME, "source": …}. The object is checked here; each choice's Matcher is
// started when the request is submitted (pluginMaskError maps its errors).
func (s *Server) pluginGrammar(m *Model, raw json.RawMessage, p *genParams) *apiError {
	if _, err := plugin.ParseGrammarRequest(raw); err != nil {
		return badRequest("grammar", "grammar: %v", err)
	}
	src, ok := m.Engine.Tokenizer().(plugin.TokenSource)
	if !ok {
		return noVocab("grammar", m)
	}
	raw = bytes.Clone(raw)
	set := s.plugins
	p.newMask = func() (runtime.Mask, error) {
		mt, err := set.NewMask(raw, src)
		if err != nil {
			return nil, err // a nil *Matcher must not become a non-nil Mask
		}
		return mt, nil
	}
	return nil
}

// pluginMaskError maps a failure to start a grammar plugin's Matcher: the
// request's fault (a malformed object, an unknown plugin, a source the
// plugin refuses) is a 400, anything else (a trap, a timeout) a 500.
func (s *Server) pluginMaskError(err error) *apiError {
	switch {
	case errors.Is(err, plugin.ErrBadGrammarRequest), errors.Is(err, plugin.ErrUnknown),
		errors.Is(err, plugin.ErrPluginError):
		return badRequest("grammar", "grammar: %v", err)
	}
	return s.pluginFailure("grammar plugin failed", "grammar", err)
}

// pluginFailure is the 500 of a plugin that failed (trapped, timed out,
// ran out of memory) while serving a request. The client gets the error's
// text (the plugin's own message, never its stack trace) and a request
// id; the log gets the id with the whole trace (plugin.Trace).
func (s *Server) pluginFailure(what, param string, err error, attrs ...any) *apiError {
	id := newID("req_")
	s.log.Error(what, append([]any{"request_id", id, "err", err, "trace", plugin.Trace(err)}, attrs...)...)
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Param: param,
		Message: fmt.Sprintf("%s: %v (request id %s; the server log has the details)", what, err, id)}
}
