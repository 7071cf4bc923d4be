package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// stepPipe runs each Launch at once on the CPU backend (its entries' tokens
// replaced by the step before's choices where fed) and queues the result
// for Collect: what a device that pipelines gives, in launch order.
type stepPipe struct {
	*cpu.Backend
	queue         [][]int32
	last          []int32
	launched, fed int
	pending, most int
}

func (p *stepPipe) Launch(ctx context.Context, batch []runtime.SeqStep, params []*runtime.DeviceSampling, feed bool) error {
	if params != nil {
		return runtime.ErrNotPipelined
	}
	if p.pending == 2 {
		return errors.New("two launched steps wait for Collect")
	}
	b := slices.Clone(batch)
	for i := range b {
		if len(b[i].Tokens) != 1 || b[i].Pages == nil {
			return runtime.ErrNotPipelined
		}
		if feed {
			b[i].Tokens = []int32{p.last[i]}
			p.fed++
		}
	}
	logits, err := p.Backend.Step(ctx, b)
	if err != nil {
		return err
	}
	ids := make([]int32, len(logits))
	for i, l := range logits {
		ids[i] = int32(runtime.Argmax(l))
	}
	p.last = ids
	p.queue = append(p.queue, ids)
	p.launched++
	p.pending++
	p.most = max(p.most, p.pending)
	return nil
}

func (p *stepPipe) Collect(context.Context) ([]int32, []runtime.Sampled, error) {
	if len(p.queue) == 0 {
		return nil, nil, errors.New("nothing launched")
	}
	ids := p.queue[0]
	p.queue = p.queue[1:]
	p.pending--
	return ids, nil, nil
}

// decodeSteps pipelined (each step launched before the one before it is
// collected, fed its tokens) ends on the tokens the plain steps do, over
// pages of the backend's pool, and gives them back.
func TestDecodeStepsPipelined(t *testing.T) {
	m, err := builtin.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	prompt := []int32{1, 400, 300, 200, 100}
	const gen = 12
	run := func(b runtime.Backend, pipelined bool) []int32 {
		d, err := benchBatch(ctx, b, prompt, 3, gen, pipelined)
		require.NoError(t, err)
		require.Positive(t, d)
		// the tokens after gen steps: one more plain step from where the run ended shows them
		seqs, next := []runtime.SeqID{100, 101, 102}, []int32{1, 1, 1}
		pages, release, err := benchPages(b, 3, len(prompt)+gen, pipelined)
		require.NoError(t, err)
		defer release()
		for i, s := range seqs {
			_, err := b.Step(ctx, []runtime.SeqStep{{Seq: s, Tokens: prompt, Pages: pages[i]}})
			require.NoError(t, err)
		}
		require.NoError(t, decodeSteps(ctx, b, seqs, pages, len(prompt), next, gen, pipelined))
		for _, s := range seqs {
			b.Free(s)
		}
		return next
	}
	plain, err := cpu.New(m, cpu.Options{MaxSeqs: 4, Threads: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	want := run(plain, false)

	b, err := cpu.New(m, cpu.Options{MaxSeqs: 4, Threads: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	p := &stepPipe{Backend: b}
	free := b.KVPool().Available()
	got := run(p, true)
	require.Equal(t, want, got)
	require.Equal(t, 2*gen, p.launched)
	require.Equal(t, 2*(gen-1)*3, p.fed, "every entry of every step after the first fed on the device")
	require.Equal(t, 2, p.most, "a step launched before the one before it is collected")
	require.Empty(t, p.queue)
	require.Equal(t, free, b.KVPool().Available(), "the pages given back")
}

// --pipelined on the CPU backend (no pipelined decode) says so.
func TestBenchPipelinedNeedsGPU(t *testing.T) {
	cmd := newBenchCmd()
	var o, e bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs([]string{"--device", "cpu", "-p", "4", "-n", "2", "-r", "1", "--pipelined", "--no-progress", "--roofline=false"})
	err := cmd.Execute()
	require.ErrorIs(t, err, errNoPipelined)
}

// timedPipe is stepPipe reporting fixed device times.
type timedPipe struct {
	*stepPipe
	n int64
}

func (p *timedPipe) DeviceTimes() (int64, time.Duration, time.Duration) {
	return p.n, time.Duration(p.n) * 10 * time.Microsecond, time.Duration(p.n) * 2 * time.Millisecond
}

// The device times of a pipelined bench's steps: their mean since it
// started, inputs and launches apart; nothing for a plain bench.
func TestDeviceTimesReport(t *testing.T) {
	p := &timedPipe{n: 5}
	require.Nil(t, deviceTimesOf(p, false))
	d := deviceTimesOf(p, true)
	require.NotNil(t, d)
	p.n = 15
	var out bytes.Buffer
	d.report(&out)
	require.Equal(t, "device: 10 pipelined steps timed, 2010.0 µs a step (inputs 10.0 µs, launches and results 2000.0 µs)\n", out.String())
	var none bytes.Buffer
	deviceTimesOf(p, true).report(&none)
	require.Empty(t, none.String(), "no steps since")
}
