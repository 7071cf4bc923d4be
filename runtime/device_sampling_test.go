package runtime

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// samplingFake is fakeBackend plus SamplingStepper. Its "device" applies a
// DeviceSampling's steps 1–4 (applyDevice) and takes the argmax, lowest id
// on ties (the kernel itself is checked in runtime/cuda), with the
// logprobs of the raw logits; entries without params get their logits.
// It records every entry's params.
type samplingFake struct {
	*fakeBackend
	// code, when set, replaces the device's token of an entry (to report
	// SampledNaN and the like).
	code func(d *DeviceSampling) (int32, bool)

	mu           sync.Mutex
	steps, calls int
	seen         []DeviceSampling // each entry the device sampled, in order
	host         int              // entries given back as logits
}

func (f *samplingFake) Step(ctx context.Context, batch []SeqStep) ([][]float32, error) {
	f.mu.Lock()
	f.steps++
	f.mu.Unlock()
	return f.fakeBackend.Step(ctx, batch)
}

func (f *samplingFake) StepSample(ctx context.Context, batch []SeqStep, params []*DeviceSampling) ([]Sampled, error) {
	logits, err := f.fakeBackend.Step(ctx, batch)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	out := make([]Sampled, len(batch))
	for i, x := range logits {
		if x == nil {
			continue
		}
		d := params[i]
		if d == nil {
			out[i].Logits = x
			f.host++
			continue
		}
		f.seen = append(f.seen, DeviceSampling{Params: d.Params, Seed: d.Seed, Index: d.Index, Masked: d.Masked,
			Logprobs: d.Logprobs, TopLogprobs: d.TopLogprobs, Mask: slices.Clone(d.Mask)})
		tok := int32(-1)
		best := float32(math.Inf(-1))
		for j, v := range applyDevice(x, d) {
			if v > best {
				tok, best = int32(j), v
			}
		}
		out[i].Token = tok
		if c, ok := f.code(d); ok {
			out[i].Token = c
		}
		if d.Logprobs && tok >= 0 {
			out[i].Logprob, out[i].Top = Logprobs(x, tok, d.TopLogprobs)
		}
	}
	return out, nil
}

var _ SamplingStepper = (*samplingFake)(nil)

func newSamplingFake(vocab int, logits func([]int32) []float32) *samplingFake {
	return &samplingFake{fakeBackend: newFakeBackend(vocab, 64, logits), code: func(*DeviceSampling) (int32, bool) { return 0, false }}
}

// TestEngineDeviceSampling: the engine sends every step to StepSample and
// the device's tokens and logprobs reach the events exactly as the host's
// sampling of the same greedy requests gives them (bias, penalties over
// the window, a bitset mask that changes with every token, logprobs);
// a mask that can only Apply itself is sampled on the host from the
// logits StepSample returns, in the same steps.
func TestEngineDeviceSampling(t *testing.T) {
	const vocab = 64
	greedy := func(i int) Request {
		return Request{Prompt: []int32{int32(1 + i), int32(2 + i%3)}, MaxTokens: 8 + i}
	}
	with := func(i int, f func(*Request)) Request {
		r := greedy(i)
		f(&r)
		return r
	}
	reqs := func() []Request {
		return []Request{
			with(0, func(r *Request) { r.Sampling.LogitBias = map[int32]float32{3: 2, 9: -1, 63: 5} }),
			with(1, func(r *Request) {
				r.Sampling.RepeatPenalty, r.Sampling.PresencePenalty, r.Sampling.FrequencyPenalty, r.Sampling.PenaltyLastN = 1.3, 0.4, 0.2, 4
			}),
			with(2, func(r *Request) { r.Mask = newWalkMask(vocab, 7) }),
			with(3, func(r *Request) { r.Logprobs, r.TopLogprobs = true, 3 }),
			with(4, func(r *Request) { r.Mask = applyOnly{newWalkMask(vocab, 9)} }),
			with(5, func(r *Request) { r.Sampling.Temperature = -1; r.TopLogprobs = 2 }),
		}
	}
	want := runAllResults(t, newFakeBackend(vocab, 64, hashLogits(vocab)), hashVocab(vocab), reqs())
	f := newSamplingFake(vocab, hashLogits(vocab))
	got := runAllResults(t, f, hashVocab(vocab), reqs())
	require.Equal(t, want, got)
	for _, r := range got {
		require.NoError(t, r.final.Err)
	}
	require.Zero(t, f.steps, "every step went through StepSample")
	require.Positive(t, f.calls)
	require.Equal(t, len(want[4].toks), f.host, "the Apply-only mask's tokens were sampled on the host, one a step")
	var masked, lp int
	for _, d := range f.seen {
		if d.Masked {
			masked++
		}
		if d.Logprobs {
			lp++
			require.Contains(t, []int{2, 3}, d.TopLogprobs)
		}
	}
	require.Equal(t, len(want[2].toks), masked, "the bitset mask went to the device")
	require.Equal(t, len(want[3].toks)+len(want[5].toks), lp)
}

// TestEngineDeviceSamplingLogprobs: the device's logprobs and alternatives
// are what the events carry, token by token.
func TestEngineDeviceSamplingLogprobs(t *testing.T) {
	const vocab = 40
	f := newSamplingFake(vocab, hashLogits(vocab))
	e := newEngine(f, hashVocab(vocab), nil, EngineConfig{})
	defer e.Close()
	ch, err := e.Submit(context.Background(), Request{Prompt: []int32{5, 6}, MaxTokens: 5, Logprobs: true, TopLogprobs: 4})
	require.NoError(t, err)
	var toks []GeneratedToken
	for ev := range ch {
		require.NoError(t, ev.Err)
		toks = append(toks, ev.Tokens...)
	}
	require.Len(t, toks, 5)
	ref := newFakeBackend(vocab, 64, hashLogits(vocab))
	hist := []int32{5, 6}
	for _, g := range toks {
		logits := ref.logits(hist)
		lp, top := Logprobs(logits, g.Token, 4)
		require.Equal(t, lp, g.Logprob)
		require.Len(t, g.Top, 4)
		for j := range top {
			require.Equal(t, top[j].Token, g.Top[j].Token)
			require.Equal(t, top[j].Logprob, g.Top[j].Logprob)
			require.Equal(t, []byte(hashVocab(vocab).pieces[top[j].Token]), g.Top[j].Bytes)
		}
		hist = append(hist, g.Token)
	}
	require.Zero(t, f.steps)
}

// TestEngineDeviceSamplingSeeds: a sampled request's device draws carry
// its seed and count its tokens from 0; an unseeded one gets a seed of its
// own.
func TestEngineDeviceSamplingSeeds(t *testing.T) {
	const vocab = 32
	f := newSamplingFake(vocab, hashLogits(vocab))
	reqs := []Request{
		{Prompt: []int32{1}, MaxTokens: 4, Sampling: SamplingParams{Temperature: 0.8, TopK: 5, TopP: 0.9, MinP: 0.05, Seed: seed(77)}},
		{Prompt: []int32{2}, MaxTokens: 4, Sampling: SamplingParams{Temperature: 0.8}},
	}
	runAll(t, f, hashVocab(vocab), reqs)
	bySeed := map[uint64][]uint64{}
	for _, d := range f.seen {
		bySeed[d.Seed] = append(bySeed[d.Seed], d.Index)
		require.Equal(t, float32(0.8), d.Params.Temperature)
	}
	require.Equal(t, []uint64{0, 1, 2, 3}, bySeed[77])
	require.Len(t, bySeed, 2)
	for s, idx := range bySeed {
		require.Equal(t, []uint64{0, 1, 2, 3}, idx, "seed %d", s)
	}
}

// TestEngineDeviceSamplingErrors: the device's codes end a request as the
// host's and the greedy path's errors do: a NaN is a backend error naming
// it, no candidate is ErrNoCandidates, no finite logit without a mask is
// a backend error; the other requests go on.
func TestEngineDeviceSamplingErrors(t *testing.T) {
	const vocab = 32
	for _, tc := range []struct {
		name string
		code int32
		mask bool
		is   error
		says string
	}{
		{"nan", SampledNaN, false, ErrBackend, "NaN"},
		{"none", SampledNone, false, ErrNoCandidates, ""},
		{"no finite", SampledNoFinite, false, ErrBackend, "no finite logit"},
		{"no finite under a mask", SampledNoFinite, true, ErrNoCandidates, ""},
		{"outside the vocabulary", vocab, false, ErrBackend, "sampled token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSamplingFake(vocab, hashLogits(vocab))
			f.code = func(d *DeviceSampling) (int32, bool) { return tc.code, d.Params.TopK == 7 && d.Index == 1 }
			bad := Request{Prompt: []int32{3}, MaxTokens: 5, Sampling: SamplingParams{TopK: 7}}
			if tc.mask {
				bad.Mask = newWalkMask(vocab, 3)
			}
			got := runAllResults(t, f, hashVocab(vocab), []Request{bad, {Prompt: []int32{4}, MaxTokens: 5}})
			require.ErrorIs(t, got[0].final.Err, tc.is)
			require.ErrorContains(t, got[0].final.Err, tc.says)
			require.Len(t, got[0].toks, 1, "one token before the failing step")
			require.NoError(t, got[1].final.Err)
			require.Len(t, got[1].toks, 5)
		})
	}
}
