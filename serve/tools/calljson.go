package tools

import (
	"bytes"
	"encoding/json"
	"strings"
)

// callJSON is one call object as models write it.
type callJSON struct {
	Name       *string         `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
}

// parseCallJSON reads {"name": …, "arguments"|"parameters": …}.
func parseCallJSON(s string) (Call, bool) {
	var c callJSON
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&c); err != nil || dec.More() {
		return Call{}, false
	}
	return c.call()
}

func (c callJSON) call() (Call, bool) {
	if c.Name == nil || *c.Name == "" {
		return Call{}, false
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	a, ok := normalizeArgs(args)
	if !ok {
		return Call{}, false
	}
	return Call{Name: *c.Name, Arguments: a}, true
}

// normalizeArgs turns an arguments value into compact JSON object text: an
// object as written, a string holding an object decoded, absent → {}.
func normalizeArgs(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		raw = json.RawMessage(strings.TrimSpace(s))
	}
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
}

// parseLlama reads [<|python_tag|>] call (';' call)*.
func parseLlama(s string) ([]Call, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimSpace(strings.TrimPrefix(s, pythonTag))
	dec := json.NewDecoder(strings.NewReader(s))
	var calls []Call
	for {
		var c callJSON
		if err := dec.Decode(&c); err != nil {
			return nil, false
		}
		call, ok := c.call()
		if !ok {
			return nil, false
		}
		calls = append(calls, call)
		rest := strings.TrimSpace(s[dec.InputOffset():])
		if rest == "" {
			return calls, true
		}
		if rest[0] != ';' {
			return nil, false
		}
		rest = strings.TrimSpace(rest[1:])
		if rest == "" {
			return calls, true
		}
		s = rest
		dec = json.NewDecoder(strings.NewReader(s))
	}
}

// parseMistral reads the JSON array (or single object) after [TOOL_CALLS].
func parseMistral(s string) ([]Call, bool) {
	s = strings.TrimSpace(s)
	var list []callJSON
	if strings.HasPrefix(s, "{") {
		var one callJSON
		if !strictDecode(s, &one) {
			return nil, false
		}
		list = []callJSON{one}
	} else if !strictDecode(s, &list) || len(list) == 0 {
		return nil, false
	}
	calls := make([]Call, 0, len(list))
	for _, c := range list {
		call, ok := c.call()
		if !ok {
			return nil, false
		}
		calls = append(calls, call)
	}
	return calls, true
}

// strictDecode decodes exactly one JSON value filling s.
func strictDecode(s string, v any) bool {
	dec := json.NewDecoder(strings.NewReader(s))
	if dec.Decode(v) != nil {
		return false
	}
	_, err := dec.Token()
	return err != nil // io.EOF: nothing after the value
}
