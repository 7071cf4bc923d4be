package cuda

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/pipeline"
	"github.com/memra-ai/memra/runtime/synth"
)

// TestLowerStagePrograms lowers both stages of a split (no GPU needed):
// each stage's programs use only its own layers' KV caches, and together
// they hold the whole model's weights.
func TestLowerStagePrograms(t *testing.T) {
	m := openModel(t, storiesPath)
	L := m.HParams.Layers
	wholeDec, _, err := Lower(m, BackendOptions{MaxSeqs: 4})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4}, cacheLayers(wholeDec))
	for _, k := range []int{1, 3} {
		d1, p1, err := lowerStage(m, BackendOptions{MaxSeqs: 4}, 0, k)
		require.NoError(t, err)
		d2, p2, err := lowerStage(m, BackendOptions{MaxSeqs: 4}, k, L)
		require.NoError(t, err)
		require.Equal(t, seqInts(0, k), cacheLayers(d1))
		require.Equal(t, seqInts(0, k), cacheLayers(p1))
		require.Equal(t, seqInts(k, L), cacheLayers(d2))
		require.Equal(t, seqInts(k, L), cacheLayers(p2))
		require.GreaterOrEqual(t, d1.HiddenOut, 0)
		require.GreaterOrEqual(t, d2.HiddenIn, 0)
		require.Equal(t, -1, d1.Logits)
		_, whole := uniqueWeights(wholeDec)
		_, a := uniqueWeights(d1)
		_, b := uniqueWeights(d2)
		// A tied embedding is held by both stages.
		require.GreaterOrEqual(t, a+b, whole)
	}
}

func seqInts(a, b int) []int {
	var s []int
	for i := a; i < b; i++ {
		s = append(s, i)
	}
	return s
}

// TestGPUStagesOneDevice runs two stages on GPU 0 against one backend on a
// small synthesized model: the same greedy tokens (exact configuration),
// with the boundary copied device to device and, forced, through the host.
// MEMRA_PP_TEST_DEVICES=0,1 puts the stages on two GPUs (peer copies) and
// MEMRA_PP_TEST_STEPS sets the greedy steps (default 32); scripts/gpu-pp2.sh
// uses both.
func TestGPUStagesOneDevice(t *testing.T) {
	gpuOrSkip(t)
	devices, err := pipeline.ParseDevices(cmp.Or(os.Getenv("MEMRA_PP_TEST_DEVICES"), "0,0"), 2)
	require.NoError(t, err)
	steps, err := strconv.Atoi(cmp.Or(os.Getenv("MEMRA_PP_TEST_STEPS"), "32"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "qwen3.gguf")
	_, err = synth.WriteGGUF(path, synth.Options{Preset: "qwen3-8b", Layers: 4, Dim: 256, Quant: "q8_0", Context: 512, Weights: synth.WeightsFloat})
	require.NoError(t, err)
	m := openModel(t, path)
	o := BackendOptions{MaxSeqs: 8, Cache: "f32", PrefillGEMV: true}
	one := gpuBackend(t, m, o)
	for _, c := range []struct {
		name  string
		split int
		host  bool
	}{{"same-device/split1", 1, false}, {"same-device/split2", 2, false}, {"host-bounce/split3", 3, true}} {
		t.Run(c.name, func(t *testing.T) {
			if c.host {
				t.Setenv("MEMRA_PP_HOST_BOUNCE", "1")
			}
			so := o
			so.CacheDir = filepath.Join(t.TempDir(), "cubin")
			stages, err := NewStages(m, []int{c.split}, devices, so)
			require.NoError(t, err)
			want := []string{BoundarySame}
			if devices[0] != devices[1] {
				want = []string{BoundaryPeer, BoundaryHost} // host when the GPUs have no peer access
			}
			if c.host {
				want = []string{BoundaryHost}
			}
			require.Contains(t, want, stages[0].(*Stage).BoundaryMode())
			t.Logf("boundary: %s", stages[0].(*Stage).BoundaryMode())
			p, err := pipeline.New(stages, pipeline.Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close()) }()
			for _, n := range []int{1, 8} {
				ps := prompts(m.HParams.VocabSize, n, 16, uint64(n))
				rep, err := Parity(context.Background(), one, p, ps, steps, 1)
				require.NoError(t, err)
				require.Zero(t, rep.Mismatches, "batch %d", n)
				require.GreaterOrEqual(t, rep.MinCosine, 0.9999, "batch %d", n)
			}
			require.Positive(t, p.(interface{ Stats() pipeline.Stats }).Stats().Boundary)
		})
	}
}
