package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// fakeEmbedEngine is a fakeEngine that embeds: an input's vector is a pure
// function of its tokens, unit length; full makes every request
// ErrOverloaded, as a full engine's admission does.
type fakeEmbedEngine struct {
	*fakeEngine
	width int

	mu    sync.Mutex
	full  bool
	calls []runtime.EmbedRequest
}

func newFakeEmbedEngine(width int) *fakeEmbedEngine {
	return &fakeEmbedEngine{fakeEngine: newFakeEngine(), width: width}
}

func (f *fakeEmbedEngine) EmbedWidth() int { return f.width }

func (f *fakeEmbedEngine) Embed(ctx context.Context, req runtime.EmbedRequest) ([][]float32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.full {
		return nil, runtime.ErrOverloaded
	}
	f.calls = append(f.calls, req)
	out := make([][]float32, len(req.Inputs))
	for i, in := range req.Inputs {
		out[i] = runtime.Truncate(fakeEmbedding(in, f.width), req.Dimensions)
	}
	return out, nil
}

func fakeEmbedding(toks []int32, width int) []float32 {
	x := make([]float64, width)
	n := 0.0
	for i := range x {
		for j, t := range toks {
			x[i] += math.Cos(float64(int(t)*(i+3)) + float64(j))
		}
		n += x[i] * x[i]
	}
	out := make([]float32, width)
	for i := range x {
		out[i] = float32(x[i] / math.Sqrt(n))
	}
	return out
}

func newEmbedServer(t *testing.T, e *fakeEmbedEngine, mod func(*Config)) *testServer {
	return newTestServer(t, nil, func(c *Config) {
		c.Models = append(c.Models, Model{ID: "embed", Engine: e, Pooling: runtime.PoolLast})
		if mod != nil {
			mod(c)
		}
	})
}

type embedResp struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// TestEmbeddingsShapes: every input form OpenAI takes, in float and base64,
// each vector the engine's for the tokens the tokenizer makes, with
// OpenAI's list shape and usage.
func TestEmbeddingsShapes(t *testing.T) {
	e := newFakeEmbedEngine(6)
	s := newEmbedServer(t, e, nil)
	tok := fakeTokenizer{}
	for _, c := range []struct {
		input  string
		inputs [][]int32
	}{
		{`"hello"`, [][]int32{tok.Encode("hello", true, false)}},
		{`["a b", "cd", "<s>x"]`, [][]int32{tok.Encode("a b", true, false), tok.Encode("cd", true, false), tok.Encode("<s>x", true, false)}},
		{`[72, 105]`, [][]int32{{72, 105}}},
		{`[[72], [105, 33, 256]]`, [][]int32{{72}, {105, 33, 256}}},
	} {
		for _, format := range []string{"", `"float"`, `"base64"`} {
			body := `{"model":"embed","input":` + c.input
			if format != "" {
				body += `,"encoding_format":` + format
			}
			status, _, raw := s.do(t, "POST", "/v1/embeddings", body+"}")
			require.Equal(t, http.StatusOK, status, string(raw))
			var r embedResp
			require.NoError(t, json.Unmarshal(raw, &r))
			require.Equal(t, "list", r.Object)
			require.Equal(t, "embed", r.Model)
			require.Len(t, r.Data, len(c.inputs))
			tokens := 0
			for i, in := range c.inputs {
				tokens += len(in)
				d := r.Data[i]
				require.Equal(t, "embedding", d.Object)
				require.Equal(t, i, d.Index)
				var got []float32
				if format == `"base64"` {
					var b64 string
					require.NoError(t, json.Unmarshal(d.Embedding, &b64))
					b, err := base64.StdEncoding.DecodeString(b64)
					require.NoError(t, err)
					require.Len(t, b, 4*6)
					for k := 0; k < len(b); k += 4 {
						got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(b[k:])))
					}
				} else {
					require.NoError(t, json.Unmarshal(d.Embedding, &got))
				}
				require.Equal(t, fakeEmbedding(in, 6), got, "%s input %d", c.input, i)
			}
			require.Equal(t, tokens, r.Usage.PromptTokens)
			require.Equal(t, tokens, r.Usage.TotalTokens)
		}
	}
	require.Equal(t, runtime.PoolLast, e.calls[0].Pooling, "the model's pooling reaches the engine")
}

// TestEmbeddingsDimensions: dimensions cut and renormalise; outside 1 to
// the model's width it is a 400 naming the field.
func TestEmbeddingsDimensions(t *testing.T) {
	e := newFakeEmbedEngine(6)
	s := newEmbedServer(t, e, nil)
	status, _, raw := s.do(t, "POST", "/v1/embeddings", `{"model":"embed","input":"hey","dimensions":3}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	var r struct {
		Data []struct{ Embedding []float32 } `json:"data"`
	}
	require.NoError(t, json.Unmarshal(raw, &r))
	want := runtime.Truncate(fakeEmbedding(fakeTokenizer{}.Encode("hey", true, false), 6), 3)
	require.Equal(t, want, r.Data[0].Embedding)
	for _, d := range []string{"0", "7", "-1"} {
		status, _, raw := s.do(t, "POST", "/v1/embeddings", `{"model":"embed","input":"hey","dimensions":`+d+`}`)
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, string(raw), `"param":"dimensions"`)
	}
}

// TestEmbeddingsRefusals: what the endpoint refuses, and how.
func TestEmbeddingsRefusals(t *testing.T) {
	e := newFakeEmbedEngine(4)
	s := newEmbedServer(t, e, nil)
	for _, c := range []struct {
		body   string
		status int
		param  string
		text   string
	}{
		{`{"model":"fake","input":"x"}`, 400, "model", "does not serve embeddings"},
		{`{"model":"embed"}`, 400, "input", "input is required"},
		{`{"model":"embed","input":[]}`, 400, "input", "empty list"},
		{`{"model":"embed","input":""}`, 400, "input", "empty string"},
		{`{"model":"embed","input":[[]]}`, 400, "input", "empty token list"},
		{`{"model":"embed","input":[1,999]}`, 400, "input", "not a token id"},
		{`{"model":"embed","input":{"a":1}}`, 400, "input", "must be a string"},
		{`{"model":"embed","input":"x","encoding_format":"int8"}`, 400, "encoding_format", "float or base64"},
		{`{"model":"embed","input":"` + strings.Repeat("y", 300) + `"}`, 400, "input", "maximum context length"},
		{`{"model":"nope","input":"x"}`, 404, "model", "does not exist"},
	} {
		status, _, raw := s.do(t, "POST", "/v1/embeddings", c.body)
		require.Equal(t, c.status, status, c.body)
		require.Contains(t, string(raw), `"param":"`+c.param+`"`, c.body)
		require.Contains(t, string(raw), c.text, c.body)
	}
	e.full = true
	status, hdr, raw := s.do(t, "POST", "/v1/embeddings", `{"model":"embed","input":"x"}`)
	require.Equal(t, http.StatusTooManyRequests, status, string(raw))
	require.Equal(t, "1", hdr.Get("Retry-After"))
	status, _, _ = s.do(t, "GET", "/v1/embeddings", ``)
	require.Equal(t, http.StatusMethodNotAllowed, status)

	_, err := New(Config{Host: "127.0.0.1", Models: []Model{{ID: "m", Engine: newFakeEngine(), Pooling: runtime.PoolMean}}})
	require.ErrorIs(t, err, ErrConfig, "a pooling without an embedding engine")
}

// TestEmbeddingsAuthAndMetrics: the route sits behind the keys and is
// counted like the others.
func TestEmbeddingsAuthAndMetrics(t *testing.T) {
	s := newEmbedServer(t, newFakeEmbedEngine(4), func(c *Config) { c.APIKeys = []string{"sk-e"} })
	status, _, _ := s.do(t, "POST", "/v1/embeddings", `{"model":"embed","input":"x"}`)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = s.do(t, "POST", "/v1/embeddings", `{"model":"embed","input":"xyz"}`, "Authorization", "Bearer sk-e")
	require.Equal(t, http.StatusOK, status)
	_, _, body := s.do(t, "GET", "/metrics", ``, "Authorization", "Bearer sk-e")
	require.Contains(t, string(body), `memra_http_requests_total{endpoint="/v1/embeddings",status="200"} 1`)
	require.Contains(t, string(body), `memra_http_requests_total{endpoint="/v1/embeddings",status="401"} 1`)
	require.Contains(t, string(body), `memra_prompt_tokens_total{model="embed"} 4`)
}
