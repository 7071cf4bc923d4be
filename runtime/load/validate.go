package load

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
)

// MaxContextLength is the largest context length Open accepts (16 Mi
// positions). Larger values are corrupt metadata, not models: a KV cache
// sized from them could never be allocated.
const MaxContextLength = 1 << 24

// hpKeys names, in a format's own terms, where each hyperparameter came
// from, so that an error points at the key to fix.
type hpKeys struct {
	ctx, embd, layers, ffn, heads, headsKV, headDim, eps, ropeBase string
}

// ggufKeys are the metadata keys of a GGUF file of architecture a.
func ggufKeys(a string) hpKeys {
	return hpKeys{
		ctx: a + ".context_length", embd: a + ".embedding_length", layers: a + ".block_count",
		ffn: a + ".feed_forward_length", heads: a + ".attention.head_count",
		headsKV: a + ".attention.head_count_kv", headDim: a + ".attention.key_length",
		eps: a + ".attention.layer_norm_rms_epsilon", ropeBase: a + ".rope.freq_base",
	}
}

// hfKeys are the config.json keys of a Hugging Face checkpoint.
var hfKeys = hpKeys{
	ctx: "max_position_embeddings", embd: "hidden_size", layers: "num_hidden_layers",
	ffn: "intermediate_size", heads: "num_attention_heads", headsKV: "num_key_value_heads",
	headDim: "head_dim", eps: "rms_norm_eps", ropeBase: "rope_theta",
}

// yarnContext gives a YaRN-scaled model the context its scaling was made
// for: the original context defaults to the context length (as llama.cpp
// and Hugging Face take it), and the context length becomes at least
// factor × original context, as a published config's rope_scaling
// (Qwen2.5's factor 4 over 32768 positions, for 131072) intends.
func yarnContext(hp *ir.HParams) {
	rs := &hp.RopeScaling
	if rs.Type != "yarn" {
		return
	}
	if rs.OriginalContext == 0 {
		rs.OriginalContext = hp.ContextLength
	}
	if ext := float64(rs.Factor) * float64(rs.OriginalContext); ext > float64(hp.ContextLength) && ext <= MaxContextLength {
		hp.ContextLength = int(ext)
	}
}

// checkArch rejects an architecture no ir/arch builder knows.
func checkArch(path, key, name string) error {
	if !slices.Contains(arch.Names(), name) {
		return fmt.Errorf("%w: %s: %s is %q (supported: %v)", ErrArch, path, key, name, arch.Names())
	}
	return nil
}

// checkHParams checks the hyperparameters on their own: positive sizes, a
// sane context length, heads that group evenly, finite positive floats.
func checkHParams(path string, hp ir.HParams, k hpKeys) error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s: %s", ErrMetadata, path, key, fmt.Sprintf(format, args...))
	}
	switch {
	case hp.ContextLength <= 0 || hp.ContextLength > MaxContextLength:
		return bad(k.ctx, "context length %d is outside [1, %d]", hp.ContextLength, MaxContextLength)
	case hp.Embedding <= 0:
		return bad(k.embd, "hidden size %d must be positive", hp.Embedding)
	case hp.Layers <= 0:
		return bad(k.layers, "block count %d must be positive", hp.Layers)
	case hp.FFN <= 0:
		return bad(k.ffn, "feed-forward size %d must be positive", hp.FFN)
	case hp.Heads <= 0:
		return bad(k.heads, "head count %d must be positive", hp.Heads)
	case hp.HeadsKV <= 0 || hp.Heads%hp.HeadsKV != 0:
		return bad(k.headsKV, "%d KV heads do not divide %d heads", hp.HeadsKV, hp.Heads)
	case hp.HeadDim <= 0:
		return bad(k.headDim, "head size %d must be positive", hp.HeadDim)
	case !positive(hp.RMSEps):
		return bad(k.eps, "RMS norm epsilon %g must be a positive finite number", hp.RMSEps)
	case !positive(hp.RopeBase):
		return bad(k.ropeBase, "RoPE base %g must be a positive finite number", hp.RopeBase)
	}
	return nil
}

func positive(x float32) bool {
	return x > 0 && !math.IsInf(float64(x), 0) && !math.IsNaN(float64(x))
}

// blockIndex matches the layer index of a GGUF block tensor name.
var blockIndex = regexp.MustCompile(`^blk\.(\d+)\.`)

// checkTensors checks the hyperparameters against the shapes of the
// tensors that carry them: the embedding (hidden size, vocabulary), the
// blocks present (block count), the first block's projections (heads,
// head size, KV heads, feed-forward size) and the tokenizer's size. Missing
// tensors are left to the architecture builder, which knows what it needs.
func checkTensors(path string, m *Model, k hpKeys) error {
	hp := m.HParams
	mismatch := func(key string, v int, tensor string, shape []int, what string) error {
		return fmt.Errorf("%w: %s: %s = %d, but %s has shape %v (%s)", ErrMismatch, path, key, v, tensor, shape, what)
	}
	if t, ok := m.Tensors["token_embd.weight"]; ok {
		if len(t.Shape) != 2 {
			return fmt.Errorf("%w: %s: token_embd.weight has shape %v, want 2 dimensions", ErrTensor, path, t.Shape)
		}
		if t.Shape[0] != hp.Embedding {
			return mismatch(k.embd, hp.Embedding, t.Name, t.Shape, "its rows are the hidden size")
		}
	}
	blocks := 0
	for name := range m.Tensors {
		if s := blockIndex.FindStringSubmatch(name); s != nil {
			if i, err := strconv.Atoi(s[1]); err == nil && i >= blocks {
				blocks = i + 1
			}
		}
	}
	if blocks != hp.Layers {
		return fmt.Errorf("%w: %s: %s = %d, but the file holds blocks 0…%d", ErrMismatch, path, k.layers, hp.Layers, blocks-1)
	}
	for _, c := range []struct {
		tensor, key string
		v, dim      int
		want        int
		what        string
	}{
		{"blk.0.attn_q.weight", k.embd, hp.Embedding, 0, hp.Embedding, "its input is the hidden size"},
		{"blk.0.attn_q.weight", k.heads, hp.Heads, 1, hp.Heads * hp.HeadDim, fmt.Sprintf("its output is heads × head size %d", hp.HeadDim)},
		{"blk.0.attn_k.weight", k.headsKV, hp.HeadsKV, 1, hp.HeadsKV * hp.HeadDim, fmt.Sprintf("its output is KV heads × head size %d", hp.HeadDim)},
		{"blk.0.ffn_up.weight", k.ffn, hp.FFN, 1, hp.FFN, "its output is the feed-forward size"},
	} {
		t, ok := m.Tensors[c.tensor]
		if !ok || len(t.Shape) != 2 {
			continue
		}
		if t.Shape[c.dim] != c.want {
			return mismatch(c.key, c.v, c.tensor, t.Shape, c.what)
		}
	}
	if tok := m.Tokenizer; tok != nil && hp.VocabSize > 0 && tok.VocabSize() > hp.VocabSize {
		return fmt.Errorf("%w: %s: the tokenizer has %d tokens, but the embedding has only %d rows",
			ErrMismatch, path, tok.VocabSize(), hp.VocabSize)
	}
	return nil
}
