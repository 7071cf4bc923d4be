package codegen

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// gemmaGoldenKernels are the Gemma kernels pinned by testdata/*.cu: the
// elementwise ones at the tiny shape, and attention over a window of 64
// with Gemma 2's soft cap (f16 cache): the live decode pair with its
// preload, prefill on CUDA cores and on tensor cores.
func gemmaGoldenKernels(t *testing.T) []*Kernel {
	s, err := ShapeByName("tiny")
	require.NoError(t, err)
	s.Window = 64
	all, err := GemmaKernels(s)
	require.NoError(t, err)
	var ks []*Kernel
	for _, k := range all {
		name := k.Name
		keep := !strings.HasPrefix(name, "attn_") ||
			(strings.Contains(name, "_f16_") && strings.Contains(name, "_cap50_") &&
				(strings.Contains(name, "_l2_p") && !strings.Contains(name, "fused") || strings.HasPrefix(name, "attn_prefill") || strings.HasPrefix(name, "attn_flash")))
		if keep {
			ks = append(ks, k)
		}
	}
	return ks
}

func TestGemmaKernelsGolden(t *testing.T) {
	ks := gemmaGoldenKernels(t)
	require.Len(t, ks, 9)
	for _, k := range ks {
		t.Run(k.Family+"/"+k.Name, func(t *testing.T) {
			path := filepath.Join("testdata", k.Name+".cu")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./codegen -run TestGemmaKernelsGolden -update")
			require.Equal(t, string(want), k.Source)
		})
	}
}

// The Gemma kernels name what they specialise on, and attention without a
// window or cap is the kernel it always was.
func TestGemmaKernelNames(t *testing.T) {
	s, err := ShapeByName("gemma3-12b")
	require.NoError(t, err)
	ks, err := GemmaKernels(s)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, k := range ks {
		require.False(t, seen[k.Name], k.Name)
		seen[k.Name] = true
		require.Contains(t, k.Source, " "+k.Name+"(")
		if strings.HasPrefix(k.Name, "attn_") {
			require.Contains(t, k.Name, "_win1024")
			require.Contains(t, k.Source, "#define WINDOW 1024")
			require.Equal(t, strings.Contains(k.Name, "_cap50"), strings.Contains(k.Source, "#define SOFTCAP 50.0f"), k.Name)
		}
	}
	require.True(t, seen["scale_d3840_x61p967735_t256"])
	require.True(t, seen["softcap_d262208_c30_t256"])
	plain := s.Attn(dtype.F16)
	p, _, err := DecodeAttention(plain, DefaultDecodeArm)
	require.NoError(t, err)
	require.NotContains(t, p.Source, "WINDOW")
	require.NotContains(t, p.Source, "SOFTCAP")
	require.Equal(t, "50.0f", cfloat(50))
	require.Equal(t, "0.125f", cfloat(0.125))
	require.Equal(t, "2p5", identFloat(2.5))
	// a window's decode splits cover it, not the capacity
	w := plain
	w.Window = 1024
	live := DefaultDecodeLiveArm
	live.SMs = DefaultMultiprocessors
	require.Equal(t, live.Splits(1024), live.Splits(w.KeySpan(32768)))
	g := p.Launch(Dims{Seqs: 2, KVLen: 32768})
	pw, _, err := DecodeAttention(w, live)
	require.NoError(t, err)
	require.Less(t, pw.Launch(Dims{Seqs: 2, KVLen: 32768}).Grid[1], g.Grid[1])
	require.Error(t, AttnShape{Heads: 2, HeadsKV: 1, HeadDim: 64, QStride: 128, Cache: dtype.F16, Window: -1}.validate())
}

// The references of the Gemma kernels against their definitions.
func TestGemmaRefs(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := randF32(r, 64)
	for i, v := range RefSoftcap(30, x) {
		require.InDelta(t, 30*math.Tanh(float64(x[i])/30), float64(v), 1e-6)
	}
	for i, v := range RefScale(8, x) {
		require.Equal(t, x[i]*8, v)
	}
	gu := randF32(r, 2*3*8)
	out := RefGeGLU(8, gu)
	g, u := float64(gu[16+5]), float64(gu[16+8+5])
	require.InDelta(t, g*0.5*(1+math.Erf(g/math.Sqrt2))*u, float64(out[8+5]), 2e-3*math.Abs(u)+1e-4, "close to the exact GELU")
	h, w := randF32(r, 2*16), randF32(r, 16)
	y := RefPostNormAdd(16, 1e-6, x[:32], h, w)
	ss := 0.0
	for _, v := range h[16:] {
		ss += float64(v) * float64(v)
	}
	require.InDelta(t, float64(x[16+3])+float64(h[16+3])/math.Sqrt(ss/16+1e-6)*float64(w[3]), float64(y[16+3]), 1e-6)
}
