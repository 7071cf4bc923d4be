package runtime_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/runtime/synth"
)

// specEngine is the embedded stories260K model on the CPU backend with
// speculative decoding spec (a draft mode gets a second stories260K
// backend, wrapped by wrap when it is set).
func specEngine(t *testing.T, spec runtime.SpecConfig, maxRunning int, wrap func(runtime.Backend) runtime.Backend) *runtime.Engine {
	t.Helper()
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	b, err := cpu.New(m, cpu.Options{Threads: 2})
	require.NoError(t, err)
	if spec.Mode == "draft" {
		d, err := cpu.New(m, cpu.Options{Threads: 1})
		require.NoError(t, err)
		spec.Draft = d
		if wrap != nil {
			spec.Draft = wrap(d)
		}
	}
	require.NoError(t, spec.Check())
	e := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: maxRunning, Spec: spec})
	t.Cleanup(func() { e.Close() })
	return e
}

// copyPrompt asks the model to go on with a passage it was given twice:
// the n-gram drafter finds its continuation in the prompt.
func copyPrompt(e *runtime.Engine, i int) []int32 {
	text := fmt.Sprintf("Once upon a time, there was a little girl named Lily%d. She loved to play outside in the park. ", i)
	return e.Tokenizer().Encode(text+text+"Once upon a time, there was", true, false)
}

// runAll submits reqs together and returns each one's tokens.
func runAll(t *testing.T, e *runtime.Engine, reqs []runtime.Request) [][]int32 {
	t.Helper()
	chans := make([]<-chan runtime.Event, len(reqs))
	for i, r := range reqs {
		ch, err := e.Submit(context.Background(), r)
		require.NoError(t, err)
		chans[i] = ch
	}
	out := make([][]int32, len(reqs))
	for i, ch := range chans {
		_, out[i], _ = generate(t, ch)
	}
	return out
}

// TestSpecGreedyExact: greedy output is the same token for token with
// speculation off and on, n-gram and draft model alike, for K = 1, 2, 4
// and 8 drafts, one request alone and eight together; and the drafts were
// really accepted (else the test proves nothing).
func TestSpecGreedyExact(t *testing.T) {
	off := specEngine(t, runtime.SpecConfig{}, 8, nil)
	var reqs []runtime.Request
	for i := range 8 {
		reqs = append(reqs, runtime.Request{Prompt: copyPrompt(off, i), MaxTokens: 48, IgnoreEOS: true})
	}
	want := runAll(t, off, reqs)
	for _, mode := range []string{"ngram", "draft"} {
		for _, k := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/k%d", mode, k), func(t *testing.T) {
				// room for every sequence's drafts beside it
				e := specEngine(t, runtime.SpecConfig{Mode: mode, MaxDraft: k}, 8*(k+1), nil)
				require.Equal(t, want[:1], runAll(t, e, reqs[:1]), "alone")
				alone := e.Stats().SpecAccepted
				require.Positive(t, alone)
				require.Equal(t, want, runAll(t, e, reqs), "eight together")
				st := e.Stats()
				require.Greater(t, st.SpecAccepted, alone, "the batch speculated too: %+v", st)
				require.LessOrEqual(t, st.SpecAccepted, st.SpecDrafted)
				require.Zero(t, st.KVPagesUsed)
			})
		}
	}
	// a request can turn it off
	e := specEngine(t, runtime.SpecConfig{Mode: "ngram"}, 40, nil)
	no := false
	r := reqs[0]
	r.Speculative = &no
	require.Equal(t, want[:1], runAll(t, e, []runtime.Request{r}))
	require.Zero(t, e.Stats().SpecDrafted)
}

// wrongDraft is a draft model whose greedy choice is the second best: the
// target rejects most of its drafts, so the rollback is exercised.
type wrongDraft struct{ runtime.Backend }

func (w wrongDraft) Step(ctx context.Context, batch []runtime.SeqStep) ([][]float32, error) {
	logits, err := w.Backend.Step(ctx, batch)
	for _, l := range logits {
		if len(l) > 0 {
			l[runtime.Argmax(l)] = float32(math.Inf(-1))
		}
	}
	return logits, err
}

// TestSpecRejectionsExact: a draft model that is mostly wrong still gives
// the target's greedy output.
func TestSpecRejectionsExact(t *testing.T) {
	off := specEngine(t, runtime.SpecConfig{}, 4, nil)
	on := specEngine(t, runtime.SpecConfig{Mode: "draft", MaxDraft: 4}, 20, func(b runtime.Backend) runtime.Backend { return wrongDraft{b} })
	var reqs []runtime.Request
	for i := range 4 {
		reqs = append(reqs, runtime.Request{Prompt: copyPrompt(off, i), MaxTokens: 40, IgnoreEOS: true})
	}
	require.Equal(t, runAll(t, off, reqs), runAll(t, on, reqs))
	st := on.Stats()
	require.Less(t, st.SpecAccepted, st.SpecDrafted/2, "mostly rejected: %+v", st)
}

// TestSpecSampledDistribution: at temperature 1 the first two generated
// tokens have the same joint distribution with n-gram speculation as
// without (two-sample χ² over the pairs seen; the second token is where
// the drafts are verified). A rule that accepted every draft would pile
// the pairs onto the drafted continuation and fail.
func TestSpecSampledDistribution(t *testing.T) {
	const n = 1500
	pairs := func(e *runtime.Engine) map[[2]int32]float64 {
		counts := map[[2]int32]float64{}
		prompt := copyPrompt(e, 0)
		for i := range n {
			seed := uint64(1000 + i)
			toks := runAll(t, e, []runtime.Request{{Prompt: prompt, MaxTokens: 3, IgnoreEOS: true,
				Sampling: runtime.SamplingParams{Temperature: 1, Seed: &seed}}})[0]
			require.Len(t, toks, 3)
			counts[[2]int32{toks[0], toks[1]}]++
		}
		return counts
	}
	off := pairs(specEngine(t, runtime.SpecConfig{}, 1, nil))
	e := specEngine(t, runtime.SpecConfig{Mode: "ngram", MaxDraft: 4}, 5, nil)
	on := pairs(e)
	require.Positive(t, e.Stats().SpecDrafted, "the second token was verified against drafts")
	// two-sample χ² over pairs seen at least 10 times in all, the rest pooled
	var x float64
	bins := 0
	var restA, restB float64
	for k := range merge(off, on) {
		a, b := off[k], on[k]
		if a+b < 10 {
			restA, restB = restA+a, restB+b
			continue
		}
		x += (a - b) * (a - b) / (a + b)
		bins++
	}
	if restA+restB > 0 {
		x += (restA - restB) * (restA - restB) / (restA + restB)
		bins++
	}
	df := float64(bins - 1)
	require.Greater(t, bins, 3)
	require.Less(t, x, df+4*math.Sqrt(2*df)+10, "χ² %.1f over %d bins", x, bins)
}

func merge(a, b map[[2]int32]float64) map[[2]int32]bool {
	out := map[[2]int32]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// TestSpecSynthExact: on a small synthesized qwen2.5 model (a real
// vocabulary of 151k tokens, random q8_0 weights), greedy output is the
// same with n-gram speculation as without, alone and four together.
func TestSpecSynthExact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qwen.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "qwen2.5-0.5b", Quant: "q8_0", Layers: 1, Dim: 64, FFN: 128, Context: 512})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	engine := func(spec runtime.SpecConfig, maxRunning int) *runtime.Engine {
		b, err := cpu.New(m, cpu.Options{Threads: 2})
		require.NoError(t, err)
		e := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: maxRunning, Spec: spec})
		t.Cleanup(func() { e.Close() })
		return e
	}
	off, on := engine(runtime.SpecConfig{}, 4), engine(runtime.SpecConfig{Mode: "ngram", MaxDraft: 4}, 20)
	var reqs []runtime.Request
	for i := range 4 {
		text := fmt.Sprintf("The quick brown fox %d jumps over the lazy dog. ", i)
		p := m.Tokenizer.Encode(text+text+"The quick brown", true, false)
		reqs = append(reqs, runtime.Request{Prompt: p, MaxTokens: 40, IgnoreEOS: true})
	}
	require.Equal(t, runAll(t, off, reqs[:1]), runAll(t, on, reqs[:1]), "alone")
	require.Equal(t, runAll(t, off, reqs), runAll(t, on, reqs), "four together")
	require.Positive(t, on.Stats().SpecDrafted)
}
