package serve

import (
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/grammar"
)

// notParameters are request fields that name what to generate from rather
// than how, and fields the server refuses but for a trivial value (suffix
// only empty, best_of only equal to n); /v1/models does not list them.
var notParameters = map[string]bool{"model": true, "messages": true, "prompt": true, "suffix": true, "best_of": true}

// Request fields by endpoint, read from the request types' JSON tags, so
// that what /v1/models lists is what the decoders take.
var (
	chatParameters       = jsonFields(reflect.TypeFor[chatRequest]())
	completionParameters = jsonFields(reflect.TypeFor[completionRequest]())
)

// parameterNeeds are the fields a model honours only with a capability:
// structured output needs its tokenizer's token bytes.
var parameterNeeds = map[string]func(m *Model) bool{
	"response_format": hasTokenBytes,
	"grammar":         hasTokenBytes,
}

func hasTokenBytes(m *Model) bool {
	_, ok := m.Engine.Tokenizer().(grammar.TokenSource)
	return ok
}

// jsonFields lists the JSON names of t's fields, embedded structs' first,
// leaving out notParameters.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && !notParameters[name] {
			out = append(out, name)
		}
	}
	return out
}

// supportedParameters are the request fields m honours: those of
// completions, and of chat when m has a chat template, less those whose
// capability m lacks.
func supportedParameters(m *Model) []string {
	fields := completionParameters
	if m.Template != nil {
		fields = append(slices.Clone(chatParameters), completionParameters...)
	}
	var out []string
	for _, f := range fields {
		if need := parameterNeeds[f]; (need == nil || need(m)) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// modelObject is one entry of /v1/models; the fields after
// supported_parameters come from the model metadata file.
type modelObject struct {
	ID                  string         `json:"id"`
	Object              string         `json:"object"`
	Created             int64          `json:"created"`
	OwnedBy             string         `json:"owned_by"`
	ContextLength       int            `json:"context_length"`
	SupportedParameters []string       `json:"supported_parameters"`
	Name                string         `json:"name,omitempty"`
	Pooling             string         `json:"pooling,omitempty"`
	EmbeddingDimensions int            `json:"embedding_dimensions,omitempty"`
	InputModalities     []string       `json:"input_modalities,omitempty"`
	OutputModalities    []string       `json:"output_modalities,omitempty"`
	MaxOutputTokens     int            `json:"max_output_tokens,omitempty"`
	Pricing             *pricingObject `json:"pricing,omitempty"`
	Provider            *Provider      `json:"provider,omitempty"`
}

// pricingObject shows a model's prices per million tokens: each the
// price per token of the metadata file shifted six decimal places, as
// exact decimal strings.
type pricingObject struct {
	Currency   string `json:"currency"`
	Unit       string `json:"unit"`
	Input      string `json:"input,omitempty"`
	Output     string `json:"output,omitempty"`
	CacheRead  string `json:"cache_read,omitempty"`
	CacheWrite string `json:"cache_write,omitempty"`
}

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

func (s *Server) object(m *Model) modelObject {
	o := modelObject{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: m.OwnedBy,
		ContextLength: m.Engine.Info().ContextLength, SupportedParameters: supportedParameters(m)}
	if m.Pooling != runtime.PoolNone {
		o.Pooling = m.Pooling.String()
		if ee, ok := m.Engine.(EmbedEngine); ok {
			o.EmbeddingDimensions = ee.EmbedWidth()
		}
	}
	if s.cfg.Metadata != nil {
		o.Provider = s.cfg.Metadata.Provider
	}
	md := m.Meta
	if md == nil {
		return o
	}
	o.Name, o.InputModalities, o.OutputModalities, o.MaxOutputTokens = md.DisplayName, md.InputModalities, md.OutputModalities, md.MaxOutputTokens
	if md.ContextLength > 0 {
		o.ContextLength = md.ContextLength
	}
	if p := md.Pricing; p != nil {
		perM := func(d *decimal) string {
			if d == nil {
				return ""
			}
			return d.shift(6).String()
		}
		o.Pricing = &pricingObject{Currency: s.cfg.Metadata.Currency, Unit: "1M tokens",
			Input: perM(p.Input), Output: perM(p.Output), CacheRead: perM(p.CacheRead), CacheWrite: perM(p.CacheWrite)}
	}
	return o
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", Data: []modelObject{}}
	for _, m := range s.models {
		list.Data = append(list.Data, s.object(m))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	m, ok := s.byID[id]
	if !ok {
		_, e := s.lookupModel(id)
		if id == "" {
			e = &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "model_not_found", Message: "no model id given"}
		}
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, s.object(m))
}
