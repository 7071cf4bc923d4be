package cuda

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/kv"
)

// plainSteps is a Backend without its PipelinedStepper: an engine over it
// steps as before pipelining. Its Close leaves the backend open.
type plainSteps struct{ b *Backend }

func (p plainSteps) Info() runtime.ModelInfo { return p.b.Info() }
func (p plainSteps) Step(ctx context.Context, batch []runtime.SeqStep) ([][]float32, error) {
	return p.b.Step(ctx, batch)
}
func (p plainSteps) StepGreedy(ctx context.Context, batch []runtime.SeqStep) ([]int32, error) {
	return p.b.StepGreedy(ctx, batch)
}
func (p plainSteps) StepSample(ctx context.Context, batch []runtime.SeqStep, params []*runtime.DeviceSampling) ([]runtime.Sampled, error) {
	return p.b.StepSample(ctx, batch, params)
}
func (p plainSteps) Free(seq runtime.SeqID) { p.b.Free(seq) }
func (p plainSteps) Close() error           { return nil }
func (p plainSteps) KVPool() *kv.Pool       { return p.b.KVPool() }

// pipeSteps is plainSteps with the backend's PipelinedStepper.
type pipeSteps struct{ plainSteps }

func (p pipeSteps) Launch(ctx context.Context, batch []runtime.SeqStep, params []*runtime.DeviceSampling, feed bool) error {
	return p.b.Launch(ctx, batch, params, feed)
}
func (p pipeSteps) Collect(ctx context.Context) ([]int32, []runtime.Sampled, error) {
	return p.b.Collect(ctx)
}
func (p pipeSteps) DeviceTimes() (int64, time.Duration, time.Duration) { return p.b.DeviceTimes() }

// TestGPUPipelinedExact: on the GPU, decode steps launched before the host
// has the tokens of the step before them (fed on the device: the argmax,
// or the sampled token through a strided copy) give the tokens and
// logprobs of plain steps, greedy and sampled at temperature 1 with
// seeds, one request alone and four together.
func TestGPUPipelinedExact(t *testing.T) {
	gpuOrSkip(t)
	for name, open := range gpuEngineModels(t) {
		t.Run(name, func(t *testing.T) {
			b, vocab := open()
			var reqs []runtime.Request
			for i, p := range prompts(vocab, 4, 60, 23) {
				reqs = append(reqs, runtime.Request{Prompt: p, MaxTokens: 40, IgnoreEOS: true})
				s := uint64(1000 + i)
				reqs = append(reqs, runtime.Request{Prompt: p, MaxTokens: 40, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2,
					Sampling: runtime.SamplingParams{Temperature: 1, TopP: 0.95, Seed: &s}})
			}
			run := func(be runtime.Backend, reqs []runtime.Request) ([][]int32, [][]float32, runtime.Stats) {
				e := runtime.NewEngine(be, nil, runtime.EngineConfig{MaxRunning: 8, NoPrefixCache: true})
				defer e.Close()
				// queued at once: the steps hold the same sequences in both runs
				// (the default configuration's products depend on a step's width)
				chans, err := e.SubmitGroup(context.Background(), reqs)
				require.NoError(t, err)
				toks, lps := make([][]int32, len(reqs)), make([][]float32, len(reqs))
				for i, ch := range chans {
					for ev := range ch {
						require.NoError(t, ev.Err)
						for _, g := range ev.Tokens {
							toks[i] = append(toks[i], g.Token)
							lps[i] = append(lps[i], g.Logprob)
						}
					}
				}
				return toks, lps, e.Stats()
			}
			for _, set := range [][]runtime.Request{reqs[:1], reqs[1:2], reqs[:4], reqs[4:]} {
				want, wantLP, _ := run(plainSteps{b}, set)
				got, gotLP, st := run(pipeSteps{plainSteps{b}}, set)
				require.Equal(t, want, got, "%d requests", len(set))
				require.Equal(t, wantLP, gotLP, "%d requests: logprobs", len(set))
				require.Positive(t, st.FedSteps, "steps were fed on the device")
				// each collected step timed on the device, its launches after its inputs
				require.GreaterOrEqual(t, st.DeviceSteps, st.FedSteps)
				require.Positive(t, st.DeviceStepSeconds)
				require.Less(t, st.DeviceInputSeconds, st.DeviceStepSeconds)
			}
		})
	}
}
