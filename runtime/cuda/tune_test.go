package cuda_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/autotune/check"
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
	"github.com/memra-ai/memra/tunedb"
)

func tinyModel(t *testing.T, preset, quant string) *load.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), preset+"-"+quant+".gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: preset, Layers: 2, Dim: 256, Quant: quant, Context: 512, Weights: synth.WeightsBlocks})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// kernelNames lists the kernel names of both programs.
func kernelNames(dec, pre *codegen.Program) []string {
	var names []string
	for _, p := range []*codegen.Program{dec, pre} {
		for _, k := range p.Kernels {
			names = append(names, k.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestLowerTakesTunedArm: a tunedb entry with a non-default arm for one
// (family, class) changes exactly the kernels of that class; Untuned and a
// card without entries give the defaults.
func TestLowerTakesTunedArm(t *testing.T) {
	m := tinyModel(t, "llama3-8b", "f16")
	hp := m.HParams
	qkvN := (hp.Heads + 2*hp.HeadsKV) * hp.HeadDim
	gemvArm := codegen.GEMVArm{Threads: 128, RowsPerBlock: 2, Unroll: 1, SharedX: 0}
	require.NotEqual(t, codegen.DefaultGEMVArm, gemvArm)
	require.NoError(t, gemvArm.Validate())
	normArm := codegen.BlockArm{Threads: 64}
	require.NotEqual(t, codegen.DefaultBlockArm, normArm)

	key := tunedb.DeviceKey{Name: "nvidia-h200", SMMajor: 9, SMMinor: 0, SMs: 132, MemGiB: 140}
	db, err := tunedb.OpenFS(fstest.MapFS{}, t.TempDir())
	require.NoError(t, err)
	_, err = db.Put(key, []tunedb.Entry{
		{Family: "gemv", Class: codegen.ProductClass(dtype.F16, qkvN, hp.Embedding, false), Arm: gemvArm.Point(), ArmName: gemvArm.String(), TimeUS: 1},
		{Family: "rmsnorm", Class: codegen.RMSNormClass(hp.Embedding, false), Arm: normArm.Point(), ArmName: normArm.String(), TimeUS: 1},
	})
	require.NoError(t, err)

	// the norms stay launches of their own (fusing them into the products is
	// TestLowerFusedNorm's subject): the tuned rmsnorm arm must show
	baseDec, basePre, err := cuda.Lower(m, cuda.BackendOptions{MaxSeqs: 4, NoFusePrologue: true})
	require.NoError(t, err)
	base := kernelNames(baseDec, basePre)

	tunedGEMV, err := codegen.GEMV(dtype.F16, qkvN, hp.Embedding, false, gemvArm)
	require.NoError(t, err)
	defGEMV, err := codegen.GEMV(dtype.F16, qkvN, hp.Embedding, false, codegen.DefaultGEMVArm)
	require.NoError(t, err)
	tunedNorm, err := codegen.RMSNormAdd(hp.Embedding, hp.RMSEps, false, normArm)
	require.NoError(t, err)
	defNorm, err := codegen.RMSNormAdd(hp.Embedding, hp.RMSEps, false, codegen.DefaultBlockArm)
	require.NoError(t, err)
	require.Contains(t, base, defGEMV.Name)
	require.Contains(t, base, defNorm.Name)

	cases := []struct {
		name  string
		opts  cuda.BackendOptions
		tuned bool
	}{
		{"tuned", cuda.BackendOptions{MaxSeqs: 4, NoFusePrologue: true, Pick: cuda.TunedPicker(db, key)}, true},
		{"same-arch card", cuda.BackendOptions{MaxSeqs: 4, NoFusePrologue: true, Pick: cuda.TunedPicker(db, tunedb.DeviceKey{Name: "nvidia-h100", SMMajor: 9, SMs: 132, MemGiB: 80})}, true},
		{"untuned", cuda.BackendOptions{MaxSeqs: 4, NoFusePrologue: true, Pick: cuda.TunedPicker(db, key), Untuned: true}, false},
		{"other arch", cuda.BackendOptions{MaxSeqs: 4, NoFusePrologue: true, Pick: cuda.TunedPicker(db, tunedb.DeviceKey{Name: "rtx", SMMajor: 12, SMs: 170, MemGiB: 32})}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dec, pre, err := cuda.Lower(m, c.opts)
			require.NoError(t, err)
			got := kernelNames(dec, pre)
			if !c.tuned {
				require.Equal(t, base, got)
				return
			}
			require.Contains(t, got, tunedGEMV.Name)
			require.NotContains(t, got, defGEMV.Name)
			require.Contains(t, got, tunedNorm.Name)
			require.NotContains(t, got, defNorm.Name)
			// Everything else is untouched.
			want := slices.DeleteFunc(slices.Clone(base), func(n string) bool { return n == defGEMV.Name || n == defNorm.Name })
			want = append(want, tunedGEMV.Name, tunedNorm.Name)
			slices.Sort(want)
			require.Equal(t, want, got)
		})
	}
}

// modelShape is the shape and weight types autotune reads from a model.
func modelShape(t *testing.T, m *load.Model) (codegen.Shape, check.Weights) {
	hp := m.HParams
	s := codegen.Shape{Name: hp.Name, Hidden: hp.Embedding, FFN: hp.FFN, Vocab: hp.VocabSize, Heads: hp.Heads, HeadsKV: hp.HeadsKV,
		HeadDim: hp.HeadDim, RopeHalf: hp.RopeStyle == ir.RopeHalf, Eps: hp.RMSEps}
	typ := func(names ...string) dtype.Type {
		for _, n := range names {
			if ti, ok := m.Tensors[n]; ok {
				return ti.Type
			}
		}
		t.Fatalf("model has none of %v", names)
		return 0
	}
	return s, check.Weights{
		Attn: typ("blk.0.attn_q.weight"), AttnOut: typ("blk.0.attn_output.weight"), FFNUp: typ("blk.0.ffn_up.weight"),
		FFNDown: typ("blk.0.ffn_down.weight"), Embed: typ("token_embd.weight"), Output: typ("output.weight", "token_embd.weight"),
	}
}

// TestLowerClassesMatchTuneCases: every (family, class) lowering looks up
// is a task autotune writes for the same model, and the other way round.
func TestLowerClassesMatchTuneCases(t *testing.T) {
	for _, c := range []struct{ preset, quant string }{{"llama3-8b", "f16"}, {"qwen3-8b", "q8_0"}, {"qwen2.5-7b", "bf16"}} {
		t.Run(c.preset+"/"+c.quant, func(t *testing.T) {
			m := tinyModel(t, c.preset, c.quant)
			asked := map[string]bool{}
			pick := func(family, class string) (codegen.Point, bool) {
				asked[family+"/"+class] = true
				return nil, false
			}
			_, _, err := cuda.Lower(m, cuda.BackendOptions{MaxSeqs: 4, Pick: pick})
			require.NoError(t, err)
			s, w := modelShape(t, m)
			tuned := map[string]bool{}
			for _, tc := range check.TuneCases(s, w, check.DefaultSizes, 1) {
				tuned[tc.ID()] = true
			}
			// Every kernel lowering looks up is a task autotune tunes. Autotune
			// also tunes the families that only non-default lowering switches
			// use (gemm_small for batched decode, whole-capacity attention, one warp a
			// query in prefill attention where the tensor-core kernel is off).
			optIn := map[string]bool{"gemm_small": true, "attn_decode": true, "attn_prefill": true}
			for k := range asked {
				if strings.HasPrefix(k, "tail/") {
					continue // the last-block tails: entries a card's tunedb holds, no kernels to time
				}
				require.True(t, tuned[k], "lowering asks for %s, which autotune does not tune", k)
			}
			for k := range tuned {
				family, _, _ := strings.Cut(k, "/")
				require.True(t, asked[k] || optIn[family], "autotune tunes %s, which lowering never asks for", k)
			}
		})
	}
}

// TestLowerDefaults: Lower (what `memra compile` writes) applies the
// defaults NewBackend does: a batch program keeps RopeKV and the attention
// pair and its residual products quantise nothing, while a one-sequence
// program has RoPE in its QKV products, quantising epilogues and its small
// products split over two warps a row set; the environment's old kernel
// switches change nothing.
func TestLowerDefaults(t *testing.T) {
	m := tinyModel(t, "llama3-8b", "q4_k_m")
	families := func(p *codegen.Program) map[string]int {
		n := map[string]int{}
		for _, ln := range p.Launches {
			k := p.Kernels[ln.Kernel]
			n[k.Family]++
			if strings.Contains(k.Name, "_qo_") {
				n["quant-out"]++
			}
		}
		return n
	}
	t.Setenv("MEMRA_ROPE_IN_PRODUCT", "1")
	t.Setenv("MEMRA_QUANT_OUT", "1")
	t.Setenv("MEMRA_GEMV_SPLIT", "off")
	dec, _, err := cuda.Lower(m, cuda.BackendOptions{MaxSeqs: 4})
	require.NoError(t, err)
	f := families(dec)
	require.Equal(t, 2, f["rope_kv"])
	require.Equal(t, 4, f["attn_decode"], "two kernels a layer")
	require.Zero(t, f["quant-out"], "no quantising epilogue in batch programs")
	one, _, err := cuda.Lower(m, cuda.BackendOptions{MaxSeqs: 1})
	require.NoError(t, err)
	require.Zero(t, families(one)["rope_kv"], "RoPE in the QKV products of one-sequence programs")
	require.NotZero(t, families(one)["quant-out"])
	split := 0 // one-row XQ 2 products split over two warps a row set
	for _, k := range one.Kernels {
		if k.Family == "gemv" && strings.Contains(k.Name, "_t512_r8_u1_s1_l1_g1_w4") {
			split++
		}
	}
	require.NotZero(t, split, "the small products split K")
}
