package tools

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/grammar"
)

var _ runtime.BitsetMask = (*ChainMask)(nil)

// byteVocab has one token per byte, then "<tool" and "_call>", then EOS.
type byteVocab struct{}

func (byteVocab) VocabSize() int { return 259 }
func (byteVocab) TokenBytes(id int32) []byte {
	switch {
	case id < 256:
		return []byte{byte(id)}
	case id == 256:
		return []byte("<tool")
	case id == 257:
		return []byte("_call>")
	}
	return nil
}
func (byteVocab) IsEOG(id int32) bool { return id == 258 }

// TestChainMaskBitsAgreeWithApply: through every phase of a Hermes call,
// and after a rejected token, AllowedBits sets exactly the tokens Apply
// keeps; the sampled outputs are calls Parse reads.
func TestChainMaskBitsAgreeWithApply(t *testing.T) {
	var ts []Tool
	ts = append(ts, Tool{Type: "function"})
	ts[0].Function.Name = "f"
	ts[0].Function.Parameters = []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	phases, err := CallGrammars(Hermes, ts, "")
	require.NoError(t, err)
	voc := grammar.NewVocabulary(byteVocab{})
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 259)
	var bits []uint64
	for run := range 4 {
		c := NewChainMask(voc, []int32{258}, phases...)
		var out []byte
		for step := 0; step < 200; step++ {
			clear(logits)
			c.Apply(logits)
			bits = c.AllowedBits(bits)
			var allowed []int32
			for id, v := range logits {
				set := bits[id>>6]&(1<<(id&63)) != 0
				require.Equal(t, !math.IsInf(float64(v), -1), set, "run %d step %d token %d", run, step, id)
				if set {
					allowed = append(allowed, int32(id))
				}
			}
			require.NotEmpty(t, allowed)
			tok := allowed[rng.IntN(len(allowed))]
			if run == 3 && step == 5 {
				tok = 'x' // rejected: only EOS is left
			}
			if tok == 258 {
				break
			}
			c.Accept(tok)
			out = append(out, byteVocab{}.TokenBytes(tok)...)
		}
		if run < 3 {
			require.NoError(t, c.Err())
			_, calls := Parse(Hermes, string(out))
			require.Len(t, calls, 1, string(out))
		} else {
			require.Error(t, c.Err())
		}
	}
}
