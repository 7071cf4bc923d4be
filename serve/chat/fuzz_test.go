package chat

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzRender feeds arbitrary render contexts to the Qwen2.5 template: Render may fail but
// must not panic.
func FuzzRender(f *testing.F) {
	cases, _ := loadFixtures(f)
	for _, c := range cases {
		if c.Template == "qwen2.5-7b-instruct" {
			f.Add([]byte(c.Ctx))
		}
	}
	for _, s := range []string{`{}`, `null`, `{"messages":null}`, `{"messages":[null,1,"x",[]]}`,
		`{"messages":[{"role":"tool"}],"tools":[{}]}`, `{"messages":{"role":"user"}}`} {
		f.Add([]byte(s))
	}
	tmpl := compileFixture(f, "qwen2.5-7b-instruct")
	f.Fuzz(func(t *testing.T, ctx []byte) {
		_, _ = tmpl.Render(ctx)
	})
}

// FuzzCompile feeds arbitrary template sources to Compile, and renders what compiles with a
// small context: both may fail but must not panic.
func FuzzCompile(f *testing.F) {
	names, _ := filepath.Glob(filepath.Join(fixtureDir, "*.jinja"))
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	for _, s := range []string{`{{ (a if b else c) }}`, `{{ x[-1] }}`, `{{ "a" * -1 }}`, `{% raw %}`,
		`{{ (`, `{% for x in %}`, `{{ [1][(1 if 2 else 3)] }}`, `{% set x = (a if b) %}`} {
		f.Add(s)
	}
	ctx := []byte(`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true,"tools":null}`)
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 {
			return
		}
		tmpl, err := Compile(src)
		if err != nil {
			return
		}
		_, _ = tmpl.Render(ctx)
	})
}
