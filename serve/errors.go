package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Errors of the server's own setup.
var (
	// ErrPublicWithoutKeys: a non-loopback bind was asked for without API keys.
	ErrPublicWithoutKeys = errors.New("serve: refusing to listen on a non-loopback address without API keys")
	// ErrConfig: the server configuration is invalid.
	ErrConfig = errors.New("serve: invalid configuration")
)

// OpenAI's error types and codes, as clients match on them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
	typeUnavailable    = "service_unavailable"
)

// apiError is an error the client sees in OpenAI's JSON error shape.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string // "" → null
	Code    string // "" → null
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 naming the offending field.
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param,
		Message: fmt.Sprintf(format, args...)}
}

// errorBody is the wire form {"error":{"message","type","param","code"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (e *apiError) body() errorBody {
	return errorBody{Error: errorDetail{Message: e.Message, Type: e.Type,
		Param: nullable(e.Param), Code: nullable(e.Code)}}
}

// writeError sends e as a JSON error response.
func writeError(w http.ResponseWriter, e *apiError) {
	e.setHeaders(w)
	writeJSON(w, e.Status, e.body())
}

// setHeaders sets the headers an error response of e carries, whatever
// its body's shape: Retry-After, and WWW-Authenticate on a 401.
func (e *apiError) setHeaders(w http.ResponseWriter) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="memra"`)
	}
}

// writeJSON sends v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic("BUG: response does not marshal: " + err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
