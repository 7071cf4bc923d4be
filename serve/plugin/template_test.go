package plugin

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRawTemplateHostile runs each misbehaving render twice (the second
// call gets a fresh instance and fails the same way), then checks a
// well-behaved plugin on the same host still works and nothing leaked.
func TestRawTemplateHostile(t *testing.T) {
	checkGoroutines(t)
	const timeout = 100 * time.Millisecond
	tests := []struct {
		name      string
		body      []byte
		lim       Limits
		want      error
		discarded bool
		slow      bool
	}{
		{name: "infinite loop", body: append(opLoop, i64c(0)...), want: ErrPluginTimeout, discarded: true, slow: true},
		{name: "trap", body: opUnreachable, want: ErrPluginTrap, discarded: true},
		{name: "memory bomb", body: opGrowForever, lim: Limits{MemoryPages: 16}, want: ErrPluginMemory, discarded: true},
		{name: "output over the cap", body: i64c(0<<32 | 60000), lim: Limits{MaxOutput: 100}, want: ErrPluginOutput},
		{name: "output outside memory", body: i64c(60000<<32 | 60000), want: ErrPluginOutput, discarded: true},
		{name: "bad status", body: i64c(2049<<32 | 2), want: ErrPluginOutput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim
			lim.RenderTimeout = timeout
			h := newHost(t, lim)
			p, err := h.LoadTemplate(context.Background(), "hostile", rawTemplate(ABIVersion, tc.body))
			require.NoError(t, err)
			for i := range 2 {
				start := time.Now()
				_, err := p.Render(json.RawMessage(`{}`))
				require.ErrorIs(t, err, tc.want)
				if tc.slow {
					require.Less(t, time.Since(start), timeout+time.Second, "killed near its deadline")
				}
				st := p.Stats()
				if tc.discarded {
					require.Equal(t, i+1, st.Discarded, "each failure discards its instance")
					require.Equal(t, 0, st.Live)
				} else {
					require.Equal(t, 0, st.Discarded)
					require.Equal(t, 1, st.Live)
				}
			}
			good, err := h.LoadTemplate(context.Background(), "good", rawTemplate(ABIVersion, okRender))
			require.NoError(t, err)
			out, err := good.Render(json.RawMessage(`{}`))
			require.NoError(t, err)
			require.Equal(t, "hi", out)
			require.NoError(t, p.Close())
			require.Equal(t, 0, p.Stats().Live)
		})
	}
}

func TestRawTemplateConcurrent(t *testing.T) {
	checkGoroutines(t)
	h := newHost(t, Limits{MaxInstances: 3})
	p, err := h.LoadTemplate(context.Background(), "ok", rawTemplate(ABIVersion, okRender))
	require.NoError(t, err)
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			out, err := p.Render(json.RawMessage(`{"messages":[]}`))
			if err == nil && out != "hi" {
				err = ErrPluginOutput
			}
			errs <- err
		}()
	}
	for range 32 {
		require.NoError(t, <-errs)
	}
	st := p.Stats()
	require.LessOrEqual(t, st.Live, 3)
	require.Equal(t, st.Created, st.Live)
	require.NoError(t, h.Close())
	require.Equal(t, 0, p.Stats().Live)
}

// TestGoGuestSandbox runs the hostile Go guest: what the sandbox gives
// (nothing), and how its failures surface.
func TestGoGuestSandbox(t *testing.T) {
	checkGoroutines(t)
	wasm := buildGuest(t, "./testdata/hostile")
	h := newHost(t, Limits{RenderTimeout: 2 * time.Second, MemoryPages: 1024, MaxOutput: 1 << 20})
	p, err := h.LoadTemplate(context.Background(), "hostile", wasm)
	require.NoError(t, err)
	render := func(mode string) (string, error) {
		return p.Render(json.RawMessage(`{"mode":"` + mode + `"}`))
	}
	tests := []struct {
		mode, want string
		err        error
		contains   bool
	}{
		{mode: "file", want: "file: open /etc/passwd: Bad file number", contains: true},
		{mode: "net", want: "onnection refused", contains: true},
		{mode: "time", want: "2022-01-01T00:00:00Z"},
		{mode: "rand", want: ""}, // checked below: the same in every instance
		{mode: "env", want: "0 0"},
		{mode: "fail", err: ErrPluginError, want: "refused on purpose"},
		{mode: "panic", err: ErrPluginTrap, want: "hostile panic"},
		{mode: "big", err: ErrPluginOutput, want: "the cap is 1048576"},
		{mode: "bomb", err: ErrPluginMemory},
		{mode: "loop", err: ErrPluginTimeout},
		{mode: "hello", want: "ok:hello"},
	}
	for _, tc := range tests {
		out, err := render(tc.mode)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, tc.mode)
			require.Contains(t, err.Error(), tc.want, tc.mode)
			continue
		}
		require.NoError(t, err, tc.mode)
		if tc.contains {
			require.Contains(t, out, tc.want, tc.mode)
		} else if tc.want != "" {
			require.Equal(t, tc.want, out, tc.mode)
		}
	}
	st := p.Stats()
	require.Equal(t, 3, st.Discarded, "panic, bomb and loop each discard their instance")
	require.Equal(t, 1, st.Live)

	// Randomness is a fixed source: two fresh instances draw the same bytes.
	r1, err := render("rand")
	require.NoError(t, err)
	_, err = render("panic") // discards the instance
	require.Error(t, err)
	r2, err := render("rand")
	require.NoError(t, err)
	require.Equal(t, r1, r2)
	require.Len(t, r1, 16)
}

// TestCrashTrace: a guest that panics fails with its panic message in the
// error's text, and its stack trace only in the error's Trace (for the
// server log), not in the text a client may see.
func TestCrashTrace(t *testing.T) {
	wasm := buildGuest(t, "./testdata/hostile")
	h := newHost(t, Limits{RenderTimeout: 2 * time.Second, MemoryPages: 1024, MaxOutput: 1 << 20})
	p, err := h.LoadTemplate(context.Background(), "hostile", wasm)
	require.NoError(t, err)
	_, err = p.Render(json.RawMessage(`{"mode":"panic"}`))
	require.ErrorIs(t, err, ErrPluginTrap)
	require.Contains(t, err.Error(), "panic: hostile panic")
	require.NotContains(t, err.Error(), "goroutine")
	require.NotContains(t, err.Error(), "\n")
	require.Contains(t, Trace(err), "panic: hostile panic")
	require.Contains(t, Trace(err), "goroutine 1 [running]")

	// A guest that writes to stderr before it fails: still the panic line.
	require.Equal(t, "panic: boom", guestMessage("log line\nanother\npanic: boom\n\ngoroutine 1 [running]:\nmain.f()"))
	require.Equal(t, "something failed here", guestMessage("something failed\nhere\n\nmore"))
}
