package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/memra-ai/memra/runtime"
)

// maxEmbedInputs is OpenAI's bound on the inputs of one embeddings request.
const maxEmbedInputs = 2048

// EmbedEngine is an Engine that serves embeddings (runtime.Engine through
// FromRuntime, or a fake in tests). A model serves /v1/embeddings when its
// Engine is one with a positive width and its Model.Pooling is set.
type EmbedEngine interface {
	// EmbedWidth is the width of the model's vectors, 0 when it serves none.
	EmbedWidth() int
	// Embed returns each input's pooled, L2-normalised vector; see
	// runtime.Engine.Embed for its errors.
	Embed(ctx context.Context, req runtime.EmbedRequest) ([][]float32, error)
}

// embeddingRequest is the body of POST /v1/embeddings.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           *string         `json:"user"`
}

// Response shapes of embeddings.
type (
	embeddingList struct {
		Object string          `json:"object"`
		Data   []embeddingData `json:"data"`
		Model  string          `json:"model"`
		Usage  embeddingUsage  `json:"usage"`
	}
	embeddingData struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
	}
	embeddingUsage struct {
		PromptTokens int        `json:"prompt_tokens"`
		TotalTokens  int        `json:"total_tokens"`
		Cost         *costValue `json:"cost,omitempty"`
	}
)

// embedder returns m's embedding engine, or the 400 of a model that
// serves no embeddings.
func embedder(m *Model, param string) (EmbedEngine, *apiError) {
	ee, ok := m.Engine.(EmbedEngine)
	if !ok || m.Pooling == runtime.PoolNone || ee.EmbedWidth() == 0 {
		return nil, badRequest(param, "model %q does not serve embeddings: it declares no pooling (serve it with --pooling mean|cls|last, "+
			"or serve an embedding model)", m.ID)
	}
	return ee, nil
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	m, e := s.lookupModel(req.Model)
	if e != nil {
		writeError(w, e)
		return
	}
	ee, e := embedder(m, "model")
	if e != nil {
		writeError(w, e)
		return
	}
	base64Out := false
	if req.EncodingFormat != nil {
		switch *req.EncodingFormat {
		case "float":
		case "base64":
			base64Out = true
		default:
			writeError(w, badRequest("encoding_format", "encoding_format must be float or base64, got %q", *req.EncodingFormat))
			return
		}
	}
	dims := 0
	if req.Dimensions != nil {
		if width := ee.EmbedWidth(); *req.Dimensions < 1 || *req.Dimensions > width {
			writeError(w, badRequest("dimensions", "dimensions must be between 1 and the model's %d, got %d", width, *req.Dimensions))
			return
		}
		dims = *req.Dimensions
	}
	inputs, e := parseEmbedInput(req.Input, m)
	if e != nil {
		writeError(w, e)
		return
	}
	vecs, tokens, e := s.embed(r, m, ee, runtime.EmbedRequest{Inputs: inputs, Pooling: m.Pooling, Dimensions: dims}, "input")
	if e != nil {
		writeError(w, e)
		return
	}
	out := embeddingList{Object: "list", Model: m.ID, Data: make([]embeddingData, len(vecs)),
		Usage: embeddingUsage{PromptTokens: tokens, TotalTokens: tokens}}
	for i, v := range vecs {
		d := embeddingData{Object: "embedding", Index: i, Embedding: v}
		if base64Out {
			d.Embedding = base64Floats(v)
		}
		out.Data[i] = d
	}
	if s.cfg.UsageCost {
		out.Usage.Cost = m.cost(tokens, 0, 0)
	}
	writeJSON(w, http.StatusOK, out)
}

// embed runs req on m's engine under the server's admission, drain and
// metrics, and returns the vectors and the tokens of the inputs; param
// names the inputs' field in errors.
func (s *Server) embed(r *http.Request, m *Model, ee EmbedEngine, req runtime.EmbedRequest, param string) ([][]float32, int, *apiError) {
	if e := s.modelFailed(m); e != nil {
		return nil, 0, e
	}
	ctxLen := m.Engine.Info().ContextLength
	tokens := 0
	for i, in := range req.Inputs {
		if ctxLen > 0 && len(in) > ctxLen {
			return nil, 0, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: "context_length_exceeded",
				Message: fmt.Sprintf("input %d has %d tokens; this model's maximum context length is %d tokens", i, len(in), ctxLen)}
		}
		tokens += len(in)
	}
	if !s.enter() {
		return nil, 0, errDraining(s.retryAfterSeconds())
	}
	defer s.leave()
	ctx, cancel := s.requestContext(r)
	defer cancel()
	vecs, err := ee.Embed(ctx, req)
	if err != nil {
		switch {
		case errors.Is(err, runtime.ErrBadRequest), errors.Is(err, runtime.ErrTooLong), errors.Is(err, runtime.ErrNotEmbedding):
			return nil, 0, badRequest(param, "%v", err)
		}
		if !errors.Is(err, runtime.ErrOverloaded) && !errors.Is(err, context.Canceled) {
			s.log.Error("embedding failed", "model", m.ID, "err", err)
		}
		return nil, 0, s.engineError(err, tokens, &genParams{model: m})
	}
	s.metrics.promptTokens.WithLabelValues(m.ID).Add(float64(tokens))
	return vecs, tokens, nil
}

// parseEmbedInput accepts a string, a list of strings, a list of token ids
// or a list of lists of token ids, as OpenAI does; strings are tokenized
// with the vocabulary's special tokens (BOS, and EOS where the model's
// tokenizer adds it: the token whose state a last-pooling model reads).
func parseEmbedInput(raw json.RawMessage, m *Model) ([][]int32, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "input is required")
	}
	var one string
	var strs, many []string
	var ids []int64
	var lists, idLists [][]int64
	tok := m.Engine.Tokenizer()
	var out [][]int32
	// (a failed Unmarshal may leave its target half filled: each form
	// decodes into a variable of its own)
	switch {
	case json.Unmarshal(raw, &one) == nil:
		many = []string{one}
	case json.Unmarshal(raw, &strs) == nil:
		many = strs
	case json.Unmarshal(raw, &ids) == nil:
		idLists = [][]int64{ids}
	case json.Unmarshal(raw, &lists) == nil:
		idLists = lists
	default:
		return nil, badRequest("input", "input must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	if len(many) == 0 && len(idLists) == 0 {
		return nil, badRequest("input", "input must not be an empty list")
	}
	if n := len(many) + len(idLists); n > maxEmbedInputs {
		return nil, badRequest("input", "input has %d entries; at most %d are allowed", n, maxEmbedInputs)
	}
	for i, text := range many {
		if text == "" {
			return nil, badRequest("input", "input %d is an empty string", i)
		}
		out = append(out, tok.Encode(text, true, false))
	}
	vocab := tok.VocabSize()
	for i, l := range idLists {
		if len(l) == 0 {
			return nil, badRequest("input", "input %d is an empty token list", i)
		}
		p, j := tokenIDs(l, vocab)
		if j >= 0 {
			return nil, badRequest("input", "input %d token %d is %d, not a token id of this model (0 to %d)", i, j, l[j], vocab-1)
		}
		out = append(out, p)
	}
	return out, nil
}

// base64Floats encodes v as OpenAI's base64 embeddings do: the
// little-endian float32 bytes.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
