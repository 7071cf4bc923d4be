package pipeline_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/pipeline"
	"github.com/memra-ai/memra/runtime/synth"
)

// trace is what a greedy run produced: per step, per sequence, the logits
// and the chosen token.
type trace struct {
	logits [][][]float32
	tokens [][]int32
}

// greedy prefills prompts (one sequence each, in one step) and decodes
// steps tokens greedily for all of them together, recording every step.
func greedy(t *testing.T, b runtime.Backend, prompts [][]int32, steps int) trace {
	t.Helper()
	ctx := context.Background()
	var tr trace
	batch := make([]runtime.SeqStep, len(prompts))
	for i, p := range prompts {
		batch[i] = runtime.SeqStep{Seq: runtime.SeqID(100 + i), Tokens: p, Logits: true}
	}
	for s := 0; s <= steps; s++ {
		out, err := b.Step(ctx, batch)
		require.NoError(t, err, "step %d", s)
		require.Len(t, out, len(batch))
		var ls [][]float32
		var ids []int32
		for i, l := range out {
			require.NotEmpty(t, l)
			ls = append(ls, append([]float32(nil), l...))
			id := runtime.Argmax(l)
			ids = append(ids, id)
			batch[i].Pos += len(batch[i].Tokens)
			batch[i].Tokens = []int32{id}
		}
		tr.logits = append(tr.logits, ls)
		tr.tokens = append(tr.tokens, ids)
	}
	for _, e := range batch {
		b.Free(e.Seq)
	}
	return tr
}

// prompts returns n prompts of different lengths over a vocabulary of v.
func prompts(n, v int) [][]int32 {
	var out [][]int32
	for i := range n {
		p := []int32{1}
		for j := 0; j < 2+3*i%7; j++ {
			p = append(p, int32((17*i+31*j+5)%(v-3)+3))
		}
		out = append(out, p)
	}
	return out
}

func synthQwen3(t *testing.T) *load.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qwen3.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "qwen3-8b", Quant: "q8_0", Layers: 3, Dim: 256, FFN: 512,
		Context: 256, Seed: 11, Weights: synth.WeightsFloat})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func stories(t *testing.T) *load.Model {
	t.Helper()
	m, err := load.Open("../../testdata/models/tinyllamas-stories-260k-f32.gguf")
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// TestTwoStagesMatchOneCPU runs greedy generation through one CPU backend
// and through two CPU stages for several split points, batch 1 and 8, with
// one and two micro-batches, and wants the same tokens and bit-identical
// logits: each stage runs the same ops in the same order on the same rows,
// and every CPU kernel computes a row independently of the batch around it.
func TestTwoStagesMatchOneCPU(t *testing.T) {
	cases := []struct {
		name   string
		model  func(*testing.T) *load.Model
		splits []int
		steps  int
	}{
		{"stories260K", stories, []int{1, 2, 4}, 12},
		{"qwen3-synth", synthQwen3, []int{1, 2}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := c.model(t)
			for _, batch := range []int{1, 8} {
				ps := prompts(batch, m.HParams.VocabSize)
				one, err := cpu.New(m, cpu.Options{Threads: 2})
				require.NoError(t, err)
				want := greedy(t, one, ps, c.steps)
				require.NoError(t, one.Close())
				for _, k := range c.splits {
					for _, micro := range []int{1, 2} {
						t.Run(fmt.Sprintf("b%d/split%d/micro%d", batch, k, micro), func(t *testing.T) {
							stages, err := cpu.NewStages(m, []int{k}, cpu.Options{Threads: 1})
							require.NoError(t, err)
							p, err := pipeline.New(stages, pipeline.Options{MicroBatches: micro})
							require.NoError(t, err)
							defer p.Close()
							got := greedy(t, p, ps, c.steps)
							require.Equal(t, want.tokens, got.tokens)
							for s := range want.logits {
								for i := range want.logits[s] {
									require.Equal(t, want.logits[s][i], got.logits[s][i], "step %d sequence %d", s, i)
								}
							}
							st := p.(*pipeline.Pipeline).Stats()
							require.Equal(t, int64(c.steps+1), st.Steps)
							require.Equal(t, int64((c.steps+1)*min(batch, micro)), st.MicroBatches)
						})
					}
				}
			}
		})
	}
}

// TestModelFootprint checks that the footprint accounts for every tensor
// byte once (twice for a tied embedding) and the KV cache per layer.
func TestModelFootprint(t *testing.T) {
	m := stories(t)
	var total int64
	for _, ts := range m.Tensors {
		d, err := ts.Data()
		require.NoError(t, err)
		total += int64(len(d))
	}
	f, err := pipeline.ModelFootprint(m, 1000)
	require.NoError(t, err)
	require.Len(t, f.Layer, m.HParams.Layers)
	var sum int64
	for _, b := range f.Layer {
		require.Greater(t, b, int64(1000))
		sum += b
	}
	embd, err := m.Tensors["token_embd.weight"].Data()
	require.NoError(t, err)
	tied := int64(0)
	if _, ok := m.Tensors["output.weight"]; !ok {
		tied = int64(len(embd))
	}
	require.Equal(t, total+tied+int64(1000*m.HParams.Layers), sum+f.Head+f.Tail)
	k, err := pipeline.BalancedSplit(f)
	require.NoError(t, err)
	require.NoError(t, pipeline.CheckSplit(k, m.HParams.Layers))
}
