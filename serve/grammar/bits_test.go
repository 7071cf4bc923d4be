package grammar

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

var _ runtime.BitsetMask = (*SamplerMask)(nil)

// TestAllowedBitsAgreesWithApply: along sampled outputs, and after a
// rejected token, a token's bit is set exactly when Apply keeps its logit
// (over a logit row padded past the vocabulary).
func TestAllowedBitsAgreesWithApply(t *testing.T) {
	src := newSynthVocab(3, 400)
	voc := NewVocabulary(src)
	g, err := FromJSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"string"}},"required":["a"]}`))
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, voc.Size()+10)
	var bits []uint64
	for run := range 5 {
		m := NewSamplerMask(g, voc)
		for step := 0; step < 60; step++ {
			clear(logits)
			m.Apply(logits)
			bits = m.AllowedBits(bits)
			var allowed []int32
			for id, v := range logits {
				set := id < len(bits)*64 && bits[id>>6]&(1<<(id&63)) != 0
				require.Equal(t, !math.IsInf(float64(v), -1), set, "run %d step %d token %d", run, step, id)
				if set {
					allowed = append(allowed, int32(id))
				}
			}
			if len(allowed) == 0 || m.Matcher().Done() {
				break
			}
			tok := allowed[rng.IntN(len(allowed))]
			if run == 4 && step == 3 {
				tok = int32(voc.Size()) - 2 // the control token: rejected
			}
			m.Accept(tok)
		}
	}
}
