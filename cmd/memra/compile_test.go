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

	"github.com/memra-ai/memra/runtime/load/builtin"
)

// TestCompileArtifacts compiles the built-in model and checks the folder.
func TestCompileArtifacts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	o := &compileOptions{out: dir, emitGo: true, target: "sm_90a", pkg: "storiesglue"}
	o.backend.MaxSeqs = 4
	cmd := &cobra.Command{}
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	require.NoError(t, runCompile(cmd, builtin.Name, o))
	for _, name := range []string{"kernels.cu", "plan.txt", "glue.go", "manifest.json"} {
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err, name)
		require.Positive(t, st.Size(), name)
	}
	var man manifest
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &man))
	require.Len(t, man.ModelSHA256, 64)
	require.Equal(t, "sm_90a", man.Target)
	require.Equal(t, "llama", man.ModelArch)
	require.Contains(t, man.Arms, "gemv")
	require.Equal(t, buildVersion(), man.Memra, "memra_version carries the VCS revision when the build has one")
	src, err := os.ReadFile(filepath.Join(dir, "kernels.cu"))
	require.NoError(t, err)
	for _, k := range man.Kernels {
		require.Contains(t, string(src), `__global__ void `, k)
		require.Contains(t, string(src), " "+k+"(", k)
	}
	plan, err := os.ReadFile(filepath.Join(dir, "plan.txt"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(plan), "program llama"))
	require.Contains(t, string(plan), " decode: ")
	require.Contains(t, string(plan), " prefill: ")
	require.Empty(t, stdout.String(), "no --dump")

	o.out, o.dump = "", true
	require.NoError(t, runCompile(cmd, builtin.Name, o))
	require.Contains(t, stdout.String(), "%3 = embed")
	require.Contains(t, stdout.String(), "extern \"C\" __global__")

	require.ErrorIs(t, runCompile(cmd, builtin.Name, &compileOptions{}), errCompileArgs)
}
