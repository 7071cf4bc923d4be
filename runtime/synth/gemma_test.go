package synth

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// smallGemma writes a small model of a Gemma preset (a window of 4, so the
// prompts below cross it) and opens it.
func smallGemma(t *testing.T, preset string, hf bool) *load.Model {
	t.Helper()
	o := Options{Preset: preset, Quant: "f16", Layers: 3, Dim: 256, FFN: 512, Context: 256, Window: 4, Seed: 11}
	dir := t.TempDir()
	var err error
	path := filepath.Join(dir, "m.gguf")
	if hf {
		path = filepath.Join(dir, "hf")
		_, err = WriteHF(path, o)
	} else {
		_, err = WriteGGUF(path, o)
	}
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// A Gemma GGUF and its Hugging Face twin are the same model: the same
// hyperparameters the graph reads, the same norms (1 + w in the GGUF, w in
// the checkpoint), the same logits on the CPU.
func TestGemmaTwinsSameLogits(t *testing.T) {
	for _, preset := range []string{"gemma2-9b", "gemma3-12b"} {
		t.Run(preset, func(t *testing.T) {
			g := smallGemma(t, preset, false)
			h := smallGemma(t, preset, true)
			gh, hh := g.HParams, h.HParams
			p, _ := Lookup(preset)
			require.Equal(t, p.HParams.Arch, gh.Arch)
			require.Equal(t, gh.Arch, hh.Arch)
			require.Equal(t, 4, gh.SlidingWindow)
			for _, x := range [][2]any{{gh.SlidingWindow, hh.SlidingWindow}, {gh.SlidingPattern, hh.SlidingPattern},
				{gh.AttnSoftcap, hh.AttnSoftcap}, {gh.FinalSoftcap, hh.FinalSoftcap}, {gh.RopeBaseLocal, hh.RopeBaseLocal},
				{gh.RopeScaling, hh.RopeScaling}, {gh.RopeBase, hh.RopeBase}, {gh.HeadDim, hh.HeadDim}, {gh.QKNorm, hh.QKNorm},
				{gh.VocabSize, hh.VocabSize}, {gh.RMSEps, hh.RMSEps}, {gh.TiedEmbedding, hh.TiedEmbedding}} {
				require.Equal(t, x[0], x[1])
			}
			for l := range gh.Layers {
				require.Equal(t, gh.Sliding(l), hh.Sliding(l), "layer %d", l)
			}
			require.Equal(t, p.HParams.AttnSoftcap, gh.AttnSoftcap)
			require.Equal(t, p.HParams.SlidingPattern, gh.SlidingPattern)
			require.Equal(t, p.HParams.RopeBaseLocal, gh.RopeBaseLocal)
			require.Equal(t, float32(0.0625), hh.AttnScale)
			// the GGUF's norm is the checkpoint's 1 + w, to the bit
			gd, err := g.Tensors["blk.1.post_ffw_norm.weight"].Data()
			require.NoError(t, err)
			hd, err := h.Tensors["blk.1.post_ffw_norm.weight"].Data()
			require.NoError(t, err)
			require.Equal(t, gd, hd)

			text := "The quick brown fox jumps over the lazy dog"
			prompt := g.Tokenizer.Encode(text, true, false)
			require.Equal(t, prompt, h.Tokenizer.Encode(text, true, false))
			require.Greater(t, len(prompt), 8, "the prompt crosses the window of 4")
			lg, lh := logits(t, g, prompt), logits(t, h, prompt)
			require.Len(t, lh, len(lg))
			maxDiff := 0.0
			for i := range lg {
				maxDiff = math.Max(maxDiff, math.Abs(float64(lg[i]-lh[i])))
			}
			require.Less(t, maxDiff, 1e-4, "max |diff|")
		})
	}
}

// The Gemma presets carry a SentencePiece vocabulary of Gemma's size and
// special ids, and Gemma 2's chat template.
func TestGemmaVocabulary(t *testing.T) {
	for _, c := range []struct {
		preset string
		pieces int
	}{{"gemma2-9b", 256000}, {"gemma3-12b", 262144}} {
		p, err := Lookup(c.preset)
		require.NoError(t, err)
		v, err := vocabFor(p.Vocab, p.HParams.VocabSize)
		require.NoError(t, err)
		require.Len(t, v.Tokens, p.HParams.VocabSize)
		normal := 0
		for _, ty := range v.Types {
			if ty == tokenizer.TypeNormal {
				normal++
			}
		}
		require.Equal(t, c.pieces-gemmaHead-256, normal, "%s: pieces past the specials and bytes", c.preset)
		tok, err := tokenizer.New(v)
		require.NoError(t, err)
		require.EqualValues(t, 2, tok.BOS())
		require.EqualValues(t, 1, tok.EOS())
		ids := tok.Encode("<start_of_turn>user\nHello world, this is memra.<end_of_turn>\n", false, true)
		require.EqualValues(t, 106, ids[0])
		require.Contains(t, ids, int32(107))
		require.Equal(t, "user\nHello world, this is memra.\n", tok.Decode(ids), "control tokens print nothing")
		plain := tok.Encode("Hello world", true, false)
		require.EqualValues(t, 2, plain[0], "BOS first")
		require.Equal(t, "Hello world", tok.Decode(plain[1:]), "no dummy space prefix")
		// the joined pieces are pieces: most of the last ones encode as themselves
		whole := 0
		for id := len(v.Tokens) - 200; id < len(v.Tokens); id++ {
			if v.Types[id] != tokenizer.TypeNormal {
				continue
			}
			ids := tok.Encode(tok.Decode([]int32{int32(id)}), false, false)
			if len(ids) == 1 && ids[0] == int32(id) {
				whole++
			}
		}
		require.Greater(t, whole, 100, "%s: joined pieces that encode whole", c.preset)
		require.Equal(t, "gemma-2-2b-it.jinja", p.Template)
	}
}
