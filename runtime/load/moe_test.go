package load

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/safetensors"
)

const tExperts, tUsed, tExpertFFN = 4, 2, 12

// moeCheckpoint returns the tensors of a mixture-of-experts checkpoint of
// the test dims in the spelling of family arch: the llama layout without
// its dense feed-forward, a router a layer, and tExperts experts whose
// projection p of expert e starts at 100·(e+1) + 10·p.
func moeCheckpoint(arch string, skip string) []safetensors.Tensor {
	sc := hfMoESchemes[arch]
	var ts []safetensors.Tensor
	for _, t := range hfTensors(true, true, func(p string) []safetensors.Tensor {
		out := []safetensors.Tensor{f32Tensor(p+sc.block+"."+sc.router+".weight", 5, tExperts, tHidden)}
		for e := range tExperts {
			for i, proj := range []string{sc.gate, sc.up, sc.down} {
				name := fmt.Sprintf("%s%s.experts.%d.%s.weight", p, sc.block, e, proj)
				if name == skip {
					continue
				}
				shape := []int{tExpertFFN, tHidden}
				if proj == sc.down {
					shape = []int{tHidden, tExpertFFN}
				}
				out = append(out, f32Tensor(name, float32(100*(e+1)+10*i), shape...))
			}
		}
		return out
	}) {
		if !strings.Contains(t.Name, "mlp.gate_proj") && !strings.Contains(t.Name, "mlp.up_proj") && !strings.Contains(t.Name, "mlp.down_proj") {
			ts = append(ts, t)
		}
	}
	return ts
}

func moeConfig(arch string, extra map[string]any) map[string]any {
	c := map[string]any{"num_experts_per_tok": tUsed}
	switch arch {
	case "qwen3moe":
		c["model_type"], c["num_experts"], c["moe_intermediate_size"], c["norm_topk_prob"] = "qwen3_moe", tExperts, tExpertFFN, true
		c["decoder_sparse_step"], c["mlp_only_layers"] = 1, []int{}
	case "mixtral":
		c["model_type"], c["num_local_experts"], c["intermediate_size"] = "mixtral", tExperts, tExpertFFN
	}
	for k, v := range extra {
		c[k] = v
	}
	return hfConfigJSON(c["model_type"].(string), c)
}

func TestHFMoE(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "mixtral"} {
		t.Run(arch, func(t *testing.T) {
			m, err := Open(writeHF(t, moeConfig(arch, nil), moeCheckpoint(arch, ""), nil))
			require.NoError(t, err)
			defer m.Close()
			hp := m.HParams
			require.Equal(t, arch, hp.Arch)
			require.Equal(t, []int{tExperts, tUsed, tExpertFFN}, []int{hp.Experts, hp.ExpertsUsed, hp.ExpertFFN})
			require.True(t, hp.ExpertNorm)
			require.Equal(t, []string{"model.rotary_emb.inv_freq"}, m.Skipped)
			require.Len(t, m.Tensors, 3+(6+4)*tLayers) // attention and norms, router and three expert tensors
			r := m.Tensors["blk.1.ffn_gate_inp.weight"]
			require.Equal(t, []int{tHidden, tExperts}, r.Shape)
			for i, proj := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
				tt := m.Tensors["blk.1."+proj+".weight"]
				want := []int{tHidden, tExpertFFN, tExperts}
				if i == 2 {
					want = []int{tExpertFFN, tHidden, tExperts}
				}
				require.Equal(t, want, tt.Shape, proj)
				require.Equal(t, dtype.F32, tt.Type)
				d, err := tt.Data()
				require.NoError(t, err)
				per := tHidden * tExpertFFN
				for e := range tExperts {
					first := math.Float32frombits(binary.LittleEndian.Uint32(d[4*e*per:]))
					last := math.Float32frombits(binary.LittleEndian.Uint32(d[4*((e+1)*per-1):]))
					require.Equal(t, float32(100*(e+1)+10*i), first, "%s expert %d", proj, e)
					require.Equal(t, float32(100*(e+1)+10*i+per-1), last, "%s expert %d", proj, e)
				}
			}
		})
	}
}

func TestHFMoEErrors(t *testing.T) {
	for _, c := range []struct {
		name, arch string
		extra      map[string]any
		skip       string
		err        error
		msg        string
	}{
		{"dense layers", "qwen3moe", map[string]any{"mlp_only_layers": []int{1}}, "", ErrMetadata, "mlp_only_layers"},
		{"sparse step", "qwen3moe", map[string]any{"decoder_sparse_step": 2}, "", ErrMetadata, "decoder_sparse_step 2"},
		{"more used than experts", "mixtral", map[string]any{"num_experts_per_tok": 5}, "", ErrMetadata, "5 a token"},
		{"no experts", "qwen3moe", map[string]any{"num_experts": 0}, "", ErrMetadata, "0 experts"},
		{"missing expert", "mixtral", nil, "model.layers.1.block_sparse_moe.experts.2.w3.weight", ErrTensor, "expert 2 of 4 is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(writeHF(t, moeConfig(c.arch, c.extra), moeCheckpoint(c.arch, c.skip), nil))
			require.ErrorIs(t, err, c.err)
			require.ErrorContains(t, err, c.msg)
		})
	}
	// an expert past the count is refused, not dropped
	ts := append(moeCheckpoint("qwen3moe", ""), f32Tensor("model.layers.0.mlp.experts.4.up_proj.weight", 0, tExpertFFN, tHidden))
	_, err := Open(writeHF(t, moeConfig("qwen3moe", nil), ts, nil))
	require.ErrorIs(t, err, ErrTensor)
	require.ErrorContains(t, err, "experts.4.up_proj.weight is not an expert of 4")
}

func TestHFMoENames(t *testing.T) {
	names, ok := HFMoENames("mixtral", "blk.3.ffn_down_exps.weight", 2)
	require.True(t, ok)
	require.Equal(t, []string{"model.layers.3.block_sparse_moe.experts.0.w2.weight", "model.layers.3.block_sparse_moe.experts.1.w2.weight"}, names)
	names, ok = HFMoENames("qwen3moe", "blk.0.ffn_gate_inp.weight", 128)
	require.True(t, ok)
	require.Equal(t, []string{"model.layers.0.mlp.gate.weight"}, names)
	for _, c := range [][2]string{{"qwen3", "blk.0.ffn_up_exps.weight"}, {"mixtral", "blk.0.ffn_up.weight"}, {"mixtral", "output.weight"}} {
		_, ok := HFMoENames(c[0], c[1], 8)
		require.False(t, ok, c)
	}
}

// A llama GGUF with experts is Mixtral, as llama.cpp writes it.
func TestGGUFMoE(t *testing.T) {
	open := func(t *testing.T, kvs map[string]any) (*Model, error) {
		p := readParts(t, storiesPath)
		for k, v := range kvs {
			p.setKV(k, v)
		}
		m, err := Open(writeFile(t, "moe.gguf", p.encode(t)))
		if m != nil {
			t.Cleanup(func() { m.Close() })
		}
		return m, err
	}
	m, err := open(t, map[string]any{"llama.expert_count": uint32(8), "llama.expert_used_count": uint32(2)})
	require.NoError(t, err)
	hp := m.HParams
	require.Equal(t, "mixtral", hp.Arch)
	require.Equal(t, []int{8, 2, hp.FFN}, []int{hp.Experts, hp.ExpertsUsed, hp.ExpertFFN})
	require.True(t, hp.ExpertNorm)
	m, err = open(t, map[string]any{"llama.expert_count": uint32(8), "llama.expert_used_count": uint32(2),
		"llama.expert_feed_forward_length": uint32(64), "llama.expert_weights_norm": false})
	require.NoError(t, err)
	require.Equal(t, 64, m.HParams.ExpertFFN)
	require.False(t, m.HParams.ExpertNorm)
	m, err = open(t, nil)
	require.NoError(t, err)
	require.Equal(t, "llama", m.HParams.Arch)
	require.Zero(t, m.HParams.Experts)
	for _, c := range []struct {
		name string
		kvs  map[string]any
		msg  string
	}{
		{"no used count", map[string]any{"llama.expert_count": uint32(8)}, "llama.expert_used_count: required key is missing"},
		{"more used than experts", map[string]any{"llama.expert_count": uint32(2), "llama.expert_used_count": uint32(3)}, "3 experts used of 2"},
		{"norm not a bool", map[string]any{"llama.expert_count": uint32(2), "llama.expert_used_count": uint32(1), "llama.expert_weights_norm": "yes"}, "want a bool"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := open(t, c.kvs)
			require.ErrorIs(t, err, ErrMetadata)
			require.ErrorContains(t, err, c.msg)
		})
	}
}

// A Mixtral file's errors name its keys, which are llama's.
func TestGGUFMoEKeysInErrors(t *testing.T) {
	p := readParts(t, storiesPath)
	p.setKV("llama.expert_count", uint32(8))
	p.setKV("llama.expert_used_count", uint32(2))
	p.setKV("llama.block_count", uint32(9))
	_, err := Open(writeFile(t, "moe.gguf", p.encode(t)))
	require.ErrorIs(t, err, ErrMismatch)
	require.ErrorContains(t, err, "llama.block_count = 9")
}
