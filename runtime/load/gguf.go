package load

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// fromGGUF builds a Model from a parsed GGUF file and, for a split model,
// its later shards (whose tensors join the first file's).
func fromGGUF(path string, f *gguf.File, shards ...*gguf.File) (*Model, error) {
	m := &Model{Path: path, Format: FormatGGUF, GGUF: f, Tensors: map[string]*Tensor{}}
	for _, sf := range append([]*gguf.File{f}, shards...) {
		for i := range sf.Tensors {
			ti := &sf.Tensors[i]
			if _, dup := m.Tensors[ti.Name]; dup {
				return nil, fmt.Errorf("%w: %s: tensor %s is in two shards", ErrTensor, path, ti.Name)
			}
			shape := make([]int, len(ti.Dims))
			for j, d := range ti.Dims {
				shape[j] = int(d) // the parser bounds every dimension product by the file size
			}
			m.addTensor(&Tensor{Name: ti.Name, Type: ti.Type, Shape: shape, load: func() ([]byte, error) { return sf.TensorData(ti) }})
		}
	}
	g := ggufMeta{f: f, path: path}
	hp, err := g.hparams(m)
	if err != nil {
		return nil, err
	}
	m.HParams = hp
	if m.Pooling, err = ggufPooling(path, hp.Arch, f); err != nil {
		return nil, err
	}
	m.ChatTemplate, _ = f.String("tokenizer.chat_template")
	m.FileType = ggufFileType(f, m)
	if _, ok := f.String("tokenizer.ggml.model"); ok {
		tok, err := tokenizer.FromGGUF(f)
		if err != nil {
			return nil, fmt.Errorf("%s: tokenizer: %w", path, err)
		}
		m.Tokenizer = tok
		if err := checkSpecialTokens(path, f); err != nil {
			return nil, err
		}
	}
	if len(m.Tensors) > 0 { // a vocabulary-only file has metadata to tokenize with, nothing to run
		k := ggufKeys(g.arch) // the file's keys (a Mixtral file's are llama.*)
		if err := checkHParams(path, hp, k); err != nil {
			return nil, err
		}
		if err := checkTensors(path, m, k); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// checkSpecialTokens rejects a BOS or EOS id outside the token list: the
// tokenizer would drop it silently, and generation would start from no
// token or never stop.
func checkSpecialTokens(path string, f *gguf.File) error {
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	for _, key := range []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"} {
		v, ok := f.Lookup(key)
		if !ok {
			continue
		}
		id, ok := v.Uint()
		if !ok || id >= uint64(len(toks)) {
			return fmt.Errorf("%w: %s: %s = %v is not a token id (the vocabulary has %d tokens)", ErrMetadata, path, key, v, len(toks))
		}
	}
	return nil
}

// ggufMeta reads typed metadata, naming the file and key in errors.
type ggufMeta struct {
	f    *gguf.File
	path string
	arch string
}

func (g *ggufMeta) errf(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s: %s", ErrMetadata, g.path, key, fmt.Sprintf(format, args...))
}

// uint reads an integer key of the architecture; a per-layer array must
// hold one value for every layer. def < 0 makes the key required.
func (g *ggufMeta) uint(suffix string, def int) (int, error) {
	key := g.arch + "." + suffix
	v, ok := g.f.Lookup(key)
	if !ok {
		if def < 0 {
			return 0, g.errf(key, "required key is missing")
		}
		return def, nil
	}
	if v.Type == gguf.TypeArray {
		xs, _ := g.f.Int32s(key)
		if len(xs) == 0 {
			return 0, g.errf(key, "want an integer or a non-empty integer array, have %v", v)
		}
		for _, x := range xs {
			if x != xs[0] {
				return 0, g.errf(key, "per-layer values differ (%v); memra needs one value for every layer", xs)
			}
		}
		if xs[0] < 0 {
			return 0, g.errf(key, "negative value %d", xs[0])
		}
		return int(xs[0]), nil
	}
	u, ok := v.Uint()
	if !ok {
		return 0, g.errf(key, "want a non-negative integer, have %v (%v)", v, v.Type)
	}
	if u > 1<<31 {
		return 0, g.errf(key, "%d is out of range", u)
	}
	return int(u), nil
}

// float reads a float key of the architecture; def is used when absent.
func (g *ggufMeta) float(suffix string, def float64, required bool) (float32, error) {
	key := g.arch + "." + suffix
	v, ok := g.f.Lookup(key)
	if !ok {
		if required {
			return 0, g.errf(key, "required key is missing")
		}
		return float32(def), nil
	}
	x, ok := v.Float()
	if !ok {
		return 0, g.errf(key, "want a float, have %v (%v)", v, v.Type)
	}
	return float32(x), nil
}

func (g *ggufMeta) hparams(m *Model) (ir.HParams, error) {
	var hp ir.HParams
	arch, ok := g.f.String("general.architecture")
	if !ok || arch == "" {
		if v, present := g.f.Lookup("general.architecture"); present {
			return hp, g.errf("general.architecture", "want a non-empty string, have %v (%v)", v, v.Type)
		}
		return hp, g.errf("general.architecture", "required string key is missing")
	}
	if len(m.Tensors) > 0 {
		if err := checkArch(g.path, "general.architecture", arch); err != nil {
			return hp, err
		}
	}
	g.arch = arch
	hp.Arch = arch
	hp.Name, _ = g.f.String("general.name")
	hp.RopeStyle = ir.RopeHalf
	if arch == "llama" {
		hp.RopeStyle = ir.RopeInterleaved
	}

	type field struct {
		dst    *int
		suffix string
		def    int
	}
	for _, fl := range []field{
		{&hp.ContextLength, "context_length", -1},
		{&hp.Embedding, "embedding_length", -1},
		{&hp.Layers, "block_count", -1},
		{&hp.FFN, "feed_forward_length", 0},
		{&hp.Heads, "attention.head_count", -1},
	} {
		v, err := g.uint(fl.suffix, fl.def)
		if err != nil {
			return hp, err
		}
		*fl.dst = v
	}
	if hp.Heads == 0 {
		return hp, g.errf(arch+".attention.head_count", "zero heads")
	}
	var err error
	if hp.HeadsKV, err = g.uint("attention.head_count_kv", hp.Heads); err != nil {
		return hp, err
	}
	if _, ok := g.f.Lookup(arch + ".attention.key_length"); !ok && hp.Embedding%hp.Heads != 0 {
		return hp, g.errf(arch+".attention.head_count", "%d heads do not divide the hidden size %d (and no key_length gives the head size)", hp.Heads, hp.Embedding)
	}
	if hp.HeadDim, err = g.uint("attention.key_length", hp.Embedding/hp.Heads); err != nil {
		return hp, err
	}
	if hp.RopeDim, err = g.uint("rope.dimension_count", hp.HeadDim); err != nil {
		return hp, err
	}
	if hp.RMSEps, err = g.float("attention.layer_norm_rms_epsilon", 0, arch == "llama" || arch == "qwen2" || arch == "qwen3"); err != nil {
		return hp, err
	}
	if hp.RopeBase, err = g.float("rope.freq_base", 10000, false); err != nil {
		return hp, err
	}
	if hp.RopeScaling, err = g.ropeScaling(); err != nil {
		return hp, err
	}
	yarnContext(&hp)
	if err := g.moe(&hp); err != nil {
		return hp, err
	}

	hp.VocabSize, err = g.vocabSize(m)
	if err != nil {
		return hp, err
	}
	_, hasOutput := m.Tensors["output.weight"]
	hp.TiedEmbedding = !hasOutput && len(m.Tensors) > 0
	_, hp.QKVBias = m.Tensors["blk.0.attn_q.bias"]
	_, hp.QKNorm = m.Tensors["blk.0.attn_q_norm.weight"]
	return hp, g.gemmaGGUF(&hp)
}

// ropeScaling reads <arch>.rope.scaling.* (and the legacy
// rope.scale_linear).
func (g *ggufMeta) ropeScaling() (ir.RopeScaling, error) {
	var rs ir.RopeScaling
	rs.Type, _ = g.f.String(g.arch + ".rope.scaling.type")
	var err error
	if rs.Factor, err = g.float("rope.scaling.factor", 0, false); err != nil {
		return rs, err
	}
	if rs.Factor == 0 {
		if rs.Factor, err = g.float("rope.scale_linear", 0, false); err != nil {
			return rs, err
		}
	}
	if rs.Type == "" && rs.Factor != 0 && rs.Factor != 1 {
		rs.Type = "linear" // the GGUF default when only a factor is given
	}
	if rs.OriginalContext, err = g.uint("rope.scaling.original_context_length", 0); err != nil {
		return rs, err
	}
	rs.Finetuned, _ = g.f.Bool(g.arch + ".rope.scaling.finetuned")
	if rs.Type != "yarn" {
		return rs, nil
	}
	for _, f := range []struct {
		dst    *float32
		suffix string
	}{
		{&rs.BetaFast, "rope.scaling.yarn_beta_fast"},
		{&rs.BetaSlow, "rope.scaling.yarn_beta_slow"},
		// converters write Hugging Face's attention_factor here
		{&rs.AttnFactor, "rope.scaling.yarn_attn_factor"},
		// llama.cpp multiplies the attention factor it computes by this
		{&rs.AttnFactorMul, "rope.scaling.attn_factor"},
	} {
		if *f.dst, err = g.float(f.suffix, 0, false); err != nil {
			return rs, err
		}
		if *f.dst < 0 || math.IsNaN(float64(*f.dst)) || math.IsInf(float64(*f.dst), 0) {
			return rs, g.errf(g.arch+"."+f.suffix, "%g is not a finite number ≥ 0", *f.dst)
		}
	}
	if ext, err := g.float("rope.scaling.yarn_ext_factor", 1, false); err != nil {
		return rs, err
	} else if ext != 1 {
		return rs, g.errf(g.arch+".rope.scaling.yarn_ext_factor", "%g is not supported (YaRN's ramp as published has 1)", ext)
	}
	if mul, err := g.float("rope.scaling.yarn_log_multiplier", 0, false); err != nil {
		return rs, err
	} else if mul != 0 {
		return rs, g.errf(g.arch+".rope.scaling.yarn_log_multiplier", "%g is not supported (a DeepSeek attention factor rule)", mul)
	}
	return rs, nil
}

// vocabSize is the embedding table's row count, else <arch>.vocab_size,
// else the token count.
func (g *ggufMeta) vocabSize(m *Model) (int, error) {
	if t, ok := m.Tensors["token_embd.weight"]; ok && len(t.Shape) == 2 {
		if _, ok := g.f.Lookup(g.arch + ".vocab_size"); ok {
			n, err := g.uint("vocab_size", 0)
			if err != nil {
				return 0, err
			}
			if n != t.Shape[1] {
				return 0, fmt.Errorf("%w: %s: %s.vocab_size = %d, but token_embd.weight has shape %v (its columns are the vocabulary)", ErrMismatch, g.path, g.arch, n, t.Shape)
			}
		}
		return t.Shape[1], nil
	}
	if _, ok := g.f.Lookup(g.arch + ".vocab_size"); ok {
		return g.uint("vocab_size", 0)
	}
	if toks, ok := g.f.Strings("tokenizer.ggml.tokens"); ok {
		return len(toks), nil
	}
	return 0, nil
}

// ftypeNames are llama_ftype names by general.file_type value.
var ftypeNames = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}

// ggufFileType names general.file_type; without the key, the type of the
// first block's query weight (or the embedding) stands for the file.
func ggufFileType(f *gguf.File, m *Model) string {
	if ft, ok := f.Uint("general.file_type"); ok {
		if n, ok := ftypeNames[ft]; ok {
			return n
		}
		return fmt.Sprintf("ftype(%d)", ft)
	}
	for _, name := range []string{"blk.0.attn_q.weight", "token_embd.weight"} {
		if t, ok := m.Tensors[name]; ok {
			return t.Type.String()
		}
	}
	return ""
}
