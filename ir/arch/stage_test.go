package arch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestStagesPartitionTheModel splits each model at every layer and checks
// that the stages are verified graphs that hand the residual stream on, that
// no stage reads another stage's layer weights, and that together they read
// exactly the whole model's weights.
func TestStagesPartitionTheModel(t *testing.T) {
	for _, hp := range []ir.HParams{stories, qwen2, qwen3} {
		w := synth(hp, dtype.F32)
		whole, err := Build(hp, w)
		require.NoError(t, err)
		for k := 1; k < hp.Layers; k++ {
			s1, err := BuildStage(hp, w, 0, k)
			require.NoError(t, err, "%s split %d", hp.Name, k)
			s2, err := BuildStage(hp, w, k, hp.Layers)
			require.NoError(t, err, "%s split %d", hp.Name, k)
			require.NoError(t, ir.RunPasses(s1, ir.Passes))
			require.NoError(t, ir.RunPasses(s2, ir.Passes))

			require.Equal(t, ir.OpHiddenOut, s1.Result().Op)
			require.Nil(t, s1.Output())
			require.Equal(t, ir.OpOutput, s2.Result().Op)
			require.Nil(t, s1.Node(ir.OpHiddenIn))
			in := s2.Node(ir.OpHiddenIn)
			require.NotNil(t, in)
			require.Equal(t, s1.Result().Shape, in.Shape, "the boundary shapes agree")
			require.Nil(t, s2.Node(ir.OpTokens), "a later stage reads no tokens")
			require.Nil(t, s2.Node(ir.OpEmbed))

			require.Equal(t, seq(0, k), s1.CacheLayers())
			require.Equal(t, seq(k, hp.Layers), s2.CacheLayers())
			require.Equal(t, map[string]int{"stage_first": 0, "stage_last": k}, pick(s1.Consts, "stage_first", "stage_last"))

			w1, w2 := s1.Weights(), s2.Weights()
			for _, n := range w1 {
				if slices.Contains(w2, n) {
					shared := n == "token_embd.weight" && hp.TiedEmbedding || n == "rope_freqs.weight"
					require.True(t, shared, "%s split %d: both stages read %s", hp.Name, k, n)
				}
			}
			union := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(w1), w2...))))
			require.Equal(t, whole.Weights(), union, "%s split %d", hp.Name, k)
		}
	}
}

func seq(a, b int) []int {
	var s []int
	for i := a; i < b; i++ {
		s = append(s, i)
	}
	return s
}

func pick(m map[string]int, keys ...string) map[string]int {
	out := map[string]int{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// TestStageWholeIsBuild checks that the stage covering every layer is the
// whole model, text for text.
func TestStageWholeIsBuild(t *testing.T) {
	w := synth(qwen3, dtype.BF16)
	a, err := Build(qwen3, w)
	require.NoError(t, err)
	b, err := BuildStage(qwen3, w, 0, qwen3.Layers)
	require.NoError(t, err)
	require.Equal(t, a.String(), b.String())
}

func TestStageGolden(t *testing.T) {
	cases := []struct {
		file        string
		hp          ir.HParams
		first, last int
	}{
		{"stories260K.stage0-3.golden", stories, 0, 3},
		{"stories260K.stage3-5.golden", stories, 3, 5},
		{"qwen3.stage1-2.golden", qwen3, 1, 2},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			g, err := BuildStage(c.hp, synth(c.hp, dtype.F32), c.first, c.last)
			require.NoError(t, err)
			require.NoError(t, ir.RunPasses(g, ir.Passes))
			path := filepath.Join("testdata", c.file)
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(g.String()), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(want), g.String())
		})
	}
}

func TestStageErrors(t *testing.T) {
	w := synth(stories, dtype.F32)
	for _, r := range [][2]int{{0, 0}, {3, 2}, {-1, 2}, {0, 6}, {5, 5}} {
		_, err := BuildStage(stories, w, r[0], r[1])
		require.ErrorIs(t, err, ErrStage, "%v", r)
	}
	// A later stage does not need the embedding unless it is tied.
	delete(w, "token_embd.weight")
	_, err := BuildStage(stories, w, 2, 5)
	require.NoError(t, err)
	_, err = BuildStage(stories, w, 0, 2)
	require.ErrorIs(t, err, ErrMissingTensor)
	q := synth(qwen2, dtype.F32)
	delete(q, "token_embd.weight")
	_, err = BuildStage(qwen2, q, 1, 2)
	require.ErrorIs(t, err, ErrMissingTensor, "a tied last stage reads token_embd")
}
