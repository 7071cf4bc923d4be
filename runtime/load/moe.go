package load

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/runtime/format/safetensors"
)

// Mixture-of-experts models: their hyperparameters from GGUF metadata and
// config.json, and their checkpoints' per-expert tensors stacked into the
// 3-D tensors of GGUF files (blk.N.ffn_{gate,up,down}_exps.weight, ne
// [in, out, experts]).

// ggufMoE reads <arch>.expert_count, expert_used_count,
// expert_feed_forward_length (default: the feed-forward length, as
// Mixtral's files leave it out) and expert_weights_norm (default true:
// Qwen3-MoE and Mixtral both renormalise). llama.cpp writes Mixtral as
// architecture llama with experts; such a file is the mixtral family.
func (g *ggufMeta) moe(hp *ir.HParams) error {
	var err error
	if hp.Experts, err = g.uint("expert_count", 0); err != nil || hp.Experts == 0 {
		return err
	}
	if hp.ExpertsUsed, err = g.uint("expert_used_count", -1); err != nil {
		return err
	}
	if hp.ExpertFFN, err = g.uint("expert_feed_forward_length", hp.FFN); err != nil {
		return err
	}
	hp.ExpertNorm = true
	if v, ok := g.f.Lookup(g.arch + ".expert_weights_norm"); ok {
		b, ok := g.f.Bool(g.arch + ".expert_weights_norm")
		if !ok {
			return g.errf(g.arch+".expert_weights_norm", "want a bool, have %v (%v)", v, v.Type)
		}
		hp.ExpertNorm = b
	}
	if hp.ExpertsUsed <= 0 || hp.ExpertsUsed > hp.Experts {
		return g.errf(g.arch+".expert_used_count", "%d experts used of %d", hp.ExpertsUsed, hp.Experts)
	}
	if hp.Arch == "llama" {
		hp.Arch = "mixtral"
	}
	return nil
}

// hfMoESchemes are the checkpoint spellings of a family's mixture of
// experts: the module holding it, the router's name in it, and the
// experts' gate, up and down projections.
var hfMoESchemes = map[string]struct{ block, router, gate, up, down string }{
	"qwen3moe": {"mlp", "gate", "gate_proj", "up_proj", "down_proj"},
	"mixtral":  {"block_sparse_moe", "gate", "w1", "w3", "w2"},
}

// hfMoE fills the experts' hyperparameters of a qwen3_moe or mixtral
// config.json. Qwen3-MoE layers that are dense (mlp_only_layers, a
// decoder_sparse_step above 1) are refused: memra models one feed-forward
// for every layer.
func hfMoE(path string, cfg *hfConfig, hp *ir.HParams) error {
	switch hp.Arch {
	case "qwen3moe":
		hp.Experts, hp.ExpertFFN = cfg.NumExperts, cfg.MoEIntermediateSize
		hp.ExpertNorm = cfg.NormTopKProb
		if len(cfg.MLPOnlyLayers) > 0 || cfg.DecoderSparseStep > 1 {
			return fmt.Errorf("%w: %s: mlp_only_layers %v, decoder_sparse_step %d: dense layers among the experts' are not supported",
				ErrMetadata, path, cfg.MLPOnlyLayers, cfg.DecoderSparseStep)
		}
	case "mixtral":
		hp.Experts, hp.ExpertFFN, hp.ExpertNorm = cfg.NumLocalExperts, cfg.IntermediateSize, true
	default:
		return nil
	}
	hp.ExpertsUsed = cfg.NumExpertsPerTok
	if hp.Experts <= 0 || hp.ExpertsUsed <= 0 || hp.ExpertsUsed > hp.Experts || hp.ExpertFFN <= 0 {
		return fmt.Errorf("%w: %s: %d experts, %d a token, expert intermediate size %d", ErrMetadata, path, hp.Experts, hp.ExpertsUsed, hp.ExpertFFN)
	}
	return nil
}

// hfExpertName matches model.layers.N.<block>.experts.E.<proj>.weight.
var hfExpertName = regexp.MustCompile(`^model\.layers\.(\d+)\.([a-z_]+)\.experts\.(\d+)\.([a-z0-9_]+)\.weight$`)

// mapHFExperts adds the routers and the stacked expert tensors of a
// mixture-of-experts checkpoint under their GGUF names, and returns the
// checkpoint names it consumed. Every layer must hold all its experts, of
// one dtype and shape.
func (m *Model) mapHFExperts(set *safetensors.Set, arch string, experts int) (map[string]bool, error) {
	sc, ok := hfMoESchemes[arch]
	if !ok {
		return nil, nil
	}
	used := map[string]bool{}
	type key struct {
		layer int
		proj  string
	}
	parts := map[key][]string{}
	layers := 0
	for _, n := range set.Names() {
		s := hfExpertName.FindStringSubmatch(n)
		if s == nil || s[2] != sc.block {
			continue
		}
		l, err1 := strconv.Atoi(s[1])
		e, err2 := strconv.Atoi(s[3])
		proj := map[string]string{sc.gate: "ffn_gate_exps", sc.up: "ffn_up_exps", sc.down: "ffn_down_exps"}[s[4]]
		if err1 != nil || err2 != nil || proj == "" || e >= experts {
			return nil, fmt.Errorf("%w: %s: %s is not an expert of %d", ErrTensor, m.Path, n, experts)
		}
		k := key{l, proj}
		if parts[k] == nil {
			parts[k] = make([]string, experts)
		}
		parts[k][e] = n
		used[n] = true
		layers = max(layers, l+1)
	}
	for l := 0; l < layers; l++ {
		router := fmt.Sprintf("model.layers.%d.%s.%s.weight", l, sc.block, sc.router)
		if _, _, ok := set.Tensor(router); ok {
			t, err := hfTensor(set, router, fmt.Sprintf("blk.%d.ffn_gate_inp.weight", l))
			if err != nil {
				return nil, err
			}
			m.addTensor(t)
			used[router] = true
		}
		for _, proj := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
			names := parts[key{l, proj}]
			if names == nil {
				continue // the builder names what is missing
			}
			t, err := stackExperts(set, names, fmt.Sprintf("blk.%d.%s.weight", l, proj))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.Path, err)
			}
			m.addTensor(t)
		}
	}
	return used, nil
}

// stackExperts presents the experts' 2-D tensors names (in expert order) as
// one 3-D tensor name, ne [in, out, experts]; its bytes are the experts'
// one after another, copied on first use.
func stackExperts(set *safetensors.Set, names []string, name string) (*Tensor, error) {
	var ts []*Tensor
	for e, n := range names {
		if n == "" {
			return nil, fmt.Errorf("%w: %s: expert %d of %d is missing", ErrTensor, name, e, len(names))
		}
		t, err := hfTensor(set, n, name)
		if err != nil {
			return nil, err
		}
		if len(t.Shape) != 2 || (e > 0 && (t.Type != ts[0].Type || !slices.Equal(t.Shape, ts[0].Shape))) {
			return nil, fmt.Errorf("%w: %s: expert %d (%s) is %v %v, expert 0 %v %v", ErrTensor, name, e, n, t.Type, t.Shape, ts[0].Type, ts[0].Shape)
		}
		ts = append(ts, t)
	}
	st := &Tensor{Name: name, Type: ts[0].Type, Shape: []int{ts[0].Shape[0], ts[0].Shape[1], len(ts)}}
	st.load = func() ([]byte, error) {
		out := make([]byte, 0, st.Bytes())
		for _, t := range ts {
			b, err := t.Data()
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
		return out, nil
	}
	return st, nil
}

// HFMoENames returns the checkpoint names of a mixture-of-experts tensor
// of family arch under its GGUF name: the router's one name, or an expert
// tensor's experts names in expert order; false for other names.
func HFMoENames(arch, gguf string, experts int) ([]string, bool) {
	sc, ok := hfMoESchemes[arch]
	if !ok {
		return nil, false
	}
	var layer int
	var part string
	if n, err := fmt.Sscanf(gguf, "blk.%d.%s", &layer, &part); n != 2 || err != nil {
		return nil, false
	}
	pre := fmt.Sprintf("model.layers.%d.%s.", layer, sc.block)
	proj := map[string]string{"ffn_gate_exps.weight": sc.gate, "ffn_up_exps.weight": sc.up, "ffn_down_exps.weight": sc.down}[part]
	switch {
	case part == "ffn_gate_inp.weight":
		return []string{pre + sc.router + ".weight"}, true
	case proj == "":
		return nil, false
	}
	names := make([]string, experts)
	for e := range names {
		names[e] = fmt.Sprintf("%sexperts.%d.%s.weight", pre, e, proj)
	}
	return names, true
}
