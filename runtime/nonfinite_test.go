package runtime

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// A model whose logits are all NaN (corrupt weights) ends the request with
// an error that says so and names the model, not a bare "no token left".
func TestNonFiniteLogitsNameTheModel(t *testing.T) {
	const vocab = 16
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		b := newFakeBackend(vocab, 64, func([]int32) []float32 {
			l := make([]float32, vocab)
			for i := range l {
				l[i] = bad
			}
			return l
		})
		e := newTestEngine(b, hashVocab(vocab), EngineConfig{})
		ch, err := e.Submit(context.Background(), Request{Prompt: []int32{1, 2}, MaxTokens: 4,
			Sampling: SamplingParams{Temperature: 1, Seed: seed(1)}})
		require.NoError(t, err)
		_, _, last := collect(ch)
		require.ErrorIs(t, last.Err, ErrBackend)
		require.ErrorContains(t, last.Err, "fake produced no finite logit")
		e.Close()
	}
}
