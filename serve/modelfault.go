package serve

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/memra-ai/memra/runtime"
)

// A model whose backend met runtime.ErrModelFile (its file shrank or was
// replaced while served) is out of service until the server restarts:
// its requests get errModelFailed, /ready turns 503 naming it, and /health
// stays 200.

// markFailed takes m out of service when err says its file changed, and
// reports whether it did.
func (s *Server) markFailed(m *Model, err error) bool {
	if !errors.Is(err, runtime.ErrModelFile) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = map[*Model]error{}
	}
	if _, done := s.failed[m]; !done {
		s.failed[m] = err
		s.log.Error("model out of service: its file changed while it was served", "model", m.ID, "err", err)
	}
	return true
}

// modelFailed is the refusal of a request to m when m is out of service.
func (s *Server) modelFailed(m *Model) *apiError {
	s.mu.Lock()
	_, failed := s.failed[m]
	s.mu.Unlock()
	if !failed {
		return nil
	}
	return errModelFailed(m.ID)
}

func errModelFailed(id string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "model_file_changed",
		Message: fmt.Sprintf("model %q is out of service: its file changed (shrank or was replaced) while it was served, "+
			"so its weights can no longer be read; restart the server to load it again", id)}
}

// failedModels lists the models out of service, sorted.
func (s *Server) failedModels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for m := range s.failed {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return ids
}

// notReadyFailed is /ready's answer while some model is out of service.
func notReadyFailed(ids []string) *apiError {
	e := errModelFailed(strings.Join(ids, ", "))
	if len(ids) > 1 {
		e.Message = fmt.Sprintf("models %s are out of service: their files changed while they were served; "+
			"restart the server to load them again", strings.Join(ids, ", "))
	}
	return e
}
