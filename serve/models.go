package serve

import (
	"net/http"
	"reflect"
	"slices"
	"strings"

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

// modelObject is one entry of /v1/models.
type modelObject struct {
	ID                  string   `json:"id"`
	Object              string   `json:"object"`
	Created             int64    `json:"created"`
	OwnedBy             string   `json:"owned_by"`
	ContextLength       int      `json:"context_length"`
	SupportedParameters []string `json:"supported_parameters"`
}

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

func (m *Model) object() modelObject {
	return modelObject{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: m.OwnedBy,
		ContextLength: m.Engine.Info().ContextLength, SupportedParameters: supportedParameters(m)}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", Data: []modelObject{}}
	for _, m := range s.models {
		list.Data = append(list.Data, m.object())
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
	writeJSON(w, http.StatusOK, m.object())
}
