package synth

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// Gemma 2 and 3: presets gemma2-9b and gemma3-12b (presets.go), their
// tokenizer, GGUF keys and Hugging Face config.
//
// No Gemma tokenizer ships with memra, and none can be fetched here. The
// vocabulary these presets carry is built from the one SentencePiece
// vocabulary memra embeds (Llama 2's 32,000 pieces, llama-spm.gguf.gz) to
// Gemma's size and kind: a SentencePiece BPE model with byte fallback, no
// dummy space prefix, Gemma's special tokens at Gemma's ids (<pad> 0,
// <eos> 1, <bos> 2, <unk> 3, <start_of_turn> 106, <end_of_turn> 107), the
// 256 byte pieces, Llama 2's pieces with their scores, and then pieces
// joined from the most likely ones (a word-start piece and a
// continuation), each scoring below every earlier piece, until the
// vocabulary holds 256,000 pieces (Gemma 2) or 262,144 (Gemma 3). It
// tokenizes as a SentencePiece model of that size does, but its ids are
// not Gemma's: text in, different ids out.

// gemmaSpecials are the specials at the head of the vocabulary, by id.
func gemmaSpecials() []string {
	s := make([]string, gemmaHead)
	copy(s, []string{"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]"})
	for i := 6; i < 106; i++ {
		s[i] = fmt.Sprintf("<unused%d>", i-6)
	}
	s[106], s[107] = "<start_of_turn>", "<end_of_turn>"
	return s
}

// gemmaHead is the number of special ids before the byte pieces.
const gemmaHead = 108

// gemmaVocab builds the Gemma-shaped vocabulary of n pieces (see above).
func gemmaVocab(n int) (*tokenizer.Vocab, error) {
	base, err := spmVocab()
	if err != nil {
		return nil, err
	}
	v := &tokenizer.Vocab{Model: "llama", BOS: 2, EOS: 1, UNK: 3, PAD: 0, EOT: 107, EOM: -1}
	t, f := true, false
	v.AddBOS, v.AddEOS, v.AddSpacePrefix = &t, &f, &f
	seen := map[string]bool{}
	add := func(piece string, score float32, typ int32) {
		seen[piece] = true
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	for i, s := range gemmaSpecials() {
		typ := tokenizer.TypeControl
		if i == 3 {
			typ = tokenizer.TypeUnknown
		}
		add(s, 0, typ)
	}
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokenizer.TypeByte)
	}
	// Llama 2's pieces, most likely first
	type piece struct {
		s     string
		score float32
	}
	var normal []piece
	minScore := float32(0)
	for i, s := range base.Tokens {
		if base.Types[i] == tokenizer.TypeNormal && !seen[s] {
			normal = append(normal, piece{s, base.Scores[i]})
			minScore = min(minScore, base.Scores[i])
		}
	}
	sort.SliceStable(normal, func(a, b int) bool { return normal[a].score > normal[b].score })
	for _, p := range normal {
		add(p.s, p.score, tokenizer.TypeNormal)
	}
	// joined pieces: a likely piece, then a likely continuation (no "▁"
	// past the start, as in every SentencePiece piece), in the order of
	// their parts' ranks
	var heads, tails []string
	for _, p := range normal {
		heads = append(heads, p.s)
		if !strings.Contains(p.s, "\u2581") {
			tails = append(tails, p.s)
		}
	}
	score := minScore
	for rank := 0; len(v.Tokens) < n && rank < len(heads)+len(tails); rank++ {
		// every pair whose ranks sum to rank
		for i := 0; i <= rank && len(v.Tokens) < n; i++ {
			j := rank - i
			if i >= len(heads) || j >= len(tails) {
				continue
			}
			s := heads[i] + tails[j]
			if seen[s] || utf8.RuneCountInString(s) > 16 {
				continue
			}
			score = math.Nextafter32(score, float32(math.Inf(-1)))
			add(s, score, tokenizer.TypeNormal)
		}
	}
	if len(v.Tokens) != n {
		return nil, fmt.Errorf("synth: gemma vocabulary: %d pieces, want %d", len(v.Tokens), n)
	}
	return v, nil
}

// isGemma reports whether arch is a Gemma family.
func isGemma(arch string) bool { return arch == "gemma2" || arch == "gemma3" }

// gemmaKVs are a Gemma model's own GGUF keys, as llama.cpp's converter
// writes them: the caps, the window, linear RoPE scaling; the layer
// pattern, the sliding layers' RoPE base and the query scale only where
// they differ from the rules llama.cpp fixes (runtime/load's gemmaGGUF).
func gemmaKVs(hp ir.HParams) []kv {
	a := hp.Arch
	var kvs []kv
	// Gemma 2's absent keys mean 50, 30 and 4096 to a reader (llama.cpp's
	// defaults), so its are always written
	if hp.AttnSoftcap > 0 || a == "gemma2" {
		kvs = append(kvs, kv{a + ".attn_logit_softcapping", hp.AttnSoftcap})
	}
	if hp.FinalSoftcap > 0 || a == "gemma2" {
		kvs = append(kvs, kv{a + ".final_logit_softcapping", hp.FinalSoftcap})
	}
	kvs = append(kvs, kv{a + ".attention.sliding_window", uint32(hp.SlidingWindow)})
	if p := map[string]int{"gemma2": 2, "gemma3": 6}[a]; hp.SlidingPattern != p {
		kvs = append(kvs, kv{a + ".attention.sliding_window_pattern", uint32(hp.SlidingPattern)})
	}
	if a == "gemma3" && hp.RopeBaseLocal != 10000 {
		kvs = append(kvs, kv{a + ".rope.freq_base_swa", hp.RopeBaseLocal})
	}
	rule := float32(1 / math.Sqrt(float64(hp.HeadDim)))
	if hp.Layers == map[string]int{"gemma2": 46, "gemma3": 62}[a] {
		rule = float32(1 / math.Sqrt(float64(hp.Embedding/hp.Heads)))
	}
	if hp.AttnScale != 0 && hp.AttnScale != rule {
		kvs = append(kvs, kv{a + ".attention.scale", hp.AttnScale})
	}
	if rs := hp.RopeScaling; rs.Type == "linear" {
		kvs = append(kvs, kv{a + ".rope.scaling.type", "linear"}, kv{a + ".rope.scaling.factor", rs.Factor})
	}
	return kvs
}

// gemmaHFConfig turns config.json c into a Gemma one: Gemma2ForCausalLM or
// Gemma3ForCausalLM (model_type gemma3_text), with the keys transformers
// reads for the caps, the window and its pattern, the local RoPE base and
// the query scale.
func gemmaHFConfig(c map[string]any, hp ir.HParams) {
	c["hidden_activation"] = "gelu_pytorch_tanh"
	c["hidden_act"] = "gelu_pytorch_tanh"
	c["query_pre_attn_scalar"] = queryPreAttnScalar(hp)
	c["sliding_window"] = hp.SlidingWindow
	c["attention_bias"] = false
	c["pad_token_id"] = 0
	var types []string
	for l := range hp.Layers {
		if hp.Sliding(l) {
			types = append(types, "sliding_attention")
		} else {
			types = append(types, "full_attention")
		}
	}
	c["layer_types"] = types
	cap := func(x float32) any {
		if x > 0 {
			return x
		}
		return nil
	}
	c["attn_logit_softcapping"] = cap(hp.AttnSoftcap)
	c["final_logit_softcapping"] = cap(hp.FinalSoftcap)
	if hp.Arch == "gemma3" {
		c["model_type"] = "gemma3_text"
		c["rope_local_base_freq"] = hp.RopeBaseLocal
		c["sliding_window_pattern"] = hp.SlidingPattern
	}
	if rs := hp.RopeScaling; rs.Type == "linear" {
		c["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": rs.Factor}
	}
}

// queryPreAttnScalar is the s whose s^-½ is hp's attention scale.
func queryPreAttnScalar(hp ir.HParams) float64 {
	if hp.AttnScale == 0 {
		return float64(hp.HeadDim)
	}
	return math.Round(1/(float64(hp.AttnScale)*float64(hp.AttnScale))*1e3) / 1e3
}
