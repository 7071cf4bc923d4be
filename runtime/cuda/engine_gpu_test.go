package cuda

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/runtime/synth"
)

// engineOn runs backend b behind an engine of maxRunning sequences.
func engineOn(t *testing.T, b *Backend, maxRunning int, spec runtime.SpecConfig) *runtime.Engine {
	t.Helper()
	e := runtime.NewEngine(b, nil, runtime.EngineConfig{MaxRunning: maxRunning, Spec: spec})
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// greedy runs reqs together on e and returns each one's tokens and usage.
func greedy(t *testing.T, e *runtime.Engine, reqs []runtime.Request) ([][]int32, []runtime.Usage) {
	t.Helper()
	chans := make([]<-chan runtime.Event, len(reqs))
	for i, r := range reqs {
		ch, err := e.Submit(context.Background(), r)
		require.NoError(t, err)
		chans[i] = ch
	}
	toks, usage := make([][]int32, len(reqs)), make([]runtime.Usage, len(reqs))
	for i, ch := range chans {
		for ev := range ch {
			require.NoError(t, ev.Err)
			for _, g := range ev.Tokens {
				toks[i] = append(toks[i], g.Token)
			}
			usage[i] = ev.Usage
		}
	}
	return toks, usage
}

// gpuEngineModels are the models the engine tests run: the embedded
// stories260K (float weights) and a synthesized llama3-8b q4_k_m of two
// layers, in the default class (int8: the one-row int8 products, and at
// every other width kernels that add each row's terms in their order) and
// the f16 one (the f16 tensor-core products at every width).
func gpuEngineModels(t *testing.T) map[string]func() (*Backend, int) {
	return map[string]func() (*Backend, int){
		"stories260K": func() (*Backend, int) {
			m, err := builtin.Open()
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			b := gpuBackend(t, m, BackendOptions{MaxSeqs: 16})
			return b, b.Info().VocabSize
		},
		"llama3-8b-q4_k_m": func() (*Backend, int) {
			m := synthModel(t, "llama3-8b", "q4_k_m", synth.WeightsFloat)
			b := gpuBackend(t, m, BackendOptions{MaxSeqs: 16})
			return b, b.Info().VocabSize
		},
		"llama3-8b-q4_k_m/f16": func() (*Backend, int) {
			m := synthModel(t, "llama3-8b", "q4_k_m", synth.WeightsFloat)
			b := gpuBackend(t, m, BackendOptions{MaxSeqs: 16, Numerics: NumericsF16})
			return b, b.Info().VocabSize
		},
	}
}

// TestGPUPrefixCacheExact: on the GPU, a prompt served from the prefix
// cache gives the greedy tokens it gave computed cold, alone and with
// other requests beside it.
func TestGPUPrefixCacheExact(t *testing.T) {
	gpuOrSkip(t)
	for name, open := range gpuEngineModels(t) {
		t.Run(name, func(t *testing.T) {
			b, vocab := open()
			e := engineOn(t, b, 8, runtime.SpecConfig{})
			ps := prompts(vocab, 4, 150, 21)
			var reqs []runtime.Request
			for _, p := range ps {
				reqs = append(reqs, runtime.Request{Prompt: p, MaxTokens: 32, IgnoreEOS: true})
			}
			cold, cu := greedy(t, e, reqs[:1])
			warm, wu := greedy(t, e, reqs[:1])
			require.Zero(t, cu[0].CachedTokens)
			require.Positive(t, wu[0].CachedTokens)
			require.Equal(t, cold, warm, "alone: from the cache as cold")
			together, _ := greedy(t, e, reqs)
			require.Equal(t, cold[0], together[0], "beside three others, its prompt from the cache")
		})
	}
}

// TestGPUSpecExact: on the GPU, greedy output is the same with n-gram
// speculative decoding as without, one request alone and eight together.
func TestGPUSpecExact(t *testing.T) {
	gpuOrSkip(t)
	for name, open := range gpuEngineModels(t) {
		t.Run(name, func(t *testing.T) {
			b, vocab := open()
			// one backend, two engines in turn would each own it: speculation
			// is turned off per request instead
			e := engineOn(t, b, 16, runtime.SpecConfig{Mode: "ngram", MaxDraft: 4, MaxBatch: 8})
			var reqs, offReqs []runtime.Request
			no := false
			for _, p := range prompts(vocab, 8, 40, 22) {
				p = append(append(p, p...), p[:min(8, len(p))]...) // told twice, then begun again: drafts are found
				reqs = append(reqs, runtime.Request{Prompt: p, MaxTokens: 48, IgnoreEOS: true})
				r := reqs[len(reqs)-1]
				r.Speculative = &no
				offReqs = append(offReqs, r)
			}
			want, _ := greedy(t, e, offReqs[:1])
			got, _ := greedy(t, e, reqs[:1])
			require.Equal(t, want, got, "alone")
			require.Positive(t, e.Stats().SpecDrafted)
			wantAll, _ := greedy(t, e, offReqs)
			gotAll, _ := greedy(t, e, reqs)
			require.Equal(t, wantAll, gotAll, "eight together")
		})
	}
}

// TestGPUBatchWidthsExact: on the GPU, one sequence's greedy tokens alone
// equal its tokens in batches of 2, 3, 8, 16 and 64 (the others' prompts
// of other lengths), byte for byte, with no prefix cache between the
// runs, in the default class (int8) and the f16 one (the off class makes
// no such promise); a failure
// names the widths whose tokens part.
func TestGPUBatchWidthsExact(t *testing.T) {
	gpuOrSkip(t)
	for _, c := range []struct {
		name     string
		numerics Numerics
		preset   string
		tails    bool // the one-sequence program's last-block tails on (family "tail")
		pick     codegen.ArmPicker
	}{{"default", NumericsDefault, "llama3-8b", false, nil}, {"f16", NumericsF16, "llama3-8b", false, nil},
		// the batch products loading each activation row one row ahead
		// (GEMVArm.Prefetch): 2 to 15 rows run them
		{"prefetch", NumericsDefault, "llama3-8b", false, pickPrefetch},
		// a decode program of codegen.NarrowSeqs sequences with the
		// one-sequence program's quantising epilogues and RoPE in the QKV
		// products (the narrow tails), widths to 8
		{"narrow", NumericsDefault, "llama3-8b", false, pickNarrow},
		// a mixture of experts: alone, the one-sequence program sums the
		// experts in the down product (MoEShape.Sum); in batches MoESum does
		{"moe-default", NumericsDefault, "qwen3-30b-a3b", false, nil},
		{"gemma-default", NumericsDefault, "gemma3-12b", false, nil},
		// with the tails: alone, the QKV products do RoPE and the q/k norms
		// (XQEnds.HeadRope), the summing down product the next XQuant
		// (MoEShape.QuantNext), Gemma's output and down products the
		// post-norms (XQEnds.PostNorm); in batches their launches do
		{"moe-tails", NumericsDefault, "qwen3-30b-a3b", true, nil},
		{"gemma-tails", NumericsDefault, "gemma3-12b", true, nil}} {
		name := c.name
		t.Run(name, func(t *testing.T) {
			opts := BackendOptions{MaxSeqs: 64, Numerics: c.numerics}
			if c.tails {
				opts.Pick = pickTails
			}
			if c.pick != nil {
				opts.Pick = c.pick
			}
			if c.name == "narrow" {
				opts.MaxSeqs = codegen.NarrowSeqs
			}
			e, reqs := widthsEngine(t, c.preset, opts, opts.MaxSeqs)
			alone, _ := greedy(t, e, reqs[:1])
			var parted []int
			for _, w := range []int{2, 3, 8, 16, 64} {
				if w > opts.MaxSeqs {
					continue
				}
				got, _ := greedy(t, e, reqs[:w])
				if !slices.Equal(alone[0], got[0]) {
					parted = append(parted, w)
					t.Logf("width %d: first difference at token %d", w, firstTokenDiff(alone[0], got[0]))
				}
			}
			require.Empty(t, parted, "%s: greedy tokens alone differ from those in batches of these widths", name)
		})
	}
}

// TestGPUInt8OneProgram: in the int8 class, a lone sequence's greedy
// tokens are those it has beside others with each of the one-sequence
// program's fusions taken away in turn: the whole program (one row runs
// the decode program), RoPE in the QKV products, and each producer that
// quantises in its epilogue (the residual products for the next norm,
// the gate/up products for the down product, the attention combine for
// the output projection). Each of these parts must keep the floats of
// the launches it replaces, so each case must pass; a failure names the
// fusion that does not.
func TestGPUInt8OneProgram(t *testing.T) {
	gpuOrSkip(t)
	for _, c := range []struct {
		name string
		diag oneDiag
	}{{"no-one-program", oneDiag{noOne: true}}, {"one-program-rope-apart", oneDiag{oneNoRope: true}},
		{"one-program-norm-quantised-apart", oneDiag{oneNoQuantOut: codegen.QuantOutNorm}},
		{"one-program-swiglu-quantised-apart", oneDiag{oneNoQuantOut: codegen.QuantOutSwiGLU}},
		{"one-program-attention-quantised-apart", oneDiag{oneNoQuantOut: codegen.QuantOutAttn}},
		{"one-program-all-apart", oneDiag{oneNoRope: true, oneNoQuantOut: codegen.QuantOutNorm | codegen.QuantOutSwiGLU | codegen.QuantOutAttn}}} {
		t.Run(c.name, func(t *testing.T) {
			e, reqs := widthsEngine(t, "llama3-8b", BackendOptions{MaxSeqs: 16, Numerics: NumericsInt8, diag: c.diag}, 3)
			alone, _ := greedy(t, e, reqs[:1])
			got, _ := greedy(t, e, reqs)
			require.Equal(t, alone[0], got[0], "%s: first difference at token %d", c.name, firstTokenDiff(alone[0], got[0]))
		})
	}
}

// TestGPUDecodeFusedCombine: decode attention with its combine in the
// partial kernel (codegen.DecodeArm.Fuse, the block that finishes a kv
// head last combines it) gives the greedy tokens of the two launches it
// replaces, alone and in a batch of three, where the arms differ in that
// alone: Live 4's 32-key splits (qwen3-30b-a3b's 4 kv heads: 8 query
// heads a combine) and the default 128 (llama3-8b). The one-sequence
// program's tails are on: the QKV product before attention takes tickets
// too (each launch its own counters; sharing them gave NaN logits).
func TestGPUDecodeFusedCombine(t *testing.T) {
	gpuOrSkip(t)
	for _, c := range []struct {
		preset string
		arm    codegen.DecodeArm
	}{{"llama3-8b", codegen.DefaultDecodeLiveArm}, {"qwen3-30b-a3b", codegen.DecodeArm{Threads: 256, Chunk: 32, Live: 4}}} {
		t.Run(c.preset, func(t *testing.T) {
			tokens := map[bool][][]int32{}
			for _, fuse := range []bool{false, true} {
				arm := c.arm
				arm.Fuse = fuse
				pick := func(family, class string) (codegen.Point, bool) {
					if family == "tail" {
						return pickTails(family, class)
					}
					return arm.Point(), family == "attn_decode_live"
				}
				e, reqs := widthsEngine(t, c.preset, BackendOptions{MaxSeqs: 4, Pick: pick}, 3)
				alone, _ := greedy(t, e, reqs[:1])
				three, _ := greedy(t, e, reqs)
				tokens[fuse] = append(alone, three...)
			}
			for i := range tokens[false] {
				require.Equal(t, tokens[false][i], tokens[true][i], "sequence %d: first difference at token %d", i, firstTokenDiff(tokens[false][i], tokens[true][i]))
			}
		})
	}
}

// widthsEngine is an engine of opts.MaxSeqs running sequences (no prefix
// cache) over the synthesized two-layer llama3-8b q4_k_m, and n greedy
// requests of 48 tokens whose prompts shorten from 330 tokens.
func widthsEngine(t *testing.T, preset string, opts BackendOptions, n int) (*runtime.Engine, []runtime.Request) {
	m := synthModel(t, preset, "q4_k_m", synth.WeightsFloat)
	b := gpuBackend(t, m, opts)
	e := runtime.NewEngine(b, nil, runtime.EngineConfig{MaxRunning: opts.MaxSeqs, NoPrefixCache: true})
	t.Cleanup(func() { _ = e.Close() })
	var reqs []runtime.Request
	for _, p := range prompts(b.Info().VocabSize, n, 330, 23) {
		reqs = append(reqs, runtime.Request{Prompt: p, MaxTokens: 48, IgnoreEOS: true})
	}
	return e, reqs
}

func firstTokenDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// pickTails is a BackendOptions.Pick that turns the one-sequence
// program's last-block tails on (family "tail", as a card's tunedb entries
// would) and picks nothing else.
func pickTails(family, class string) (codegen.Point, bool) {
	return codegen.TailArm{On: true}.Point(), family == "tail"
}

// pickNarrow turns the narrow tails on (codegen.TailNarrowQuantOut,
// TailNarrowRope) and picks nothing else.
func pickNarrow(family, class string) (codegen.Point, bool) {
	return codegen.TailArm{On: true}.Point(), family == "tail" && (class == codegen.TailNarrowQuantOut || class == codegen.TailNarrowRope)
}

// pickPrefetch picks the untuned batch arm with GEMVArm.Prefetch for every
// product's batch class, and nothing else.
func pickPrefetch(family, class string) (codegen.Point, bool) {
	a := codegen.DefaultXQGlobalBatchArm
	a.Prefetch = 1
	return a.Point(), family == "gemv" && strings.HasSuffix(class, "_batch")
}
