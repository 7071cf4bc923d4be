package serve

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNpmSuiteNamesMissingTools: without node, npm and curl the SDK suite
// of make test stops at once with one line naming what is missing.
func TestNpmSuiteNamesMissingTools(t *testing.T) {
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	for _, args := range [][]string{{}, {"--check"}} {
		cmd := exec.Command(bash, append([]string{"npmtest/run.sh"}, args...)...)
		cmd.Env = []string{"PATH=" + t.TempDir()} // an empty folder: no tool at all
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		require.Equal(t, "make test: the OpenAI SDK suite (serve/npmtest) needs node, npm and curl; not found: node npm curl\n",
			string(out))
		require.Equal(t, 1, strings.Count(string(out), "\n"))
	}
}
