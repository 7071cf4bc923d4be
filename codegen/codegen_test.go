package codegen

import (
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden .cu files in testdata")

// goldenKernels are the kernels pinned by testdata/*.cu: each family's
// default arm at the tiny shape (Q4_K weights, F16 cache).
func goldenKernels(t *testing.T) []*Kernel {
	s, err := ShapeByName("tiny")
	require.NoError(t, err)
	ks, err := DefaultKernels(s, []dtype.Type{dtype.Q4_K})
	require.NoError(t, err)
	return ks
}

func TestGolden(t *testing.T) {
	for _, k := range goldenKernels(t) {
		t.Run(k.Family+"/"+k.Name, func(t *testing.T) {
			path := filepath.Join("testdata", k.Name+".cu")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./codegen -run TestGolden -update")
			require.Equal(t, string(want), k.Source)
		})
	}
}

func TestKernelNamesUniqueAndHeaderFree(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range goldenKernels(t) {
		require.False(t, seen[k.Name], k.Name)
		seen[k.Name] = true
		require.NotContains(t, k.Source, "#include", k.Name)
		require.Contains(t, k.Source, `extern "C" __global__ void `, k.Name)
		require.Contains(t, k.Source, " "+k.Name+"(", k.Name)
		require.True(t, strings.HasPrefix(k.Source, "// Code generated"), k.Name)
		g := k.Launch(Dims{Tokens: 3, Seqs: 2, KVLen: 700})
		require.Positive(t, g.Block[0], k.Name)
		require.Positive(t, g.Grid[0]*g.Grid[1]*g.Grid[2], k.Name)
	}
}

func TestArmSpaces(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		hasDflt bool
	}{
		{"block", len(BlockArms()), contains(BlockArms(), DefaultBlockArm)},
		{"gemv", len(GEMVArms()), contains(GEMVArms(), DefaultGEMVArm)},
		{"mma", len(MMAArms()), contains(MMAArms(), DefaultMMAArm)},
		{"decode", len(DecodeArms()), contains(DecodeArms(), DefaultDecodeArm)},
		{"prefill", len(PrefillArms()), contains(PrefillArms(), DefaultPrefillArm)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Greater(t, tc.n, 1)
			require.True(t, tc.hasDflt, "default arm not in the search space")
		})
	}
	for _, a := range MMAArms() {
		require.NoError(t, a.Validate())
	}
	require.Error(t, GEMVArm{Threads: 96, RowsPerBlock: 2, Unroll: 1}.Validate())
	require.Error(t, MMAArm{BM: 48, BN: 64, WarpsM: 2, WarpsN: 2}.Validate())
}

func contains[A comparable](as []A, a A) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

func TestUnsupported(t *testing.T) {
	_, err := GEMV(dtype.Q4_K, 64, 100, false, DefaultGEMVArm)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = Embedding(dtype.Q8_K, 256, DefaultBlockArm)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = RopeKV(RopeShape{Heads: 3, HeadsKV: 2, HeadDim: 64, RopeDim: 64, Cache: dtype.F16}, DefaultBlockArm)
	require.ErrorIs(t, err, ErrUnsupported)
	_, _, err = DecodeAttention(AttnShape{Heads: 4, HeadsKV: 2, HeadDim: 64, QStride: 256, Cache: dtype.Q4_K}, DefaultDecodeArm)
	require.ErrorIs(t, err, ErrUnsupported)
}

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestRefMatMulMatchesDot(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, ty := range WeightTypes {
		t.Run(ty.String(), func(t *testing.T) {
			const n, k = 3, 512
			W, err := dtype.Quantize(ty, randF32(r, n*k))
			require.NoError(t, err)
			x := randF32(r, k)
			y, err := RefMatMul(ty, n, k, W, x, 1, nil, false)
			require.NoError(t, err)
			rb, _ := ty.RowBytes(k)
			for c := 0; c < n; c++ {
				d := dtype.Dot(ty, W[c*rb:(c+1)*rb], x)
				require.InDelta(t, d, y[c], 1e-3*(1+math.Abs(float64(d))))
			}
		})
	}
}

func TestRefAttentionUniform(t *testing.T) {
	// q = 0 gives uniform weights: the output is the mean of v.
	s := AttnShape{Heads: 2, HeadsKV: 1, HeadDim: 32, QStride: 64, Cache: dtype.F32}
	r := rand.New(rand.NewPCG(3, 4))
	const keys = 5
	kc, vc := randF32(r, keys*32), randF32(r, keys*32)
	out := RefAttention(s, make([]float32, 64), []int32{0}, []int32{keys}, []int32{0}, kc, vc)
	for d := 0; d < 32; d++ {
		var mean float64
		for j := 0; j < keys; j++ {
			mean += float64(vc[j*32+d]) / keys
		}
		require.InDelta(t, mean, out[d], 1e-6)
		require.InDelta(t, mean, out[32+d], 1e-6)
	}
}

func TestRefSmall(t *testing.T) {
	require.Equal(t, []int32{1, 0}, RefArgmax(3, []float32{1, 5, 5, 2, 2, -1}))
	nan := float32(math.NaN())
	require.Equal(t, []int32{-1, 2, -1}, RefArgmax(3, []float32{1, nan, 5, 2, 2, 3, nan, 0, 0}))
	xo, y := RefRMSNormAdd(2, 0, true, []float32{1, 1}, []float32{2, -4}, []float32{1, 2})
	require.Equal(t, []float32{3, -3}, xo)
	require.InDeltaSlice(t, []float64{1, -2}, []float64{float64(y[0]), float64(y[1])}, 1e-6)
	require.InDelta(t, 0.0, RelErr([]float32{1, 2}, []float32{1, 2}), 0)
	sw := RefSwiGLU(1, []float32{0, 3})
	require.Equal(t, float32(0), sw[0])
}
