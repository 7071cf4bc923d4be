package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// limitedCommands are the commands whose numeric flags are checked, with
// their tables.
func limitedCommands() map[string]struct {
	cmd    func() *cobra.Command
	limits map[string]flagLimit
} {
	return map[string]struct {
		cmd    func() *cobra.Command
		limits map[string]flagLimit
	}{
		"serve":       {newServeCmd, serveLimits},
		"run":         {newRunCmd, runLimits},
		"bench":       {newBenchCmd, benchLimits},
		"bench serve": {newBenchServeCmd, benchServeLimits},
	}
}

// Every integer, integer list and duration flag of serve, run, bench and
// bench serve has a limit, and every limit names such a flag.
func TestFlagLimitsCoverFlags(t *testing.T) {
	numeric := map[string]bool{"int": true, "int64": true, "intSlice": true, "duration": true}
	for name, c := range limitedCommands() {
		cmd := c.cmd()
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if numeric[f.Value.Type()] {
				require.Contains(t, c.limits, f.Name, "memra %s --%s (%s) has no limit in flagcheck.go", name, f.Name, f.Value.Type())
			}
		})
		for flag := range c.limits {
			f := cmd.Flags().Lookup(flag)
			require.NotNil(t, f, "memra %s has no flag --%s", name, flag)
			require.True(t, numeric[f.Value.Type()], "memra %s --%s", name, flag)
		}
	}
}

// A value a flag cannot honour is refused with an error naming the flag,
// before anything loads; it no longer becomes a default silently.
func TestFlagLimitsRefuse(t *testing.T) {
	cases := []struct {
		cmd  string
		args []string
		want string
	}{
		{"serve", []string{"--max-queue", "-1"}, "--max-queue -1: must be at least 0 (0: no queue"},
		{"serve", []string{"--max-running", "0"}, "--max-running 0: must be at least 1"},
		{"serve", []string{"--max-running", "-3"}, "--max-running -3: must be at least 1"},
		{"serve", []string{"--max-batch-tokens", "0"}, "--max-batch-tokens 0: must be at least 1"},
		{"serve", []string{"--prefill-chunk", "-1"}, "--prefill-chunk -1: must be at least 1"},
		{"serve", []string{"--threads", "-2"}, "--threads -2: must be at least 0 (0: all cores)"},
		{"serve", []string{"--max-body", "0"}, "--max-body 0: must be at least 1"},
		{"serve", []string{"--max-conns", "0"}, "--max-conns 0: must be at least 1"},
		{"serve", []string{"--port", "70000"}, "--port 70000: must be between 0 and 65535"},
		{"serve", []string{"--port", "-1"}, "--port -1: must be between 0 and 65535"},
		{"serve", []string{"--pp-stages", "-1"}, "--pp-stages -1: must be at least 0"},
		{"serve", []string{"--read-timeout", "0s"}, "--read-timeout 0s: must be more than 0"},
		{"serve", []string{"--retry-after", "-1s"}, "--retry-after -1s: must be more than 0"},
		{"serve", []string{"--drain-timeout", "-1s"}, "--drain-timeout -1s: must not be negative"},
		{"run", []string{"--max-tokens", "-1"}, "--max-tokens -1: must be at least 0"},
		{"run", []string{"--top-k", "-1"}, "--top-k -1: must be at least 0 (0: off)"},
		{"run", []string{"--seed", "-2"}, "--seed -2: must be at least -1 (-1: a random seed)"},
		{"run", []string{"--pp-split", "-4"}, "--pp-split -4: must be at least 0"},
		{"bench", []string{"-r", "0"}, "--repetitions 0: must be at least 1"},
		{"bench", []string{"-p", "-1"}, "--n-prompt -1: must be at least 0 (0: skip pp)"},
		{"bench serve", []string{"--concurrency", "1,0"}, "--concurrency 1,0: must be at least 1"},
		{"bench serve", []string{"--timeout", "0s"}, "--timeout 0s: must be more than 0"},
	}
	for _, c := range cases {
		cmd := limitedCommands()[c.cmd].cmd()
		args := c.args
		if c.cmd == "serve" {
			args = append([]string{"--port", "0"}, args...) // were it to start, not on a fixed port
		}
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := cmd.ExecuteContext(ctx)
		cancel()
		require.Error(t, err, "%s %v", c.cmd, c.args)
		require.Contains(t, err.Error(), c.want, "%s %v", c.cmd, c.args)
	}
}

// The environment is checked like the command line.
func TestFlagLimitsFromEnvironment(t *testing.T) {
	root := &cobra.Command{Use: "memra", SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return bindConfig(cmd) }}
	root.AddCommand(newServeCmd())
	t.Setenv("MEMRA_MAX_QUEUE", "-1")
	root.SetArgs([]string{"serve", "--port", "0"})
	root.SetErr(&bytes.Buffer{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	require.ErrorContains(t, err, "--max-queue -1: must be at least 0")
}

// --max-queue 0 is no queue: with one running request the next is refused
// at once (it used to queue 64).
func TestServeMaxQueueZero(t *testing.T) {
	o := &serveOptions{maxRunning: 1, maxQueue: 0, device: "cpu", threads: 2}
	m, closeFn, err := openServed(rootCmd, modelSpec{alias: "stories260K"}, o, nil)
	require.NoError(t, err)
	defer closeFn()
	cfg := m.Engine.(interface{ Config() runtime.EngineConfig }).Config()
	require.Equal(t, 1, cfg.MaxRunning)
	require.Zero(t, cfg.MaxQueue)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := runtime.Request{Prompt: []int32{1}, MaxTokens: 400, IgnoreEOS: true}
	_, err = m.Engine.Submit(ctx, req)
	require.NoError(t, err)
	_, err = m.Engine.Submit(ctx, req)
	require.ErrorIs(t, err, runtime.ErrOverloaded)
}
