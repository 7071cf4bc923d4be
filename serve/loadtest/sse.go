package loadtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// maxLine bounds one line of the event stream.
const maxLine = 1 << 20

// errDone stops reading at the [DONE] event.
var errDone = errors.New("done")

// readEvents reads a server-sent event stream and calls fn with the data of
// each event (data lines joined by "\n"), in order. Comment lines and fields
// other than data are ignored. An event still open at the end of the stream
// is delivered too. It stops at the first error fn returns.
func readEvents(r io.Reader, fn func(data []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	have := false
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return fmt.Errorf("%w: line longer than %d bytes", ErrStream, maxLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && err != io.EOF {
			return err
		}
		if len(line) > 0 || err == nil {
			l := bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			switch {
			case len(l) == 0:
				if have {
					if ferr := fn(data); ferr != nil {
						return ferr
					}
				}
				data, have = data[:0], false
			case l[0] == ':':
			default:
				name, value, _ := bytes.Cut(l, []byte(":"))
				value = bytes.TrimPrefix(value, []byte(" "))
				if string(name) == "data" {
					if have {
						data = append(data, '\n')
					}
					data = append(data, value...)
					have = true
				}
			}
		}
		line = line[:0]
		if err == io.EOF {
			if have {
				return fn(data)
			}
			return nil
		}
	}
}

// chunk is what the load test reads from one streamed chunk.
type chunk struct {
	content          bool   // some choice carries non-empty text
	text             string // the answer text of the choices (no reasoning)
	usage            bool   // a usage object came
	promptTokens     int
	completionTokens int
	cached           bool // usage.prompt_tokens_details.cached_tokens came
	cachedTokens     int
}

// wireChunk is the JSON of a chat.completion.chunk or text_completion chunk.
type wireChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// parseChunk decodes one event's data. Reasoning text counts as content:
// the tokens were generated either way; it is not part of the text, which
// a conversation sends back as the assistant's message.
func parseChunk(data []byte) (chunk, error) {
	var w wireChunk
	if err := json.Unmarshal(data, &w); err != nil {
		return chunk{}, fmt.Errorf("%w: event %.80q: %v", ErrStream, data, err)
	}
	if len(w.Error) > 0 && string(w.Error) != "null" {
		return chunk{}, fmt.Errorf("%w: error event: %s", ErrServer, errorMessage(w.Error))
	}
	var c chunk
	for _, ch := range w.Choices {
		if ch.Text != "" || ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" || ch.Delta.Reasoning != "" {
			c.content = true
		}
		c.text += ch.Text + ch.Delta.Content
	}
	if u := w.Usage; u != nil {
		c.usage = true
		c.promptTokens, c.completionTokens = u.PromptTokens, u.CompletionTokens
		if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			c.cached, c.cachedTokens = true, *d.CachedTokens
		}
	}
	return c, nil
}

// errorMessage extracts error.message from an OpenAI error object, or
// returns the raw JSON cut short.
func errorMessage(raw []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	if len(raw) > 200 {
		raw = raw[:200]
	}
	return string(raw)
}

// consumeStream reads a streamed response body into s: time to first token
// (first chunk with content), inter-token latencies, chunk count and the
// server's usage, cached prompt tokens included. t0 is when the request was
// sent. When reply is not nil, the streamed answer text is appended to it.
func consumeStream(body io.Reader, t0 time.Time, s *Sample, reply *strings.Builder) error {
	var last time.Time
	done := false
	err := readEvents(body, func(data []byte) error {
		now := time.Now()
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			done = true
			return errDone
		}
		c, err := parseChunk(data)
		if err != nil {
			return err
		}
		if c.usage {
			s.UsageReported = true
			s.PromptTokens, s.CompletionTokens = c.promptTokens, c.completionTokens
			s.CachedReported, s.CachedTokens = c.cached, c.cachedTokens
		}
		if reply != nil {
			reply.WriteString(c.text)
		}
		if c.content {
			s.Chunks++
			if last.IsZero() {
				s.TTFT = now.Sub(t0)
			} else {
				s.ITL = append(s.ITL, now.Sub(last))
			}
			last = now
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return err
	}
	if !done {
		return fmt.Errorf("%w: stream ended without [DONE]", ErrStream)
	}
	if !s.UsageReported || s.CompletionTokens == 0 {
		s.CompletionTokens = s.Chunks
	}
	return nil
}
