package cpu

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
)

// headMatrix returns the output projection of src as float64 rows
// [vocab][E] (token_embd when the model is tied).
func headMatrix(t *testing.T, hp ir.HParams, src memSource) [][]float64 {
	name := "output.weight"
	if hp.TiedEmbedding {
		name = "token_embd.weight"
	}
	e := src[name]
	flat := make([]float32, hp.Embedding*hp.VocabSize)
	require.NoError(t, dtype.Dequantize(e.t, e.data, flat))
	rows := make([][]float64, hp.VocabSize)
	for v := range rows {
		rows[v] = make([]float64, hp.Embedding)
		for i := range rows[v] {
			rows[v][i] = float64(flat[v*hp.Embedding+i])
		}
	}
	return rows
}

// cosine64 is the cosine of the angle between a and b, in float64.
func cosine64(a, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

// TestEmbedAgainstLogits holds each pooling to a float64 reference built
// from the model's own logits, which the output head computes from the
// same normed hidden states: W·h is linear, so W times the mean of the
// normed states is the mean of the logits after every token, W times the
// last (first) token's normed state the logits after the last (first)
// token. Each embedding, projected by W in float64, must point where that
// reference points, and have unit length.
func TestEmbedAgainstLogits(t *testing.T) {
	for _, hp := range []ir.HParams{smallQwen3, smallQwen2, smallLlama} {
		t.Run(hp.Name, func(t *testing.T) {
			src := randomModel(t, hp, dtype.F32, 11)
			b, err := NewFromSource(hp, src, Options{Threads: 2, Embedding: true})
			require.NoError(t, err)
			defer b.Close()
			require.Equal(t, hp.Embedding, b.EmbedWidth())
			requireEmbedLogits(t, b, headMatrix(t, hp, src), []int32{5, 17, 42, 9, 128, 77, 3})
		})
	}
}

// requireEmbedLogits checks b's embeddings of prompt under every pooling
// against the float64 reference of TestEmbedAgainstLogits; W is the
// model's output projection, [vocab][E].
func requireEmbedLogits(t *testing.T, b *Backend, W [][]float64, prompt []int32) {
	t.Helper()
	// the logits after each token, one token a step
	var after [][]float64
	for i, tok := range prompt {
		res, err := b.Step(context.Background(), []runtime.SeqStep{{Seq: 900, Pos: i, Tokens: []int32{tok}, Logits: true}})
		require.NoError(t, err)
		row := make([]float64, len(res[0]))
		for j, v := range res[0] {
			row[j] = float64(v)
		}
		after = append(after, row)
	}
	b.Free(900)
	project := func(v []float32) []float64 {
		proj := make([]float64, len(W))
		for j := range proj {
			for i, x := range v {
				proj[j] += W[j][i] * float64(x)
			}
		}
		return proj
	}
	for _, pool := range []runtime.Pooling{runtime.PoolMean, runtime.PoolLast, runtime.PoolCLS} {
		got, err := b.Embed(context.Background(), []runtime.EmbedStep{{Seq: 1, Tokens: prompt}}, pool)
		require.NoError(t, err)
		b.Free(1)
		v := got[0]
		require.Len(t, v, b.EmbedWidth())
		n := 0.0
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		require.InDelta(t, 1, math.Sqrt(n), 1e-6, "%v: unit length", pool)
		lo, hi := pool.Rows(len(prompt))
		want := make([]float64, len(W))
		for _, row := range after[lo:hi] {
			for j := range want {
				want[j] += row[j] / float64(hi-lo)
			}
		}
		require.Greater(t, cosine64(want, project(v)), 1-1e-9, "%v: W·embedding points where the logits do", pool)
	}
	// a mutant: the mean of the logits is not where the last token's state points
	last, err := b.Embed(context.Background(), []runtime.EmbedStep{{Seq: 2, Tokens: prompt}}, runtime.PoolLast)
	require.NoError(t, err)
	b.Free(2)
	mean := make([]float64, len(W))
	for _, row := range after {
		for j := range mean {
			mean[j] += row[j]
		}
	}
	require.Less(t, cosine64(mean, project(last[0])), 0.999)
}

// TestEmbedBatchIndependent: inputs embedded together equal each embedded
// alone, whether the backend keeps the pages or the caller passes them.
func TestEmbedBatchIndependent(t *testing.T) {
	hp := smallQwen3
	b, err := NewFromSource(hp, randomModel(t, hp, dtype.Q8_0, 4), Options{Threads: 2, Embedding: true})
	require.NoError(t, err)
	defer b.Close()
	ins := [][]int32{{1, 2, 3}, {7}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16, 17, 18}}
	var batch []runtime.EmbedStep
	for i, in := range ins {
		pages, err := b.KVPool().Alloc(b.KVPool().PagesFor(len(in)))
		require.NoError(t, err)
		defer b.KVPool().Release(pages)
		batch = append(batch, runtime.EmbedStep{Seq: runtime.SeqID(10 + i), Tokens: in, Pages: pages})
	}
	together, err := b.Embed(context.Background(), batch, runtime.PoolMean)
	require.NoError(t, err)
	for i, in := range ins {
		alone, err := b.Embed(context.Background(), []runtime.EmbedStep{{Seq: 99, Tokens: in}}, runtime.PoolMean)
		require.NoError(t, err)
		b.Free(99)
		requireRel(t, alone[0], together[i], 1e-5, "input alone and in the batch") // products tile by the step's rows
	}
	require.Equal(t, 0, b.KVPool().Stats().Used-len(batch[0].Pages)-len(batch[1].Pages)-len(batch[2].Pages))
}

// TestEmbedThroughEngine: the engine runs a CPU backend's embeddings on
// its loop with pages from the backend's pool, gives them all back, and
// its vectors are the backend's.
func TestEmbedThroughEngine(t *testing.T) {
	hp := smallQwen2
	b, err := NewFromSource(hp, randomModel(t, hp, dtype.F32, 8), Options{Threads: 2, Embedding: true})
	require.NoError(t, err)
	ins := [][]int32{{4, 5, 6, 7}, {8, 9}}
	want, err := b.Embed(context.Background(), []runtime.EmbedStep{{Seq: 1, Tokens: ins[0]}, {Seq: 2, Tokens: ins[1]}}, runtime.PoolLast)
	require.NoError(t, err)
	b.Free(1)
	b.Free(2)
	e := runtime.NewEngine(b, nil, runtime.EngineConfig{})
	defer e.Close()
	got, err := e.Embed(context.Background(), runtime.EmbedRequest{Inputs: ins, Pooling: runtime.PoolLast})
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Zero(t, b.KVPool().Stats().Used, "the engine gave the pages back")
	require.Zero(t, b.own.Seqs())

	plain, err := NewFromSource(hp, randomModel(t, hp, dtype.F32, 8), Options{Threads: 2})
	require.NoError(t, err)
	defer plain.Close()
	require.Zero(t, plain.EmbedWidth())
	_, err = plain.Embed(context.Background(), []runtime.EmbedStep{{Seq: 1, Tokens: ins[0]}}, runtime.PoolLast)
	require.ErrorIs(t, err, runtime.ErrNotEmbedding)
}

// TestEmbedInt8SharesPacks: with the int8 products the embedding executor
// multiplies with the main executor's packed weights (one copy, not two),
// and its vectors stay close to the exact products' vectors.
func TestEmbedInt8SharesPacks(t *testing.T) {
	hp := smallQwen3
	src := randomModel(t, hp, dtype.Q8_0, 4)
	exact, err := NewFromSource(hp, src, Options{Threads: 2, Embedding: true})
	require.NoError(t, err)
	defer exact.Close()
	fast, err := NewFromSource(hp, src, Options{Threads: 2, Embedding: true, Products: ProductsInt8})
	require.NoError(t, err)
	defer fast.Close()

	main := map[string]*dtype.Packed{}
	for _, w := range fast.e.weights {
		if w != nil && w.packed != nil {
			main[w.name] = w.packed
		}
	}
	shared := 0
	for _, w := range fast.emb.e.weights {
		if w == nil || w.packed == nil {
			continue
		}
		require.Same(t, main[w.name], w.packed, "%s packed twice", w.name)
		shared++
	}
	require.Positive(t, shared, "the embedding executor multiplies packed weights")

	in := []runtime.EmbedStep{{Seq: 1, Tokens: []int32{3, 1, 4, 1, 5, 9, 2, 6}}}
	want, err := exact.Embed(context.Background(), in, runtime.PoolMean)
	require.NoError(t, err)
	got, err := fast.Embed(context.Background(), in, runtime.PoolMean)
	require.NoError(t, err)
	a, b := make([]float64, len(want[0])), make([]float64, len(got[0]))
	for i := range a {
		a[i], b[i] = float64(want[0][i]), float64(got[0][i])
	}
	require.Greater(t, cosine64(a, b), 0.999)
	require.NotEqual(t, want[0], got[0], "the int8 products are their own class")
}
