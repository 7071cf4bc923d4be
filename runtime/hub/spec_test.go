package hub

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSpec(t *testing.T) {
	good := []struct {
		in   string
		want Spec
	}{
		{"hf:owner/repo", Spec{Repo: "owner/repo"}},
		{"hf:gpt2", Spec{Repo: "gpt2"}},
		{"hf:owner/repo:Q4_K_M", Spec{Repo: "owner/repo", Quant: "Q4_K_M"}},
		{"hf:owner/repo:UD-Q4_K_XL", Spec{Repo: "owner/repo", Quant: "UD-Q4_K_XL"}},
		{"hf:owner/repo:model-q8_0.gguf", Spec{Repo: "owner/repo", File: "model-q8_0.gguf"}},
		{"hf:owner/repo:Q4_K_M/m-00001-of-00002.GGUF", Spec{Repo: "owner/repo", File: "Q4_K_M/m-00001-of-00002.GGUF"}},
		{"hf:owner/repo@v1.0:Q8_0", Spec{Repo: "owner/repo", Revision: "v1.0", Quant: "Q8_0"}},
		{"hf:Org.Name/Llama-3.2-1B_x@refs/pr/1", Spec{Repo: "Org.Name/Llama-3.2-1B_x", Revision: "refs/pr/1"}},
	}
	for _, c := range good {
		got, err := ParseSpec(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
		again, err := ParseSpec(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again, "String round-trips")
	}
	bad := []string{
		"owner/repo", "hf:", "hf:a/b/c", "hf:owner/re--po", "hf:owner/repo.", "hf:-owner/repo",
		"hf:owner/repo:", "hf:owner/repo@", "hf:owner/repo@:Q4", "hf:owner/repo:../x.gguf",
		"hf:owner/repo:/abs.gguf", "hf:owner/repo:Q4 K", "hf:owner/repo:a/b", "hf:own er/repo",
		"hf:owner/repo@a..b",
	}
	for _, in := range bad {
		_, err := ParseSpec(in)
		require.ErrorIs(t, err, ErrSpec, in)
	}
	require.True(t, IsSpec("hf:x/y"))
	require.False(t, IsSpec("./hf:x"))
}

func TestSelectFiles(t *testing.T) {
	quants := []string{
		"README.md", "model-Q4_K.gguf", "model-Q4_K_M.gguf", "model-q8_0.gguf", "mmproj-model-Q4_K_M.gguf",
		"big/big-Q6_K-00001-of-00002.gguf", "big/big-Q6_K-00002-of-00002.gguf", "imatrix-Q4_K_M.gguf",
	}
	folder := []string{"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors", "pytorch_model.bin", "original/consolidated.safetensors", "README.md"}
	sharded := []string{"config.json", "tokenizer.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors", "consolidated.safetensors", "generation_config.json"}
	index := []byte(`{"metadata": {}, "weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}`)
	noIndex := func() ([]byte, error) { t.Fatal("index read"); return nil, nil }
	cases := []struct {
		spec  string
		names []string
		files []string
		path  string
		err   error
	}{
		{"hf:o/r:Q4_K_M", quants, []string{"model-Q4_K_M.gguf"}, "model-Q4_K_M.gguf", nil},
		{"hf:o/r:q4_k", quants, []string{"model-Q4_K.gguf"}, "model-Q4_K.gguf", nil},
		{"hf:o/r:Q8_0", quants, []string{"model-q8_0.gguf"}, "model-q8_0.gguf", nil},
		{"hf:o/r:Q6_K", quants, []string{"big/big-Q6_K-00001-of-00002.gguf", "big/big-Q6_K-00002-of-00002.gguf"}, "big/big-Q6_K-00001-of-00002.gguf", nil},
		{"hf:o/r:big/big-Q6_K-00002-of-00002.gguf", quants, []string{"big/big-Q6_K-00001-of-00002.gguf", "big/big-Q6_K-00002-of-00002.gguf"}, "big/big-Q6_K-00001-of-00002.gguf", nil},
		{"hf:o/r:model-Q4_K.gguf", quants, []string{"model-Q4_K.gguf"}, "model-Q4_K.gguf", nil},
		{"hf:o/r:Q5_K_M", quants, nil, "", ErrSelect},
		{"hf:o/r:nope.gguf", quants, nil, "", ErrNotFound},
		{"hf:o/r:Q6_K", quants[:6], nil, "", ErrSelect}, // a shard missing
		{"hf:o/r", quants, nil, "", ErrSelect},          // no config.json, several GGUF models
		{"hf:o/r", []string{"README.md", "x-Q4_0.gguf", "mmproj-f16.gguf"}, []string{"x-Q4_0.gguf"}, "x-Q4_0.gguf", nil},
		{"hf:o/r", folder, []string{"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}, "", nil},
		{"hf:o/r", sharded, []string{"config.json", "generation_config.json", "tokenizer.json", indexFile,
			"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}, "", nil},
		{"hf:o/r", []string{"config.json", "README.md"}, nil, "", ErrSelect},
		{"hf:o/r", []string{"README.md"}, nil, "", ErrSelect},
	}
	for _, c := range cases {
		sp, err := ParseSpec(c.spec)
		require.NoError(t, err)
		read := noIndex
		if len(c.names) > 0 && c.names[0] == "config.json" && c.names[len(c.names)-1] == "generation_config.json" {
			read = func() ([]byte, error) { return index, nil }
		}
		sel, err := selectFiles(sp, c.names, read)
		if c.err != nil {
			require.ErrorIs(t, err, c.err, c.spec)
			continue
		}
		require.NoError(t, err, c.spec)
		require.Equal(t, c.files, sel.files, c.spec)
		require.Equal(t, c.path, sel.path, c.spec)
	}
	// an index naming a shard the repository lacks
	sp, _ := ParseSpec("hf:o/r")
	_, err := selectFiles(sp, sharded[:4], func() ([]byte, error) { return index, nil })
	require.ErrorIs(t, err, ErrSelect)
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"hf:owner/repo", "hf:o/r@v1:Q4_K_M", "hf:o/r:a/b-00001-of-00002.gguf", "hf:o/r@:x", "hf::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := ParseSpec(s)
		if err != nil {
			return
		}
		again, err := ParseSpec(sp.String())
		if err != nil || again != sp {
			t.Fatalf("%q parsed to %+v, whose String %q parses to %+v (%v)", s, sp, sp.String(), again, err)
		}
		if strings.Contains(sp.Repo, "--") || strings.Contains(sp.File, "..") {
			t.Fatalf("%q: unsafe %+v", s, sp)
		}
	})
}
