// Package childtest runs a test's body in a child process: the test binary
// run again for that one test with an environment variable set, so that a
// body that crashes or hangs the process takes the child down, not the
// test binary.
package childtest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// InChild reports whether this process is the child of Run(t, env, …).
func InChild(env string) bool { return os.Getenv(env) != "" }

// Run runs t's test alone (-test.v) in a child process with env set to 1,
// for at most limit, and returns its combined output, whether it ran past
// limit (and was killed), and its exit error.
func Run(t testing.TB, env string, limit time.Duration) (out string, hung bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=1")
	b, err := cmd.CombinedOutput()
	return string(b), ctx.Err() != nil, err
}
