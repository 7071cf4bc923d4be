package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

func nvrtcOrSkip(t *testing.T) *cuda.NVRTC {
	t.Helper()
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	return nv
}

// compileStories compiles the built-in model into a fresh folder with
// args (flags of memra compile) and returns the folder.
func compileStories(t *testing.T, model string, args ...string) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "out")
	cmd := rootCmd
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"compile", model, "-o", dir, "--max-seqs", "4"}, args...))
	if c, _, err := cmd.Find([]string{"compile"}); err == nil {
		resetFlags(c.Flags()) // slice flags (--arch) would append to an earlier test's
	}
	t.Cleanup(func() { cmd.SetArgs(nil); cmd.SetOut(nil); cmd.SetErr(nil) })
	require.NoError(t, cmd.Execute(), errOut.String())
	return dir, errOut.String()
}

// TestCompileArtifact is what CI checks of memra compile: stories260K
// compiled to PTX for compute_90 (the NVRTC it has makes no sm_90a
// cubin), a manifest that opens and names every kernel, image and model
// file, and PTX that holds each kernel's entry point.
func TestCompileArtifact(t *testing.T) {
	nvrtcOrSkip(t)
	t.Setenv("HOME", t.TempDir()) // the cubin cache
	t.Setenv("XDG_CACHE_HOME", "")
	dir, log := compileStories(t, builtin.Name, "--arch", "compute_90", "--card", "none")
	require.Contains(t, log, "PTX compute_90")
	for _, name := range []string{"kernels.cu", "plan.txt", "manifest.json"} {
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err, name)
		require.Positive(t, st.Size(), name)
	}
	a, err := cuda.OpenArtifact(dir)
	require.NoError(t, err)
	man := a.Manifest
	require.Equal(t, cuda.ArtifactFormat, man.Format)
	require.Empty(t, man.Targets)
	require.Equal(t, "compute_90", man.PTX)
	require.Equal(t, "llama", man.ModelArch)
	require.Equal(t, 4, man.MaxSeqs)
	require.Equal(t, 132, man.Multiprocessors)
	require.Empty(t, man.Card)
	require.Equal(t, buildVersion(), man.Memra, "memra_version carries the VCS revision when the build has one")
	require.Regexp(t, `^\d+\.\d$`, man.NVRTC)
	sum := sha256Hex(builtin.Bytes())
	require.Equal(t, []cuda.ModelFile{{Name: "stories260K.gguf", Size: int64(len(builtin.Bytes())), SHA256: sum}}, man.ModelFiles)
	require.Equal(t, sum, man.ModelSHA256)
	plan, err := os.ReadFile(filepath.Join(dir, "plan.txt"))
	require.NoError(t, err)
	require.Equal(t, sha256Hex(plan), man.PlanSHA256)
	require.True(t, strings.HasPrefix(string(plan), "program llama"))
	require.Contains(t, string(plan), " decode: ")
	require.Contains(t, string(plan), " prefill: ")
	src, err := os.ReadFile(filepath.Join(dir, "kernels.cu"))
	require.NoError(t, err)
	require.Len(t, man.Images, len(man.Kernels))
	for _, ki := range man.Images {
		require.Contains(t, string(src), " "+ki.Kernel+"(", ki.Kernel)
		ptx, err := os.ReadFile(filepath.Join(dir, ki.Files["compute_90"].File))
		require.NoError(t, err)
		require.Contains(t, string(ptx), ".target sm_90")
		require.Contains(t, string(ptx), ".entry "+ki.Kernel+"(")
	}
	// the raw JSON keeps the field names earlier manifests had
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(raw, &fields))
	for _, k := range []string{"model", "model_sha256", "model_arch", "target_arch", "arms", "nvrtc", "memra_version", "max_seqs", "context", "kv_cache", "kernels"} {
		require.Contains(t, fields, k)
	}

	// an NVRTC older than 12 says what a cubin of sm_90a needs
	if nv := nvrtcOrSkip(t); func() bool { m, _ := nv.Version(); return m < 12 }() {
		cmd := rootCmd
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"compile", builtin.Name, "-o", filepath.Join(t.TempDir(), "x"), "--arch", "sm_90a", "--card", "none"})
		defer cmd.SetArgs(nil)
		require.ErrorContains(t, cmd.Execute(), "NVRTC 12.0 or later")
	}
}

func TestCompileDump(t *testing.T) {
	o := &compileOptions{dump: true, card: "none"}
	o.backend.MaxSeqs = 4
	cmd := &cobra.Command{}
	var stdout bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stdout)
	require.NoError(t, runCompile(cmd, builtin.Name, o))
	require.Contains(t, stdout.String(), "%3 = embed")
	require.Contains(t, stdout.String(), "extern \"C\" __global__")
	require.Contains(t, stdout.String(), "program llama")
	require.ErrorIs(t, runCompile(cmd, builtin.Name, &compileOptions{}), errCompileArgs)
	o.card = "not-a-key"
	require.ErrorContains(t, runCompile(cmd, builtin.Name, o), "--card")
}

func TestCompileCard(t *testing.T) {
	key, sms, arch, err := compileCard(&compileOptions{card: "nvidia-h100-80gb-hbm3.sm90.132sm.80gib"})
	require.NoError(t, err)
	require.Equal(t, "nvidia-h100-80gb-hbm3.sm90.132sm.80gib", key.String())
	require.Equal(t, 132, sms)
	require.Equal(t, "sm_90a", arch)
	key, sms, arch, err = compileCard(&compileOptions{card: "nvidia-a10.sm86.72sm.22gib", sms: 80})
	require.NoError(t, err)
	require.Equal(t, 80, sms, "--sms wins")
	require.Equal(t, "sm_86", arch)
	require.NotNil(t, key)
	key, sms, arch, err = compileCard(&compileOptions{card: "none"})
	require.NoError(t, err)
	require.Nil(t, key)
	require.Equal(t, cuda.DefaultMultiprocessors, sms)
	require.Equal(t, "sm_90a", arch)
}
