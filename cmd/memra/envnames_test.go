package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// envConfig and envDiagnostics are the environment-only variables the Go
// sources may name (docs/FLAGS.md, "Environment-only variables"): machine
// configuration and the short set of diagnostics. Kernel choices are
// tunedb arms, never environment variables.
var (
	envConfig      = []string{"MEMRA_NVRTC_DIR", "MEMRA_CUBLAS_DIR", "MEMRA_NO_NVRTC", "MEMRA_NVRTC_PARALLEL"}
	envDiagnostics = []string{"MEMRA_PDL", "MEMRA_DROP", "MEMRA_PP_HOST_BOUNCE"}
	// envNotEnv are MEMRA_ names that are not environment variables: the
	// macro a kernel that triggers the next one early defines in its
	// generated CUDA C (codegen.Kernel.EarlyTrigger).
	envNotEnv = []string{"MEMRA_PDL_EARLY"}
)

// flagEnvNames are the variables bindConfig reads for the flags of every
// command under root: MEMRA_ and the flag's name upper-cased, - as _.
func flagEnvNames(root *cobra.Command) map[string]bool {
	names := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			names["MEMRA_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))] = true
		}
		c.LocalFlags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return names
}

// sourceEnvNames returns every MEMRA_ name in the non-test Go sources
// under root, with a file that names it.
func sourceEnvNames(t *testing.T, root string) map[string]string {
	re := regexp.MustCompile(`MEMRA_[A-Z0-9_]*[A-Z0-9]`)
	found := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "vendor" || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllString(string(src), -1) {
			if _, ok := found[m]; !ok {
				found[m] = path
			}
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

// TestEnvNamesDocumented is the done-when of the issue that made every
// kernel choice a tunedb arm: the Go sources name no MEMRA_ variable but
// the documented configuration and diagnostics, the flags' variables and
// the generated source's macro; each environment-only one is documented
// in docs/FLAGS.md.
func TestEnvNamesDocumented(t *testing.T) {
	allowed := flagEnvNames(rootCmd)
	for _, n := range append(append(append([]string{}, envConfig...), envDiagnostics...), envNotEnv...) {
		allowed[n] = true
	}
	found := sourceEnvNames(t, "../..")
	require.NotEmpty(t, found)
	var bad []string
	for n, path := range found {
		if !allowed[n] {
			bad = append(bad, n+" ("+path+")")
		}
	}
	sort.Strings(bad)
	require.Empty(t, bad, "MEMRA_ names in the Go sources that are neither configuration, a diagnostic nor a flag's variable (docs/FLAGS.md)")
	doc, err := os.ReadFile(flagsDoc)
	require.NoError(t, err)
	section, _, _ := strings.Cut(string(doc), genBegin)
	_, section, ok := strings.Cut(section, "## Environment-only variables")
	require.True(t, ok, "docs/FLAGS.md has its environment section")
	for _, n := range append(append(append([]string{}, envConfig...), envDiagnostics...), envNotEnv...) {
		require.Contains(t, section, "`"+n, "%s documented in docs/FLAGS.md's environment section", n)
	}
}

// TestEnvNamesScanFails: the scan finds a kernel switch where one is named.
func TestEnvNamesScanFails(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte("package x\n\nconst s = \"MEMRA_GEMV_LARGE\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x_test.go"), []byte("package x\n\nconst u = \"MEMRA_TEST_ONLY\"\n"), 0o644))
	found := sourceEnvNames(t, dir)
	require.Contains(t, found, "MEMRA_GEMV_LARGE")
	require.NotContains(t, found, "MEMRA_TEST_ONLY")
	require.False(t, flagEnvNames(rootCmd)["MEMRA_GEMV_LARGE"])
}
