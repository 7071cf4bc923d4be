package synth

import (
	"fmt"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// A mix names the type of every tensor of a model file, as the standard GGUF
// quantisation presets do. The rules follow the published per-tensor choices
// of the common mixes (output and tied embeddings in 6-bit, attn_v and
// ffn_down in more bits on half of the layers for the _M mixes, fallbacks
// for rows that are not a whole number of blocks).
type mix struct {
	name     string
	base     dtype.Type
	fileType uint32 // general.file_type (llama ftype numbering)
	output   dtype.Type
	tiedEmb  dtype.Type // token_embd when there is no output.weight
	moreBits dtype.Type // attn_v and ffn_down on use_more_bits layers; 0 = base
	// rule, where set, gives the type of a block weight of role in layer
	// (of n, in a model of gqa query heads a KV head) where the mix departs
	// from base by rules of its own (ruleQ3KM, ruleQ2K, ruleIQ4); 0 keeps base.
	rule func(role string, layer, n, gqa int) dtype.Type
}

var mixes = map[string]mix{
	"f32":    {"F32", dtype.F32, 0, dtype.F32, dtype.F32, 0, nil},
	"f16":    {"F16", dtype.F16, 1, dtype.F16, dtype.F16, 0, nil},
	"bf16":   {"BF16", dtype.BF16, 32, dtype.BF16, dtype.BF16, 0, nil},
	"q8_0":   {"Q8_0", dtype.Q8_0, 7, dtype.Q8_0, dtype.Q8_0, 0, nil},
	"q4_0":   {"Q4_0", dtype.Q4_0, 2, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q4_1":   {"Q4_1", dtype.Q4_1, 3, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q5_0":   {"Q5_0", dtype.Q5_0, 8, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q5_1":   {"Q5_1", dtype.Q5_1, 9, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q6_k":   {"Q6_K", dtype.Q6_K, 18, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q5_k_m": {"Q5_K_M", dtype.Q5_K, 17, dtype.Q6_K, dtype.Q6_K, dtype.Q6_K, nil},
	"q4_k_m": {"Q4_K_M", dtype.Q4_K, 15, dtype.Q6_K, dtype.Q6_K, dtype.Q6_K, nil},
	"q5_k_s": {"Q5_K_S", dtype.Q5_K, 16, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q4_k_s": {"Q4_K_S", dtype.Q4_K, 14, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q3_k_m": {"Q3_K_M", dtype.Q3_K, 12, dtype.Q6_K, dtype.Q6_K, 0, ruleQ3KM},
	"q3_k_s": {"Q3_K_S", dtype.Q3_K, 11, dtype.Q6_K, dtype.Q6_K, 0, nil},
	"q2_k":   {"Q2_K", dtype.Q2_K, 10, dtype.Q6_K, dtype.Q6_K, 0, ruleQ2K},
	"iq4_xs": {"IQ4_XS", dtype.IQ4_XS, 30, dtype.Q6_K, dtype.Q6_K, 0, ruleIQ4},
	"iq4_nl": {"IQ4_NL", dtype.IQ4_NL, 25, dtype.Q6_K, dtype.Q6_K, 0, ruleIQ4},
}

// The rules of the 2- and 3-bit and IQ4 mixes, as llama.cpp's quantiser
// (llama-quantize, its per-tensor type choice) applies them to a dense
// llama-style model with no override, and as the published Q3_K_M, Q2_K
// and IQ4_XS files of such models carry them. token_embd stays in the
// base type when an output head exists, so those files look it up in
// Q3_K, Q2_K or IQ4_XS. Left out: the 70B rule (attn_v of Q3_K or Q4_K
// to Q5_K for models whose 8 query heads share a KV head) and the
// Falcon ones.

// ruleQ3KM: attn_v in Q5_K in the first two layers and Q4_K after;
// ffn_down in Q5_K in the first sixteenth of the layers and Q4_K after;
// attn_output in Q4_K.
func ruleQ3KM(role string, layer, n, _ int) dtype.Type {
	switch role {
	case "attn_v":
		if layer < 2 {
			return dtype.Q5_K
		}
		return dtype.Q4_K
	case "ffn_down":
		if layer < n/16 {
			return dtype.Q5_K
		}
		return dtype.Q4_K
	case "attn_output":
		return dtype.Q4_K
	}
	return 0
}

// ruleQ2K: attn_v in Q4_K where four or more query heads share a KV head,
// else Q3_K; ffn_down and attn_output in Q3_K.
func ruleQ2K(role string, _, _, gqa int) dtype.Type {
	switch role {
	case "attn_v":
		if gqa >= 4 {
			return dtype.Q4_K
		}
		return dtype.Q3_K
	case "ffn_down", "attn_output":
		return dtype.Q3_K
	}
	return 0
}

// ruleIQ4 (IQ4_XS, IQ4_NL): attn_v in Q5_K where four or more query heads
// share a KV head. Files made without an importance matrix also keep
// ffn_down of the first eighth of the layers in Q5_K; the published IQ4
// files are made with one, and so is this mix.
func ruleIQ4(role string, _, _, gqa int) dtype.Type {
	if role == "attn_v" && gqa >= 4 {
		return dtype.Q5_K
	}
	return 0
}

// lookupMix accepts a mix name (q4_k_m) or a single type name (q4_k), which
// puts every 2-D weight, output and embeddings included, in that type.
func lookupMix(name string) (mix, error) {
	n := strings.ToLower(name)
	if m, ok := mixes[n]; ok {
		return m, nil
	}
	t, err := dtype.Parse(n)
	if err != nil || !t.Known() || t == dtype.Q8_1 || t == dtype.Q8_K || t == dtype.F8E4M3 || t >= dtype.I8 && t != dtype.BF16 {
		return mix{}, fmt.Errorf("%w: unknown quantisation %q (mixes: f32 f16 bf16 q8_0 q4_0 q6_k q5_k_m q4_k_m …, or a single type such as q4_k)", ErrOptions, name)
	}
	return mix{name: t.String(), base: t, fileType: 1024, output: t, tiedEmb: t}, nil
}

// useMoreBits is the standard choice of layers that get more bits in the _M
// mixes: the first and last eighth, and every third layer between.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// typeFor returns the type of the named 2-D weight with row length ne0 in
// layer (−1 outside the blocks) of a model with n layers and gqa query
// heads a KV head.
func (m mix) typeFor(role string, layer, n, gqa, ne0 int, tied bool) dtype.Type {
	t := m.base
	switch {
	case role == "output":
		t = m.output
	case role == "token_embd" && tied:
		t = m.tiedEmb
	case (role == "attn_v" || role == "ffn_down") && m.moreBits != 0 && useMoreBits(layer, n):
		t = m.moreBits
	case m.rule != nil && layer >= 0:
		if r := m.rule(role, layer, n, gqa); r != 0 {
			t = r
		}
	}
	return fallback(t, ne0)
}

// fallback replaces t when a row of ne0 elements is not a whole number of its
// blocks, as the standard quantiser does.
func fallback(t dtype.Type, ne0 int) dtype.Type {
	if ne0%t.BlockElems() == 0 {
		return t
	}
	switch t {
	case dtype.Q4_K:
		t = dtype.Q5_0
	case dtype.Q5_K:
		t = dtype.Q5_1
	case dtype.Q6_K:
		t = dtype.Q8_0
	case dtype.Q2_K, dtype.Q3_K, dtype.IQ4_XS:
		t = dtype.IQ4_NL
	}
	if ne0%t.BlockElems() != 0 {
		return dtype.F16
	}
	return t
}
