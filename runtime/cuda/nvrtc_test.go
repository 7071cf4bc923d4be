package cuda

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestNVRTCConcurrentCompile compiles eight generated int8 product kernels
// (one-row arms of a 4096×4096 Q4_K product) one after another, then all
// at once from eight goroutines, and requires the same PTX from both: in
// parallel where Concurrent (MEMRA_NVRTC_PARALLEL=1, NVRTC 12 or later),
// else one at a time. The times are logged (go test -v): the autotuner's
// --parallel is worth what they differ by.
func TestNVRTCConcurrentCompile(t *testing.T) {
	n := nvrtcOrSkip(t)
	base := codegen.DefaultXQGlobalOneArm
	var srcs []*codegen.Kernel
	for _, u := range []int{1, 2} {
		for _, w := range []int{2, 4} {
			for _, split := range []bool{false, true} {
				a := base
				a.Unroll, a.RowsPerWarp = u, w
				if split {
					a = a.Split(2)
				}
				k, err := codegen.GEMVXQ(dtype.Q4_K, 4096, 4096, true, a, codegen.XQEnds{}, 0)
				require.NoError(t, err, a.String())
				srcs = append(srcs, k)
			}
		}
	}
	archs := []string{"compute_90"}
	if major, _ := n.Version(); major >= 12 {
		archs = append(archs, "sm_90a") // through ptxas, as the autotuner compiles
	}
	for _, arch := range archs {
		opts := []string{ArchOption(arch)}
		serial := make([]*Compiled, len(srcs))
		t0 := time.Now()
		for i, k := range srcs {
			c, err := n.Compile(k.Source, k.Name+".cu", opts)
			require.NoError(t, err, k.Name)
			serial[i] = c
		}
		ts := time.Since(t0)
		par := make([]*Compiled, len(srcs))
		errs := make([]error, len(srcs))
		var wg sync.WaitGroup
		t0 = time.Now()
		for i, k := range srcs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				par[i], errs[i] = n.Compile(k.Source, k.Name+".cu", opts)
			}()
		}
		wg.Wait()
		tp := time.Since(t0)
		for i, k := range srcs {
			require.NoError(t, errs[i], k.Name)
			require.Equal(t, serial[i].PTX, par[i].PTX, k.Name)
			require.Equal(t, len(serial[i].CUBIN) > 0, len(par[i].CUBIN) > 0, k.Name)
		}
		t.Logf("NVRTC %d.%d, %s: %d kernels in %v one at a time, %v from %d goroutines (concurrent %v)",
			n.major, n.minor, arch, len(srcs), ts.Round(time.Millisecond), tp.Round(time.Millisecond), len(srcs), n.Concurrent())
	}
}

// Where NVRTC is missing, make test prints one line saying the compile
// gate skipped and how .ci/run provides NVRTC; where it loads, nothing.
func TestCompileGateNotice(t *testing.T) {
	_, _, err := dlopen([]string{"libnvrtc-absent.so.0"}, []string{t.TempDir()})
	require.ErrorIs(t, err, ErrNoLibrary)
	n := compileGateNotice(err)
	require.Contains(t, n, "make test: the NVRTC compile gate was skipped (")
	require.Contains(t, n, "libnvrtc-absent.so.0")
	require.Contains(t, n, ".ci/run installs Debian's libnvrtc11.2")
	require.NotContains(t, n, "\n")
	require.Empty(t, compileGateNotice(nil))
	if _, err := LoadNVRTC(); err == nil {
		require.Empty(t, CompileGateNotice())
	}
}
