package plugin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadRefuses(t *testing.T) {
	checkGoroutines(t)
	h := newHost(t, Limits{})
	noRender := rawModule(nil, abiFuncs(ABIVersion)...)
	badSig := rawModule(nil, append(abiFuncs(ABIVersion),
		wfunc{name: "memra_render", params: []byte{tI32}, results: []byte{tI64}, body: i64c(0)})...)
	tests := []struct {
		name string
		wasm []byte
		want error
		msg  string
	}{
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), ErrNotWasm, "wasm header"},
		{"empty", nil, ErrNotWasm, "wasm header"},
		{"truncated", rawTemplate(ABIVersion, okRender)[:30], ErrInvalidModule, ""},
		{"wrong ABI version", rawTemplate(7, okRender), ErrABIVersion, "speaks ABI v7; this memra speaks v1"},
		{"missing export", noRender, ErrMissingExport, "memra_render"},
		{"wrong signature", badSig, ErrMissingExport, "memra_render as (i32) -> i64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.LoadTemplate(context.Background(), "t", tc.wasm)
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
	// A template module is not a grammar plugin.
	_, err := h.LoadGrammar(context.Background(), "g", rawTemplate(ABIVersion, okRender))
	require.ErrorIs(t, err, ErrMissingExport)
	require.Contains(t, err.Error(), "memra_grammar_set_vocab")
}

func TestParseSpecs(t *testing.T) {
	tests := []struct {
		in   []string
		want []Spec
		err  bool
	}{
		{in: []string{"llama=/p/t.wasm", "qwen = q.wasm"}, want: []Spec{{"llama", "/p/t.wasm"}, {"qwen", "q.wasm"}}},
		{in: []string{"a=b=c.wasm"}, want: []Spec{{"a", "b=c.wasm"}}},
		{in: []string{"noequals"}, err: true},
		{in: []string{"=x.wasm"}, err: true},
		{in: []string{"a="}, err: true},
		{in: []string{"a=x.wasm", "a=y.wasm"}, err: true},
	}
	for _, tc := range tests {
		got, err := ParseSpecs("template-plugin", tc.in)
		if tc.err {
			require.ErrorIs(t, err, ErrConfig, tc.in)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestParseGrammarRequest(t *testing.T) {
	g, err := ParseGrammarRequest([]byte(`{"plugin":"regex","source":"a+"}`))
	require.NoError(t, err)
	require.Equal(t, GrammarRequest{Plugin: "regex", Source: "a+"}, g)
	for _, bad := range []string{`{"source":"a"}`, `[]`, `{"plugin":"x","extra":1}`, `{`} {
		_, err := ParseGrammarRequest([]byte(bad))
		require.ErrorIs(t, err, ErrBadGrammarRequest, bad)
	}
}

func TestOpenEmptyAndUnknown(t *testing.T) {
	s, err := Open(context.Background(), SetConfig{})
	require.NoError(t, err)
	_, err = s.NewMask([]byte(`{"plugin":"nope","source":""}`), nil)
	require.ErrorIs(t, err, ErrUnknown)
	require.NoError(t, s.Close())
	_, err = Open(context.Background(), SetConfig{Templates: []string{"m=/does/not/exist.wasm"}, Host: Config{NoCache: true}})
	require.ErrorIs(t, err, ErrConfig)
}

func FuzzParseGrammarRequest(f *testing.F) {
	f.Add([]byte(`{"plugin":"regex","source":"a+"}`))
	f.Add([]byte(`{"plugin":""}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		g, err := ParseGrammarRequest(raw)
		if err == nil && g.Plugin == "" {
			t.Fatal("accepted a request without a plugin")
		}
	})
}

func FuzzParseSpecs(f *testing.F) {
	f.Add("m=x.wasm")
	f.Add("=")
	f.Fuzz(func(t *testing.T, v string) {
		specs, err := ParseSpecs("f", []string{v})
		if err == nil && (len(specs) != 1 || specs[0].Key == "" || specs[0].Path == "") {
			t.Fatalf("bad spec accepted: %q → %+v", v, specs)
		}
	})
}
