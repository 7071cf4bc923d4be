package chart

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeChart makes a chart of the given templates in a temporary folder.
func writeChart(t *testing.T, values string, templates map[string]string) *Chart {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "templates"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: \"4.5\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(values), 0o644))
	for n, s := range templates {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "templates", n), []byte(s), 0o644))
	}
	c, err := Load(dir)
	require.NoError(t, err)
	return c
}

// TestRenderHelmSemantics pins the functions to Helm's (and sprig's)
// behaviour on the cases the chart relies on.
func TestRenderHelmSemantics(t *testing.T) {
	c := writeChart(t, "num: 3\nname: \"\"\nlist: [a, b]\nmap: {k: v, m: 2}\nflag: false\nnested: {a: 1, b: {c: 2}}\n", map[string]string{
		"_helpers.tpl": `{{- define "x.name" -}}{{ default .Chart.Name .Values.name | trunc 3 }}{{- end -}}`,
		"a.yaml": `a: {{ include "x.name" . }}
n: {{ .Values.num }}
sum: {{ add .Values.num 2 10 }}
half: {{ div 181 10 }}
q: {{ .Values.num | quote }}
joined: {{ join "," .Values.list | quote }}
missing: [{{ .Values.nope }}]
empty: {{ empty .Values.flag }} {{ empty .Values.list }} {{ empty 0 }} {{ empty "x" }}
release: {{ .Release.Name }}/{{ .Release.Namespace }}/{{ .Release.Service }}
chart: {{ .Chart.Version }} {{ .Chart.AppVersion }}
map:
  {{- toYaml .Values.map | nindent 2 }}
merged: {{ .Values.nested.b.c }} {{ .Values.nested.a }}
---
# a comment alone is no document
---
b: {{ printf "%s-%s" "x" "y" | replace "-" "_" }}
`,
	})
	docs, err := c.Render(Release{Name: "rel", Namespace: "ns"}, map[string]any{"nested": map[string]any{"b": map[string]any{"c": 9}}})
	require.NoError(t, err)
	require.Len(t, docs, 2)
	require.Equal(t, `a: dem
n: 3
sum: 15
half: 18
q: "3"
joined: "a,b"
missing: []
empty: true false true false
release: rel/ns/Helm
chart: 1.2.3 4.5
map:
  k: v
  m: 2
merged: 9 1
`, docs[0].YAML)
	require.Equal(t, "b: x_y\n", docs[1].YAML)
	require.Equal(t, "demo/templates/a.yaml", docs[0].Template)
}

func TestRenderErrors(t *testing.T) {
	c := writeChart(t, "v: \"\"\n", map[string]string{"a.yaml": `x: {{ required "v is required" .Values.v }}`})
	_, err := c.Render(Release{Name: "r"}, nil)
	require.ErrorIs(t, err, ErrRender)
	require.ErrorContains(t, err, "v is required")
	docs, err := c.Render(Release{Name: "r"}, map[string]any{"v": "ok"})
	require.NoError(t, err)
	require.Equal(t, "x: ok\n", docs[0].YAML)

	// a function outside the subset does not parse
	c = writeChart(t, "", map[string]string{"a.yaml": `x: {{ sha256sum "a" }}`})
	_, err = c.Render(Release{Name: "r"}, nil)
	require.ErrorContains(t, err, `function "sha256sum" not defined`)
	c = writeChart(t, "", map[string]string{"a.yaml": `{{ fail "no" }}`})
	_, err = c.Render(Release{Name: "r"}, nil)
	require.ErrorContains(t, err, "no")
}

func TestMerge(t *testing.T) {
	base := map[string]any{"a": map[string]any{"b": 1, "c": 2}, "l": []any{1, 2}, "d": "x"}
	got := Merge(base, map[string]any{"a": map[string]any{"c": 3}, "l": []any{9}, "d": nil})
	require.Equal(t, map[string]any{"a": map[string]any{"b": 1, "c": 3}, "l": []any{9}}, got)
	require.Equal(t, 2, base["a"].(map[string]any)["c"], "base is not changed")
}
