package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// fakeCompiled writes an artifact of stories260K (4 sequences) whose
// images are made-up bytes, so the loading logic runs without NVRTC or a
// GPU; spec is the hf: spec it records ("" for the embedded model).
func fakeCompiled(t *testing.T, spec string) string {
	t.Helper()
	m, err := builtin.Open()
	require.NoError(t, err)
	_, _, ks, err := cuda.ArtifactKernels(m, cuda.BackendOptions{MaxSeqs: 4})
	require.NoError(t, err)
	images := map[string]map[string][]byte{}
	for _, k := range ks {
		images[k.Name] = map[string][]byte{"sm_90a": []byte("\x7fELF " + k.Name), "compute_90": []byte(".entry " + k.Name)}
	}
	files, sum, err := modelFiles(builtin.Name, true)
	require.NoError(t, err)
	man := &cuda.Manifest{Model: builtin.Name, ModelSpec: spec, ModelFiles: files, ModelSHA256: sum, NVRTC: "13.0",
		MaxSeqs: 4, Context: 512, PrefillTokens: 512, Cache: "f16", Multiprocessors: 132}
	dir := t.TempDir()
	require.NoError(t, cuda.WriteArtifact(dir, man, ks, []string{"sm_90a"}, "compute_90", images))
	return dir
}

// runFails runs a fresh memra command (run, serve or bench) with args and
// returns its error.
func runFails(t *testing.T, name string, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	cmd := map[string]func() *cobra.Command{"run": newRunCmd, "serve": newServeCmd, "bench": newBenchCmd}[name]()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	err := cmd.Execute()
	require.Error(t, err, out.String())
	return err
}

func TestOpenCompiledChecksTheModel(t *testing.T) {
	dir := fakeCompiled(t, "")
	cmd := &cobra.Command{}
	a, path, err := openCompiled(cmd, dir, "")
	require.NoError(t, err)
	require.Equal(t, builtin.Name, path, "no MODEL: the artifact's own")
	require.Len(t, a.Manifest.Kernels, len(a.Manifest.Images))

	copyPath := filepath.Join(t.TempDir(), "renamed.gguf")
	require.NoError(t, os.WriteFile(copyPath, builtin.Bytes(), 0o644))
	_, path, err = openCompiled(cmd, dir, copyPath)
	require.NoError(t, err, "the same bytes under another name")
	require.Equal(t, copyPath, path)

	_, _, err = openCompiled(cmd, dir, "../../testdata/models/llama-2-tiny-random.gguf")
	require.ErrorIs(t, err, cuda.ErrArtifact, "another model")
	bad := append([]byte(nil), builtin.Bytes()...)
	bad[len(bad)-1] ^= 1
	require.NoError(t, os.WriteFile(copyPath, bad, 0o644))
	_, _, err = openCompiled(cmd, dir, copyPath)
	require.ErrorIs(t, err, cuda.ErrArtifact, "one byte changed: same size, other hash")
	_, _, err = openCompiled(cmd, t.TempDir(), "")
	require.ErrorIs(t, err, cuda.ErrArtifact, "no manifest")
}

func TestCompiledRefusals(t *testing.T) {
	dir := fakeCompiled(t, "")
	require.ErrorContains(t, runFails(t, "run", "--compiled", dir, "--device", "cpu", "-n", "1"), "CUDA device")
	require.ErrorContains(t, runFails(t, "run", "--compiled", dir, "--context", "100", "-n", "1"), "compiled for 512 positions")
	require.ErrorContains(t, runFails(t, "run", "--compiled", dir, "--kv-cache", "q8_0", "-n", "1"), "compiled for f16")
	// the fake manifest records no class: an artifact of before the field, compiled off
	for _, c := range []string{"int8", "f16"} {
		require.ErrorContains(t, runFails(t, "run", "--compiled", dir, "--batch-invariant="+c, "-n", "1"), "compiled for off")
	}
	// bench, as run and serve, takes the artifact's class when the flag names none
	require.ErrorContains(t, runFails(t, "bench", "--compiled", dir, "--batch-invariant=int8", "-b", "4", "-p", "8", "-n", "2", "--device", "cuda"), "compiled for off")
	require.NotContains(t, runFails(t, "bench", "--compiled", dir, "-b", "4", "-p", "8", "-n", "2", "--device", "cuda").Error(), "compiled for")
	require.ErrorContains(t, runFails(t, "serve", "--compiled", dir, "--max-running", "9"), "compiled for 4 sequences")
	require.ErrorContains(t, runFails(t, "serve", "--compiled", dir, "--model", "a=stories260K", "--model", "b=stories260K"), "serves one model")
	require.ErrorContains(t, runFails(t, "bench", "--compiled", dir, "-b", "8", "-p", "8", "-n", "2", "--device", "cuda"), "compiled for 4 sequences")
	require.ErrorContains(t, runFails(t, "bench", "--compiled", dir, "--device", "cpu", "-p", "8", "-n", "2"), "--compiled runs one CUDA device")
	if cuda.Available() != nil {
		// without a GPU the run gets as far as the device, never to NVRTC
		err := runFails(t, "run", "--compiled", dir, "-n", "1")
		require.True(t, errors.Is(err, cuda.ErrNoLibrary) || errors.Is(err, cuda.ErrNoDevice), err)
		require.NotContains(t, err.Error(), "nvrtc")
	}
}

// TestCompiledFromSpec: an artifact of an hf: model needs no MODEL; the
// spec is fetched (or found in the cache) and checked.
func TestCompiledFromSpec(t *testing.T) {
	h, _, _ := testHub(t)
	dir := fakeCompiled(t, "hf:owner/stories:Q8_0")
	a, path, err := openCompiled(&cobra.Command{}, dir, "")
	require.NoError(t, err)
	require.Equal(t, "stories-Q8_0.gguf", filepath.Base(path))
	require.Equal(t, "hf:owner/stories:Q8_0", a.Manifest.ModelSpec)
	require.NotEmpty(t, h.Requests())
	// the split quantisation holds other bytes than the one compiled
	_, _, err = openCompiled(&cobra.Command{}, dir, "hf:owner/stories:Q4_K_M")
	require.ErrorIs(t, err, cuda.ErrArtifact)
}

// TestModelFiles: a folder's model is its checkpoint files alone (a GGUF
// file pulled into the same snapshot later changes nothing), a split GGUF
// model every shard whichever is named.
func TestModelFiles(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"config.json": "{}", "model.safetensors": "w", "tokenizer.json": "t",
		"README.md": "r", "model-Q4_K_M.gguf": "g", ".hidden": "h"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
	files, sum, err := modelFiles(dir, true)
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	require.Equal(t, []string{"config.json", "model.safetensors", "tokenizer.json"}, names)
	require.Equal(t, sha256Hex([]byte("{}wt")), sum, "the bytes in name order")
	require.Equal(t, sha256Hex([]byte("w")), files[1].SHA256)

	for i := range 3 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("m-%05d-of-00003.gguf", i+1)), []byte{byte(i)}, 0o644))
	}
	files, _, err = modelFiles(filepath.Join(dir, "m-00002-of-00003.gguf"), false)
	require.NoError(t, err)
	require.Len(t, files, 3)
	require.Equal(t, "m-00001-of-00003.gguf", files[0].Name)
	require.Empty(t, files[0].SHA256, "sizes alone")
}
