package loadtest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReadEvents(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"plain", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
		{"crlf", "data: a\r\n\r\ndata:b\r\n\r\n", []string{"a", "b"}},
		{"multi-line", "data: x\ndata: y\n\n", []string{"x\ny"}},
		{"comments and fields", ": ping\nevent: msg\nid: 3\ndata: z\nretry: 5\n\n", []string{"z"}},
		{"open at eof", "data: a\n\ndata: tail", []string{"a", "tail"}},
		{"blank lines only", "\n\n\n", nil},
		{"empty data", "data:\n\n", []string{""}},
		{"no space", "data:{}\n\n", []string{"{}"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := readEvents(strings.NewReader(tc.in), func(d []byte) error {
				got = append(got, string(d))
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestReadEventsLongLine(t *testing.T) {
	in := "data: " + strings.Repeat("x", maxLine+10) + "\n\n"
	err := readEvents(strings.NewReader(in), func([]byte) error { return nil })
	require.ErrorIs(t, err, ErrStream)

	ok := "data: " + strings.Repeat("y", 200_000) + "\n\n"
	n := 0
	require.NoError(t, readEvents(strings.NewReader(ok), func(d []byte) error { n = len(d); return nil }))
	require.Equal(t, 200_000, n)
}

func TestParseChunk(t *testing.T) {
	tests := []struct {
		name, in string
		want     chunk
		err      error
	}{
		{"role only", `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, chunk{}, nil},
		{"chat content", `{"choices":[{"delta":{"content":"hi"}}]}`, chunk{content: true, text: "hi"}, nil},
		{"reasoning", `{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, chunk{content: true}, nil},
		{"text", `{"choices":[{"text":" a"}]}`, chunk{content: true, text: " a"}, nil},
		{"finish", `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, chunk{}, nil},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}`,
			chunk{usage: true, promptTokens: 9, completionTokens: 4}, nil},
		{"cached", `{"choices":[],"usage":{"prompt_tokens":90,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":64}}}`,
			chunk{usage: true, promptTokens: 90, completionTokens: 4, cached: true, cachedTokens: 64}, nil},
		{"cached zero", `{"choices":[],"usage":{"prompt_tokens":90,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}`,
			chunk{usage: true, promptTokens: 90, completionTokens: 4, cached: true}, nil},
		{"details without cached", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"audio_tokens":0}}}`,
			chunk{usage: true, promptTokens: 9, completionTokens: 4}, nil},
		{"null details", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":null}}`,
			chunk{usage: true, promptTokens: 9, completionTokens: 4}, nil},
		{"null usage", `{"choices":[{"text":"x"}],"usage":null}`, chunk{content: true, text: "x"}, nil},
		{"error", `{"error":{"message":"boom"}}`, chunk{}, ErrServer},
		{"null error", `{"error":null,"choices":[]}`, chunk{}, nil},
		{"not json", `{"choices":`, chunk{}, ErrStream},
		{"wrong type", `{"choices":{}}`, chunk{}, ErrStream},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseChunk([]byte(tc.in))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestConsumeStream(t *testing.T) {
	in := `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}

data: {"choices":[{"delta":{"content":"a"}}]}

data: {"choices":[{"delta":{"content":"bc"}}]}

data: {"choices":[{"delta":{},"finish_reason":"length"}]}

data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}

data: [DONE]

data: {"ignored after":"done"}

`
	var s Sample
	var reply strings.Builder
	require.NoError(t, consumeStream(strings.NewReader(in), time.Now(), &s, &reply))
	require.Equal(t, 2, s.Chunks)
	require.Len(t, s.ITL, 1)
	require.Equal(t, 3, s.CompletionTokens, "usage wins over the chunk count")
	require.Equal(t, 12, s.PromptTokens)
	require.True(t, s.UsageReported)
	require.False(t, s.CachedReported, "no prompt_tokens_details")
	require.Zero(t, s.CachedTokens)
	require.Positive(t, s.TTFT)
	require.Equal(t, "abc", reply.String())
}

func TestConsumeStreamCachedTokens(t *testing.T) {
	in := `data: {"choices":[{"delta":{"reasoning_content":"think "}}]}

data: {"choices":[{"delta":{"content":"an"}}]}

data: {"choices":[{"delta":{"content":"swer"}}]}

data: {"choices":[],"usage":{"prompt_tokens":1100,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":1024}}}

data: [DONE]

`
	var s Sample
	var reply strings.Builder
	require.NoError(t, consumeStream(strings.NewReader(in), time.Now(), &s, &reply))
	require.True(t, s.CachedReported)
	require.Equal(t, 1024, s.CachedTokens)
	require.Equal(t, 1100, s.PromptTokens)
	require.Equal(t, 3, s.Chunks, "reasoning counts as generated")
	require.Equal(t, "answer", reply.String(), "reasoning is not part of the reply")
}

// FuzzConsumeStream feeds arbitrary bytes as a response body: it must
// return an error or a consistent sample, never panic.
func FuzzConsumeStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":-4}}\n\ndata: [DONE]"))
	f.Add([]byte("data: {\"error\":{\"message\":\"x\"}}\n\n"))
	f.Add([]byte(": c\r\ndata: {\r\ndata: }\r\n\r\n"))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte("\x00\xff data:"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var s Sample
		err := consumeStream(strings.NewReader(string(body)), time.Now(), &s, nil)
		if err == nil {
			require.GreaterOrEqual(t, s.Chunks, 0)
			require.Len(t, s.ITL, max(s.Chunks-1, 0))
		}
	})
}
