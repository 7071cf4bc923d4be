package serve

import (
	"encoding/json"
	"net/http"
)

// sseWriter writes server-sent events, one JSON object per "data:" line.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error // the first write error: the client is gone
}

func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
}

// send writes one event holding v.
func (s *sseWriter) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic("BUG: stream chunk does not marshal: " + err.Error())
	}
	s.raw(b)
}

// raw writes one event holding b verbatim.
func (s *sseWriter) raw(b []byte) {
	if s.err != nil {
		return
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		s.err = err
		return
	}
	s.flush()
}

func (s *sseWriter) flush() {
	if err := s.rc.Flush(); err != nil && s.err == nil {
		s.err = err
	}
}

// done writes the terminating "data: [DONE]".
func (s *sseWriter) done() { s.raw([]byte("[DONE]")) }

// fail reports an error after the stream started, in OpenAI's error shape.
func (s *sseWriter) fail(e *apiError) { s.send(e.body()) }

func (s *sseWriter) failed() bool { return s.err != nil }

// eventStream writes one streamed response: OpenAI's server-sent events
// (sseWriter), the Responses API's named events, Ollama's NDJSON lines.
type eventStream interface {
	send(v any)       // one chunk
	fail(e *apiError) // an error after the stream started
	done()            // the end of a stream that succeeded
	failed() bool     // a write failed: the client is gone
}

// streamShape is a shape whose streams are not OpenAI's chat SSE.
type streamShape interface {
	newStream(w http.ResponseWriter) eventStream
}

// errorShape is a shape whose error bodies are not OpenAI's.
type errorShape interface {
	errorBody(e *apiError) any
}

// startStream starts the stream of sh's response.
func startStream(w http.ResponseWriter, sh shape) eventStream {
	if ss, ok := sh.(streamShape); ok {
		return ss.newStream(w)
	}
	return newSSE(w)
}

// writeShaped sends e as sh's error body (OpenAI's by default).
func writeShaped(w http.ResponseWriter, sh shape, e *apiError) {
	if es, ok := sh.(errorShape); ok {
		e.setHeaders(w)
		writeJSON(w, e.Status, es.errorBody(e))
		return
	}
	writeError(w, e)
}
