package serve

import (
	"net/http"
	"strings"
)

// supportedParameters are the request fields every served model honours,
// as /v1/models advertises them.
var supportedParameters = []string{
	"max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
	"stop", "n", "stream", "stream_options", "presence_penalty", "frequency_penalty",
	"repetition_penalty", "logit_bias", "logprobs", "top_logprobs", "ignore_eos", "echo",
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
		ContextLength: m.Engine.Info().ContextLength, SupportedParameters: supportedParameters}
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
