package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/memra-ai/memra/runtime"
)

// ollamaDetails is a model's details in /api/tags and /api/show.
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaTag is one entry of /api/tags.
type ollamaTag struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt string        `json:"modified_at"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    ollamaDetails `json:"details"`
}

// ollamaName is a model's name as Ollama spells it: with a tag.
func ollamaName(m *Model) string {
	if strings.Contains(m.ID, ":") {
		return m.ID
	}
	return m.ID + ":latest"
}

func (m *Model) details() ollamaDetails {
	arch := m.Engine.Info().Arch
	return ollamaDetails{Format: m.Facts.Format, Family: arch, Families: []string{arch},
		ParameterSize: parameterSize(m.Facts.Parameters), QuantizationLevel: m.Facts.Quantization}
}

// parameterSize writes a parameter count as Ollama does: 8.0B, 494.0M.
func parameterSize(n int64) string {
	switch {
	case n <= 0:
		return ""
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1fK", float64(n)/1e3)
}

// digest identifies the served file: the SHA-256 of its path, size and
// modification time (not of its bytes, which would take a pass over the
// weights), so it changes when the file does.
func (m *Model) digest() string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%d", m.ID, m.Facts.Path, m.Facts.Size, m.Facts.Modified.UnixNano())))
	return hex.EncodeToString(sum[:])
}

func (m *Model) modifiedAt() string {
	t := m.Facts.Modified
	if t.IsZero() {
		t = time.Unix(m.Created, 0)
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (s *Server) handleOllamaTags(w http.ResponseWriter, _ *http.Request) {
	tags := []ollamaTag{}
	for _, m := range s.models {
		tags = append(tags, ollamaTag{Name: ollamaName(m), Model: ollamaName(m), ModifiedAt: m.modifiedAt(),
			Size: m.Facts.Size, Digest: m.digest(), Details: m.details()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": tags})
}

// capabilities lists what a model does, with Ollama's names.
func capabilities(m *Model) []string {
	var out []string
	if m.Pooling != runtime.PoolNone {
		out = append(out, "embedding")
	} else {
		out = append(out, "completion")
	}
	if hasTools(m) {
		out = append(out, "tools")
	}
	if src := templateSource(m); strings.Contains(src, "<think>") || strings.Contains(src, "enable_thinking") || strings.Contains(src, "reasoning_content") {
		out = append(out, "thinking")
	}
	return out
}

func (s *Server) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"` // the older field
	}
	if e := decodeBody(r, &req); e != nil {
		writeOllamaError(w, e)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	m, e := s.lookupOllama(req.Model)
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	info := m.Engine.Info()
	arch := info.Arch
	mi := map[string]any{"general.architecture": arch, arch + ".context_length": info.ContextLength}
	if m.Facts.Parameters > 0 {
		mi["general.parameter_count"] = m.Facts.Parameters
	}
	if ee, ok := m.Engine.(EmbedEngine); ok && ee.EmbedWidth() > 0 {
		mi[arch+".embedding_length"] = ee.EmbedWidth()
		mi[arch+".pooling_type"] = m.Pooling.String()
	}
	params := fmt.Sprintf("temperature %g\ntop_k %d\ntop_p %g\nrepeat_penalty %g\nrepeat_last_n %d", ollamaTemperature,
		ollamaTopK, ollamaTopP, ollamaRepeatPenalty, ollamaRepeatLastN)
	writeJSON(w, http.StatusOK, map[string]any{
		"modelfile":    fmt.Sprintf("# served by memra as %s\nFROM %s\n", m.ID, m.Facts.Path),
		"parameters":   params,
		"template":     templateSource(m),
		"details":      m.details(),
		"model_info":   mi,
		"capabilities": capabilities(m),
		"modified_at":  m.modifiedAt(),
	})
}

func (s *Server) handleOllamaVersion(w http.ResponseWriter, _ *http.Request) {
	v := s.cfg.Version
	if v == "" {
		v = "dev"
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": v})
}

// ollamaEmbedRequest is the body of POST /api/embed (and, with prompt,
// of the older /api/embeddings).
type ollamaEmbedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Prompt     *string         `json:"prompt"`
	Truncate   *bool           `json:"truncate"`
	Dimensions *int            `json:"dimensions"`
	Options    *ollamaOptions  `json:"options"`
	KeepAlive  json.RawMessage `json:"keep_alive"`
}

// ollamaEmbed runs an embedding request and returns the vectors and the
// tokens embedded. input is a string or a list of strings; truncate (on
// unless false) cuts an input to the model's context instead of refusing it.
func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request, req *ollamaEmbedRequest, input json.RawMessage) ([][]float32, int, string, bool) {
	m, e := s.lookupOllama(req.Model)
	if e != nil {
		writeOllamaError(w, e)
		return nil, 0, "", false
	}
	ee, e := embedder(m, "model")
	if e != nil {
		writeOllamaError(w, e)
		return nil, 0, "", false
	}
	var one string
	var many []string
	switch {
	case json.Unmarshal(input, &one) == nil:
		many = []string{one}
	case json.Unmarshal(input, &many) == nil:
	default:
		writeOllamaError(w, badRequest("input", "input must be a string or a list of strings"))
		return nil, 0, "", false
	}
	if len(many) == 0 {
		writeOllamaError(w, badRequest("input", "input is required"))
		return nil, 0, "", false
	}
	ctxLen := m.Engine.Info().ContextLength
	truncate := req.Truncate == nil || *req.Truncate
	inputs := make([][]int32, len(many))
	for i, text := range many {
		if text == "" {
			writeOllamaError(w, badRequest("input", "input %d is empty", i))
			return nil, 0, "", false
		}
		inputs[i] = m.Engine.Tokenizer().Encode(text, true, false)
		if truncate && ctxLen > 0 && len(inputs[i]) > ctxLen {
			inputs[i] = inputs[i][:ctxLen]
		}
	}
	dims := 0
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > ee.EmbedWidth() {
			writeOllamaError(w, badRequest("dimensions", "dimensions must be between 1 and the model's %d, got %d", ee.EmbedWidth(), *req.Dimensions))
			return nil, 0, "", false
		}
		dims = *req.Dimensions
	}
	vecs, tokens, e := s.embed(r, m, ee, runtime.EmbedRequest{Inputs: inputs, Pooling: m.Pooling, Dimensions: dims}, "input")
	if e != nil {
		writeOllamaError(w, e)
		return nil, 0, "", false
	}
	return vecs, tokens, m.ID, true
}

func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	var req ollamaEmbedRequest
	if e := decodeBody(r, &req); e != nil {
		writeOllamaError(w, e)
		return
	}
	start := time.Now()
	vecs, tokens, id, ok := s.ollamaEmbed(w, r, &req, req.Input)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": id, "embeddings": vecs,
		"total_duration": time.Since(start).Nanoseconds(), "load_duration": 0, "prompt_eval_count": tokens})
}

// handleOllamaEmbeddings is the older /api/embeddings: one prompt, one
// "embedding".
func (s *Server) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req ollamaEmbedRequest
	if e := decodeBody(r, &req); e != nil {
		writeOllamaError(w, e)
		return
	}
	if req.Prompt == nil {
		writeOllamaError(w, badRequest("prompt", "prompt is required"))
		return
	}
	raw, _ := json.Marshal(*req.Prompt)
	vecs, _, _, ok := s.ollamaEmbed(w, r, &req, raw)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"embedding": vecs[0]})
}
