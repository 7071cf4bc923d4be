package cuda

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const vecAddSrc = `
extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
`

func nvrtcOrSkip(t *testing.T) *NVRTC {
	t.Helper()
	n, err := LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC library (install libnvrtc11.2 or a CUDA toolkit): %v", err)
	}
	return n
}

func deviceOrSkip(t *testing.T) *Device {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no CUDA GPU: %v", err)
	}
	d, err := Open(0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func TestNVRTCCompilePTX(t *testing.T) {
	n := nvrtcOrSkip(t)
	out, err := n.Compile(vecAddSrc, "vec_add.cu", []string{ArchOption("compute_90")})
	require.NoError(t, err)
	require.Contains(t, string(out.PTX), ".entry vec_add")
	require.Contains(t, string(out.PTX), "griddepcontrol.wait")
	require.Equal(t, out.PTX, out.Image())
}

func TestNVRTCCompileError(t *testing.T) {
	n := nvrtcOrSkip(t)
	_, err := n.Compile("extern \"C\" __global__ void k() { undeclared_thing(); }", "bad.cu", []string{ArchOption("compute_90")})
	require.ErrorIs(t, err, ErrNVRTC)
	require.Contains(t, err.Error(), "undeclared_thing")
}

func TestCacheHit(t *testing.T) {
	n := nvrtcOrSkip(t)
	c, err := NewCache(t.TempDir(), n)
	require.NoError(t, err)
	img, hit, err := c.Compile(vecAddSrc, "vec_add.cu", "compute_90", nil)
	require.NoError(t, err)
	require.False(t, hit)
	img2, hit, err := c.Compile(vecAddSrc, "vec_add.cu", "compute_90", nil)
	require.NoError(t, err)
	require.True(t, hit)
	require.Equal(t, img, img2)
	require.NotEqual(t, c.Key(vecAddSrc, "compute_90", nil), c.Key(vecAddSrc, "compute_80", nil))
	require.NotEqual(t, c.Key(vecAddSrc, "compute_90", nil), c.Key(vecAddSrc+" ", "compute_90", nil))
}

func TestPackParams(t *testing.T) {
	tests := []struct {
		name string
		args []any
		want []uint64
		err  bool
	}{
		{"mixed", []any{DevicePtr(0x1000), int32(-1), uint32(7), float32(1.5), 3}, []uint64{0x1000, 0xffffffff, 7, uint64(math.Float32bits(1.5)), 3}, false},
		{"bad type", []any{"x"}, nil, true},
		{"int overflow", []any{1 << 40}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := packParams(tc.args)
			if tc.err {
				require.ErrorIs(t, err, ErrArg)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, p.slots[:len(tc.args)])
		})
	}
}

func TestAvailableReason(t *testing.T) {
	if err := Available(); err != nil {
		require.True(t, strings.Contains(err.Error(), "cuda:"), err.Error())
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// try panics with err; Do turns the panic into its error, so test code on
// the GPU worker never calls t.FailNow (which must run on the test goroutine).
func try(err error) {
	if err != nil {
		panic(err)
	}
}

// TestVecAddLaunchGraphPDL compiles a kernel for the device, launches it
// plainly, replays it from a captured graph, and launches it with PDL.
func TestVecAddLaunchGraphPDL(t *testing.T) {
	n := nvrtcOrSkip(t)
	dev := deviceOrSkip(t)
	info := dev.Info()
	out, err := n.Compile(vecAddSrc, "vec_add.cu", []string{ArchOption(info.Arch())})
	require.NoError(t, err)
	const N = 10000
	a, b := make([]float32, N), make([]float32, N)
	for i := range a {
		a[i], b[i] = float32(i), float32(2*i)+0.5
	}
	results := map[string][]float32{}
	var ms float32
	err = dev.Do(func(c *Ctx) error {
		mod, err := c.LoadModule(out.Image())
		try(err)
		defer c.UnloadModule(mod)
		f, err := c.Function(mod, "vec_add")
		try(err)
		var bufs [3]DevicePtr
		for i := range bufs {
			bufs[i], err = c.Alloc(4 * N)
			try(err)
			defer c.Free(bufs[i])
		}
		da, db, dc := bufs[0], bufs[1], bufs[2]
		try(c.CopyHtoD(da, f32bytes(a)))
		try(c.CopyHtoD(db, f32bytes(b)))
		s, err := c.NewStream()
		try(err)
		defer c.DestroyStream(s)
		cfg := LaunchConfig{Grid: [3]uint32{(N + 255) / 256, 1, 1}, Block: [3]uint32{256, 1, 1}, Stream: s}
		collect := func(what string) {
			try(c.StreamSync(s))
			got := make([]byte, 4*N)
			try(c.CopyDtoH(got, dc))
			results[what] = bytesF32(got)
			try(c.Memset(dc, 0, 4*N))
		}
		try(c.Launch(f, cfg, da, db, dc, N))
		collect("plain launch")

		try(c.BeginCapture(s))
		for i := 0; i < 4; i++ {
			try(c.Launch(f, cfg, da, db, dc, N))
		}
		g, err := c.EndCapture(s)
		try(err)
		defer c.DestroyGraph(g)
		ge, err := c.Instantiate(g)
		try(err)
		defer c.DestroyGraphExec(ge)
		e0, err := c.NewEvent()
		try(err)
		e1, err := c.NewEvent()
		try(err)
		try(c.Record(e0, s))
		for i := 0; i < 3; i++ {
			try(c.LaunchGraph(ge, s))
		}
		try(c.Record(e1, s))
		try(c.EventSync(e1))
		ms, err = c.Elapsed(e0, e1)
		try(err)
		collect("graph replay")

		if info.Major >= 9 {
			pcfg := cfg
			pcfg.PDL = true
			try(c.Launch(f, cfg, da, db, dc, N))
			try(c.Launch(f, pcfg, da, db, dc, N))
			collect("PDL launch")
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, ms, float32(0))
	for what, got := range results {
		for i, v := range got {
			require.Equal(t, a[i]+b[i], v, "%s: element %d", what, i)
		}
	}
	want := 2
	if info.Major >= 9 {
		want = 3
	}
	require.Len(t, results, want)
}

func TestDoRecoversPanic(t *testing.T) {
	dev := deviceOrSkip(t)
	err := dev.Do(func(*Ctx) error { panic("boom") })
	require.ErrorContains(t, err, "boom")
	require.NoError(t, dev.Do(func(c *Ctx) error { return c.Synchronize() }))
}

func TestDoAfterClose(t *testing.T) {
	dev := deviceOrSkip(t)
	d2, err := Open(dev.Info().Ordinal)
	require.NoError(t, err)
	require.NoError(t, d2.Close())
	require.ErrorIs(t, d2.Do(func(*Ctx) error { return nil }), ErrClosed)
}
