package chat

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkRenderQwen25 renders a 20-message conversation with the Qwen2.5 template.
func BenchmarkRenderQwen25(b *testing.B) {
	tmpl := compileFixture(b, "qwen2.5-7b-instruct")
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{"system", "You are a helpful assistant."}}
	for i := range 19 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, fmt.Sprintf("Message number %d of a longer conversation about Go templates.", i)})
	}
	ctx, err := json.Marshal(map[string]any{"messages": msgs, "add_generation_prompt": true, "tools": nil})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileQwen25 compiles the Qwen2.5 template.
func BenchmarkCompileQwen25(b *testing.B) {
	src := compileFixture(b, "qwen2.5-7b-instruct").Source()
	for b.Loop() {
		if _, err := Compile(src); err != nil {
			b.Fatal(err)
		}
	}
}
