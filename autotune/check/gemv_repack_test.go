package check

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// cpuGEMV computes y (+)= W·x on the host from a launch's dequantised
// weights, as the kernel would.
func cpuGEMV(w []float32, n, k int, x, y []float32, m int) []float32 {
	out := append([]float32(nil), y...)
	for r := range m {
		for c := range n {
			var s float32
			for i := range k {
				s += w[c*k+i] * x[r*k+i]
			}
			out[r*n+c] += s
		}
	}
	return out
}

// TestGEMVRepackedCase checks that a layout-1 arm's launch carries the
// repacked weights (dequantising them and multiplying on the host passes
// the case's reference, which reads the file's layout), that a layout-0
// arm keeps the file's bytes, and that the case's space offers layout 1
// only for repacked types.
func TestGEMVRepackedCase(t *testing.T) {
	const n, k, m = 40, 512, 2
	for _, ty := range codegen.RepackTypes {
		t.Run(ty.String(), func(t *testing.T) {
			c := Product("test", "gemv", "down", ty, n, k, m, true, 3)
			arm := codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1, Layout: 1}.Point()
			require.NoError(t, c.Space().Valid(arm))
			l1, err := c.Launch(arm)
			require.NoError(t, err)
			l0, err := c.Launch(codegen.DefaultGEMVArm.Point()) // the file's layout
			require.NoError(t, err)
			W0, W1 := l0.Args[0][0].Buf.Data, l1.Args[0][0].Buf.Data
			require.NotEqual(t, W0, W1)
			want, err := codegen.Repack(ty, n, k, W0)
			require.NoError(t, err)
			require.Equal(t, want, W1)
			require.Contains(t, l1.Kernels[0].Name, "_l1")

			w := make([]float32, n*k)
			require.NoError(t, codegen.DequantizeRepacked(ty, n, k, W1, w))
			x := bytesF32(l1.Args[0][1].Buf.Data)
			y0 := bytesF32(l1.Args[0][2].Buf.Data)
			got := cpuGEMV(w, n, k, x, y0, m)
			e, err := c.Compare([][]byte{f32Bytes(got)})
			require.NoError(t, err)
			require.Less(t, e, c.Tol)
			// the file's bytes read as repacked are wrong: the gate would catch a mix-up
			require.NoError(t, codegen.DequantizeRepacked(ty, n, k, W0, w))
			e, err = c.Compare([][]byte{f32Bytes(cpuGEMV(w, n, k, x, y0, m))})
			require.NoError(t, err)
			require.False(t, e <= c.Tol, "file bytes read as repacked pass: rel. error %g", e) // NaN fails too
		})
	}
	f16 := Product("test", "gemv", "down", dtype.F16, n, k, m, true, 3)
	for _, p := range f16.Space().Arms() {
		require.Zero(t, p["layout"], p)
	}
	require.Error(t, f16.Space().Valid(codegen.GEMVArm{Threads: 128, RowsPerBlock: 4, Unroll: 2, SharedX: 1, Layout: 1}.Point()))
}
