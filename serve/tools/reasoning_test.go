package tools

import (
	"testing"

	"github.com/stretchr/testify/require"
)

var reasoningCases = []struct {
	name               string
	inside             bool
	text               string
	reasoning, content string
}{
	{"no think", false, "Just an answer.", "", "Just an answer."},
	{"think block", false, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", "Let me see.\n", "The answer is 4."},
	{"leading space", false, "  <think>a</think>b", "a", "b"},
	{"opened by prompt", true, "Hmm, 2+2.\n</think>\n\n4", "Hmm, 2+2.\n", "4"},
	{"opened, never closed", true, "still thinking", "still thinking", ""},
	{"unclosed block", false, "<think>and on", "and on", ""},
	{"think later is content", false, "Hi <think>x</think>", "", "Hi <think>x</think>"},
	{"partial tag only", false, "<thi", "", "<thi"},
	{"empty", false, "", "", ""},
}

func TestSplitReasoning(t *testing.T) {
	for _, tc := range reasoningCases {
		r, c := SplitReasoning(tc.text, tc.inside)
		require.Equal(t, tc.reasoning, r, tc.name)
		require.Equal(t, tc.content, c, tc.name)
		// Every chunking gives the same split (tags across chunk boundaries).
		for size := 1; size <= 5; size++ {
			rs := NewReasoner(tc.inside)
			var gr, gc string
			for i := 0; i < len(tc.text); i += size {
				a, b := rs.Add(tc.text[i:min(i+size, len(tc.text))])
				gr, gc = gr+a, gc+b
			}
			a, b := rs.Flush()
			require.Equal(t, tc.reasoning, gr+a, "%s size %d", tc.name, size)
			require.Equal(t, tc.content, gc+b, "%s size %d", tc.name, size)
		}
	}
}

func TestPromptOpensThinking(t *testing.T) {
	require.True(t, PromptOpensThinking("<|Assistant|><think>\n"))
	require.False(t, PromptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
	require.False(t, PromptOpensThinking("<|im_start|>assistant\n"))
}

func FuzzSplitReasoning(f *testing.F) {
	for _, tc := range reasoningCases {
		f.Add(tc.text, tc.inside, 2)
	}
	f.Fuzz(func(t *testing.T, text string, inside bool, size int) {
		if size < 1 {
			size = 1
		}
		wr, wc := SplitReasoning(text, inside)
		rs := NewReasoner(inside)
		var gr, gc string
		for i := 0; i < len(text); i += size {
			a, b := rs.Add(text[i:min(i+size, len(text))])
			gr, gc = gr+a, gc+b
		}
		a, b := rs.Flush()
		require.Equal(t, wr, gr+a)
		require.Equal(t, wc, gc+b)
	})
}
