package codegen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// gemmSmallGoldenKernels are the kernels pinned by the small-batch and
// live-length golden files: gemm_small's default arm at the tiny QKV shape
// (Q4_K), and the live-length decode attention arms at the tiny shape (F16
// cache).
func gemmSmallGoldenKernels(t *testing.T) []*Kernel {
	s, err := ShapeByName("tiny")
	require.NoError(t, err)
	g, err := GemmSmall(dtype.Q4_K, (s.Heads+2*s.HeadsKV)*s.HeadDim, s.Hidden, false, DefaultGemmSmallArm)
	require.NoError(t, err)
	ks := []*Kernel{g}
	for _, live := range []int{1, 2} {
		arm := DefaultDecodeArm
		arm.Live = live
		p, c, err := DecodeAttention(s.Attn(dtype.F16), arm)
		require.NoError(t, err)
		ks = append(ks, p, c)
	}
	return ks
}

func TestGemmSmallGolden(t *testing.T) {
	for _, k := range gemmSmallGoldenKernels(t) {
		t.Run(k.Name, func(t *testing.T) {
			path := filepath.Join("testdata", k.Name+".cu")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./codegen -run TestGemmSmallGolden -update")
			require.Equal(t, string(want), k.Source)
		})
	}
}

func TestGemmSmallKernel(t *testing.T) {
	tests := []struct {
		name     string
		t        dtype.Type
		n, k     int
		residual bool
		arm      GemmSmallArm
		tokens   int
		grid     [3]uint32
	}{
		{"default q4_k", dtype.Q4_K, 512, 256, false, DefaultGemmSmallArm, 8, [3]uint32{16, 1, 1}},
		{"ragged rows, 65 tokens", dtype.Q8_0, 1000, 96, true, GemmSmallArm{RowsPerBlock: 64, KSplit: 1, Warps: 2}, 65, [3]uint32{16, 2, 1}},
		{"bf16 two tiles per warp", dtype.BF16, 4096, 4096, true, GemmSmallArm{RowsPerBlock: 128, KSplit: 2, Warps: 8}, 2, [3]uint32{32, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := GemmSmall(tc.t, tc.n, tc.k, tc.residual, tc.arm)
			require.NoError(t, err)
			require.Equal(t, "gemm_small", k.Family)
			require.Contains(t, k.Source, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
			require.Contains(t, k.Source, dqFunc(tc.t)+"(W")
			require.Equal(t, tc.residual, strings.Contains(k.Source, "] += acc[rt][j][2 * h + e];"))
			require.Equal(t, tc.arm.KSplit > 1, strings.Contains(k.Source, "float* red = (float*)smem;"))
			g := k.Launch(Dims{Tokens: tc.tokens, Seqs: tc.tokens})
			require.Equal(t, tc.grid, g.Grid)
			require.Equal(t, uint32(32*tc.arm.Warps), g.Block[0])
			require.Zero(t, g.Shared)
		})
	}
}

func TestGemmSmallArms(t *testing.T) {
	arms := GemmSmallArms()
	require.Greater(t, len(arms), 10)
	require.Contains(t, arms, DefaultGemmSmallArm)
	for _, a := range arms {
		require.NoError(t, a.Validate())
		require.LessOrEqual(t, a.shared(), 48*1024, a.String())
		require.Equal(t, a, GemmSmallArmOf(a.Point()))
	}
	for _, bad := range []GemmSmallArm{
		{RowsPerBlock: 16, KSplit: 1, Warps: 2},  // 2 row warps need 32 rows
		{RowsPerBlock: 128, KSplit: 1, Warps: 2}, // 4 tiles per warp
		{RowsPerBlock: 32, KSplit: 3, Warps: 8},  // groups do not divide warps
		{RowsPerBlock: 32, KSplit: 1, Warps: 0},
	} {
		require.ErrorIs(t, bad.Validate(), ErrUnsupported, "%+v", bad)
	}
	_, err := GemmSmall(dtype.Q4_K, 64, 100, false, DefaultGemmSmallArm)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = GemmSmall(dtype.Q8_0, 0, 64, false, DefaultGemmSmallArm)
	require.ErrorIs(t, err, ErrUnsupported)
}

func TestDecodeLiveArm(t *testing.T) {
	s, err := ShapeByName("tiny")
	require.NoError(t, err)
	p0, c0, err := DecodeAttention(s.Attn(dtype.F16), DefaultDecodeArm)
	require.NoError(t, err)
	for _, live := range []int{1, 2} {
		arm := DefaultDecodeArm
		arm.Live = live
		p, c, err := DecodeAttention(s.Attn(dtype.F16), arm)
		require.NoError(t, err)
		require.NotEqual(t, p0.Name, p.Name)
		require.NotEqual(t, c0.Name, c.Name)
		require.Contains(t, c.Source, "const int live = min(splits, (len + chunk - 1) / chunk);")
		require.NotContains(t, p.Source, "part_o[po * HD + d] = 0.f;")
		require.Equal(t, arm, DecodeArmOf(arm.Point()))
		// graph replay: the geometry depends on the launch dims only, as
		// today; live 2 takes at most MaxLiveSplits (4096 keys in 64-key
		// chunks would be 64)
		for _, d := range []Dims{{Seqs: 3, KVLen: 700}, {Seqs: 1, KVLen: 4096}} {
			want := p0.Launch(d)
			if live == 2 {
				want.Grid[1] = uint32(min(int(want.Grid[1]), MaxLiveSplits))
			}
			require.Equal(t, want, p.Launch(d))
			require.Equal(t, c0.Launch(d), c.Launch(d))
		}
	}
	// a Live 3 point (a tunedb entry) is a valid arm without SMs, which
	// lowering sets; its kernels need them, and SMs belong to Live 3 alone
	l3 := DecodeArm{Threads: 128, Chunk: 256, Live: 3}
	require.NoError(t, l3.Validate())
	require.Equal(t, l3, DecodeArmOf(l3.Point()))
	_, _, err = DecodeAttention(s.Attn(dtype.F16), l3)
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorContains(t, err, "multiprocessors")
	l3.SMs = 132
	_, _, err = DecodeAttention(s.Attn(dtype.F16), l3)
	require.NoError(t, err)
	require.ErrorIs(t, DecodeArm{Threads: 128, Chunk: 256, Live: 2, SMs: 132}.Validate(), ErrUnsupported)
	require.True(t, slices.ContainsFunc(liveSpace(t).Arms(), func(p Point) bool { return p["live"] == 3 }),
		"the live-length space searches Live 3")
	require.Equal(t, "t256_c64", DefaultDecodeArm.String(), "live 0 arms have no live suffix")
	require.Equal(t, Point{"threads": 256, "chunk": 64}, DefaultDecodeArm.Point())
}

// liveSpace is the "attn_decode_live" space.
func liveSpace(t *testing.T) Space {
	t.Helper()
	sp, err := SpaceByName("attn_decode_live")
	require.NoError(t, err)
	return sp
}
