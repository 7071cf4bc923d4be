package plugin

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	testDir   string // per test binary run: built guests and the compilation cache
	buildMu   sync.Mutex
	builtWasm = map[string][]byte{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "memra-plugin-test")
	if err != nil {
		panic(err)
	}
	testDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildGuest builds the Go plugin in pkg (relative to this package) as a
// wasip1 reactor, once per test binary run.
func buildGuest(tb testing.TB, pkg string) []byte {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if b, ok := builtWasm[pkg]; ok {
		return b
	}
	goBin := filepath.Join(goruntime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	out := filepath.Join(testDir, filepath.Base(pkg)+".wasm")
	cmd := exec.Command(goBin, "build", "-trimpath", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(tb, cmd.Run(), "building %s: %s", pkg, stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(tb, err)
	builtWasm[pkg] = b
	return b
}

// newHost starts a Host sharing the run's compilation cache.
func newHost(tb testing.TB, lim Limits) *Host {
	tb.Helper()
	h, err := NewHost(context.Background(), Config{Limits: lim, CacheDir: filepath.Join(testDir, "cache")})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, h.Close()) })
	return h
}

// checkGoroutines fails the test if it leaves more goroutines than it
// found, once they have had a moment to settle. Call it first so its
// cleanup runs last.
func checkGoroutines(t *testing.T) {
	before := goruntime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		n := goruntime.NumGoroutine()
		for n > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			n = goruntime.NumGoroutine()
		}
		require.LessOrEqual(t, n, before, "goroutines leaked")
	})
}

// wasm assembles tiny modules by hand for the hostile cases.
type wfunc struct {
	name            string
	params, results []byte // value types: 0x7f i32, 0x7e i64
	body            []byte // instructions, without the final end
}

const (
	tI32 = 0x7f
	tI64 = 0x7e
)

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func vec(items ...[]byte) []byte {
	out := uleb(uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

func name(s string) []byte { return append(uleb(uint64(len(s))), s...) }

// rawModule builds a module with one exported memory of one page, the
// functions, and data written at address 2048.
func rawModule(data []byte, fns ...wfunc) []byte {
	var types, funcs, exps, codes [][]byte
	for i, f := range fns {
		types = append(types, append(append([]byte{0x60}, vec(bytesOf(f.params)...)...), vec(bytesOf(f.results)...)...))
		funcs = append(funcs, uleb(uint64(i)))
		exps = append(exps, append(name(f.name), append([]byte{0x00}, uleb(uint64(i))...)...))
		body := append([]byte{0x00}, f.body...) // no locals
		body = append(body, 0x0b)
		codes = append(codes, append(uleb(uint64(len(body))), body...))
	}
	exps = append(exps, append(name("memory"), 0x02, 0x00))
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	out = append(out, section(1, vec(types...))...)
	out = append(out, section(3, vec(funcs...))...)
	out = append(out, section(5, vec([]byte{0x00, 0x01}))...)
	out = append(out, section(7, vec(exps...))...)
	out = append(out, section(10, vec(codes...))...)
	if data != nil {
		seg := append([]byte{0x00, 0x41}, sleb(2048)...)
		seg = append(seg, 0x0b)
		seg = append(seg, name(string(data))...)
		out = append(out, section(11, vec(seg))...)
	}
	return out
}

func bytesOf(b []byte) [][]byte {
	out := make([][]byte, len(b))
	for i := range b {
		out[i] = b[i : i+1]
	}
	return out
}

func i32c(v int32) []byte { return append([]byte{0x41}, sleb(int64(v))...) }
func i64c(v int64) []byte { return append([]byte{0x42}, sleb(v)...) }

var (
	opLoop        = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b} // loop br 0 end
	opUnreachable = []byte{0x00}
	// opGrowForever grows memory one page at a time until refused, then traps.
	opGrowForever = []byte{0x03, 0x40, 0x41, 0x01, 0x40, 0x00, 0x41, 0x7f, 0x47, 0x0d, 0x00, 0x0b, 0x00}
)

// abiFuncs are the common exports of a raw plugin speaking version v.
func abiFuncs(v int32) []wfunc {
	return []wfunc{
		{name: "memra_abi_version", results: []byte{tI32}, body: i32c(v)},
		{name: "memra_alloc", params: []byte{tI32}, results: []byte{tI32}, body: i32c(1024)},
		{name: "memra_free", params: []byte{tI32}},
		{name: "memra_last_error", results: []byte{tI64}, body: i64c(2048<<32 | 3)},
	}
}

// rawTemplate is a template plugin whose memra_render runs body; its data
// at 2048 is "\x00hi" (status ok, text "hi").
func rawTemplate(v int32, body []byte) []byte {
	fns := append(abiFuncs(v), wfunc{name: "memra_render", params: []byte{tI32, tI32}, results: []byte{tI64}, body: body})
	return rawModule([]byte("\x00hi"), fns...)
}

// okRender returns the data segment's "\x00hi".
var okRender = i64c(2048<<32 | 3)
