package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMain lets a test run memra itself in a child process: with
// MEMRA_TEST_RUN_MAIN=1 the test binary is memra, its arguments memra's,
// so that a crash (a SIGBUS, say) kills the child and not the tests.
func TestMain(m *testing.M) {
	if os.Getenv("MEMRA_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// memraChild is `memra serve` running in a child process.
type memraChild struct {
	cmd  *exec.Cmd
	url  string        // http://127.0.0.1:PORT
	done chan struct{} // closed when the child has exited
	err  error         // its exit, once done is closed
	log  *childLog     // its stderr so far
}

// childLog keeps what the child wrote to stderr and passes its lines on.
type childLog struct {
	lines chan string
	mu    sync.Mutex
	all   strings.Builder
}

// startServe starts `memra serve args…` (on a free loopback port) from an
// empty folder, without the caller's MEMRA_* settings, and waits until it
// serves. The child is killed when the test ends.
func startServe(t *testing.T, args ...string) *memraChild {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv is startServe with the environment variables env (KEY=value)
// set in the child.
func startServeEnv(t *testing.T, env []string, args ...string) *memraChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--host", "127.0.0.1", "--port", "0"}, args...)...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MEMRA_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, env...), "MEMRA_TEST_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &memraChild{cmd: cmd, done: make(chan struct{}), log: &childLog{lines: make(chan string, 1024)}}
	go c.log.read(stderr)
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	serving := regexp.MustCompile(`msg=serving url=(http://\S+)`)
	deadline := time.After(60 * time.Second)
	for c.url == "" {
		select {
		case line, ok := <-c.log.lines:
			require.True(t, ok, "memra serve ended before serving:\n%s", c.log)
			if m := serving.FindStringSubmatch(line); m != nil {
				c.url = m[1]
			}
		case <-deadline:
			t.Fatalf("memra serve did not start serving:\n%s", c.log)
		}
	}
	return c
}

func (l *childLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l.mu.Lock()
		l.all.WriteString(sc.Text() + "\n")
		l.mu.Unlock()
		select {
		case l.lines <- sc.Text():
		default:
		}
	}
	close(l.lines)
}

// String is the child's stderr so far.
func (l *childLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}
