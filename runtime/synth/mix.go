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
}

var mixes = map[string]mix{
	"f32":    {"F32", dtype.F32, 0, dtype.F32, dtype.F32, 0},
	"f16":    {"F16", dtype.F16, 1, dtype.F16, dtype.F16, 0},
	"bf16":   {"BF16", dtype.BF16, 32, dtype.BF16, dtype.BF16, 0},
	"q8_0":   {"Q8_0", dtype.Q8_0, 7, dtype.Q8_0, dtype.Q8_0, 0},
	"q4_0":   {"Q4_0", dtype.Q4_0, 2, dtype.Q6_K, dtype.Q6_K, 0},
	"q4_1":   {"Q4_1", dtype.Q4_1, 3, dtype.Q6_K, dtype.Q6_K, 0},
	"q5_0":   {"Q5_0", dtype.Q5_0, 8, dtype.Q6_K, dtype.Q6_K, 0},
	"q5_1":   {"Q5_1", dtype.Q5_1, 9, dtype.Q6_K, dtype.Q6_K, 0},
	"q6_k":   {"Q6_K", dtype.Q6_K, 18, dtype.Q6_K, dtype.Q6_K, 0},
	"q5_k_m": {"Q5_K_M", dtype.Q5_K, 17, dtype.Q6_K, dtype.Q6_K, dtype.Q6_K},
	"q4_k_m": {"Q4_K_M", dtype.Q4_K, 15, dtype.Q6_K, dtype.Q6_K, dtype.Q6_K},
	"q5_k_s": {"Q5_K_S", dtype.Q5_K, 16, dtype.Q6_K, dtype.Q6_K, 0},
	"q4_k_s": {"Q4_K_S", dtype.Q4_K, 14, dtype.Q6_K, dtype.Q6_K, 0},
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
// layer (−1 outside the blocks) of a model with n layers.
func (m mix) typeFor(role string, layer, n, ne0 int, tied bool) dtype.Type {
	t := m.base
	switch {
	case role == "output":
		t = m.output
	case role == "token_embd" && tied:
		t = m.tiedEmb
	case (role == "attn_v" || role == "ffn_down") && m.moreBits != 0 && useMoreBits(layer, n):
		t = m.moreBits
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
