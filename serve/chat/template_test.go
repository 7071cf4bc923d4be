package chat

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name, src string
		wantErr   error
	}{
		{"unclosed tag", `{% if x %}`, ErrCompile},
		{"bad expression", `{{ 1 + }}`, ErrCompile},
		{"unknown tag", `{% frobnicate %}`, ErrCompile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.src)
			require.ErrorIs(t, err, tc.wantErr)
		})
	}
}

func TestRenderBadContext(t *testing.T) {
	tmpl, err := Compile(`{{ x }}`)
	require.NoError(t, err)
	for _, ctx := range []string{``, `[]`, `null`, `"x"`, `{"x":1} {}`, `{"x":`} {
		_, err := tmpl.Render([]byte(ctx))
		require.ErrorIs(t, err, ErrContext, ctx)
	}
}

// TestPanicBecomesError shows an input on which gonja itself panics ("a" * -1 reaches
// strings.Repeat with a negative count) coming back as ErrPanic instead of a crash.
func TestPanicBecomesError(t *testing.T) {
	tmpl, err := Compile(`{{ "a" * n }}`)
	require.NoError(t, err)
	out, err := tmpl.Render([]byte(`{"n": 3}`))
	require.NoError(t, err)
	require.Equal(t, "aaa", out)
	_, err = tmpl.Render([]byte(`{"n": -1}`))
	require.ErrorIs(t, err, ErrPanic)
}

func TestFallback(t *testing.T) {
	tests := []struct {
		name, ctx, want string
	}{
		{"plain with prompt",
			`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"add_generation_prompt":true}`,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"no prompt",
			`{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}],"add_generation_prompt":false}`,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"},
		{"content parts joined",
			`{"messages":[{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"this."}]}]}`,
			"<|im_start|>user\nDescribe\nthis.<|im_end|>\n"},
		{"null content", `{"messages":[{"role":"assistant","content":null}]}`,
			"<|im_start|>assistant\n<|im_end|>\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Fallback().Render([]byte(tc.ctx))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, fallbackSource, Fallback().Source())
}

func TestFeatures(t *testing.T) {
	want := map[string]Features{
		"llama-3.3-70b-instruct":   {Tools: true},
		"llama-3.2-3b-instruct":    {Tools: true},
		"qwen2.5-7b-instruct":      {Tools: true},
		"qwen3-0.6b":               {Tools: true, Thinking: true},
		"gemma-2-2b-it":            {},
		"deepseek-r1-distill-qwen": {Thinking: true},
	}
	for name, f := range want {
		require.Equal(t, f, compileFixture(t, name).Features(), name)
	}
	require.Equal(t, Features{}, Fallback().Features())
}

// TestConcurrentRender renders one compiled template from many goroutines (run with -race).
func TestConcurrentRender(t *testing.T) {
	tmpl := compileFixture(t, "qwen3-0.6b")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				user := fmt.Sprintf("question %d from %d", i, g)
				ctx := fmt.Sprintf(`{"messages":[{"role":"user","content":%q},{"role":"assistant","content":"<think>r</think>a"},{"role":"user","content":%q}],"add_generation_prompt":true,"tools":null}`, user, user)
				out, err := tmpl.Render([]byte(ctx))
				if err != nil {
					errs <- err
					return
				}
				if strings.Count(out, user) != 2 {
					errs <- fmt.Errorf("render %d/%d lost its message: %q", g, i, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
