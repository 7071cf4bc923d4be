package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// fakeStage adds its index to every hidden value; the last stage turns the
// hidden row of each sequence's last token into one logit per width.
type fakeStage struct {
	info   StageInfo
	freed  []runtime.SeqID
	closed bool
	fail   error
	// started is told the micro-batch slot at the start of each step; when
	// gate is set the step waits for it before returning.
	started chan int
	gate    chan struct{}
	outs    [2][]float32
}

func (f *fakeStage) StageInfo() StageInfo { return f.info }

func (f *fakeStage) StepStage(ctx context.Context, slot int, batch []runtime.SeqStep, in Hidden) (Hidden, [][]float32, error) {
	if f.started != nil {
		f.started <- slot
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-time.After(5 * time.Second):
			return nil, nil, errors.New("gate never opened: the stages did not overlap")
		}
	}
	if f.fail != nil {
		return nil, nil, f.fail
	}
	E := f.info.Width
	var rows []float32
	if in == nil {
		for _, e := range batch {
			for _, tok := range e.Tokens {
				for range E {
					rows = append(rows, float32(tok))
				}
			}
		}
	} else {
		rows = append(rows, in.(HostHidden).Data...)
	}
	for i := range rows {
		rows[i] += float32(f.info.First)
	}
	if f.info.Last < f.info.Layers {
		f.outs[slot] = rows
		return HostHidden{Data: rows, E: E}, nil, nil
	}
	var logits [][]float32
	t := 0
	for _, e := range batch {
		t += len(e.Tokens)
		var l []float32
		if e.Logits {
			l = rows[(t-1)*E : t*E]
		}
		logits = append(logits, l)
	}
	return nil, logits, nil
}

func (f *fakeStage) Free(seq runtime.SeqID) { f.freed = append(f.freed, seq) }
func (f *fakeStage) Close() error           { f.closed = true; return nil }

func fakes(bounds ...int) []*fakeStage {
	var out []*fakeStage
	for i := 0; i+1 < len(bounds); i++ {
		out = append(out, &fakeStage{info: StageInfo{First: bounds[i], Last: bounds[i+1], Layers: bounds[len(bounds)-1], Width: 3,
			Model: runtime.ModelInfo{Device: "fake", VocabSize: 3}}})
	}
	return out
}

func asStages(fs []*fakeStage) []StageBackend {
	var out []StageBackend
	for _, f := range fs {
		out = append(out, f)
	}
	return out
}

func TestSplit(t *testing.T) {
	cases := []struct {
		n, parts int
		want     [][2]int
	}{
		{1, 2, [][2]int{{0, 1}}},
		{2, 2, [][2]int{{0, 1}, {1, 2}}},
		{5, 2, [][2]int{{0, 3}, {3, 5}}},
		{8, 2, [][2]int{{0, 4}, {4, 8}}},
		{3, 1, [][2]int{{0, 3}}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, Split(c.n, c.parts), "%d in %d", c.n, c.parts)
	}
}

func TestNewChecksStages(t *testing.T) {
	cases := []struct {
		name  string
		build func() []StageBackend
	}{
		{"one stage", func() []StageBackend { return asStages(fakes(0, 4)) }},
		{"gap", func() []StageBackend { f := fakes(0, 2, 4); f[1].info.First = 3; return asStages(f) }},
		{"short", func() []StageBackend { f := fakes(0, 2, 4); f[1].info.Last = 3; return asStages(f) }},
		{"width", func() []StageBackend { f := fakes(0, 2, 4); f[1].info.Width = 5; return asStages(f) }},
	}
	for _, c := range cases {
		_, err := New(c.build(), Options{})
		require.ErrorIs(t, err, ErrStages, c.name)
	}
}

// TestStepThroughStages checks the values through three fake stages, Free
// and Close reaching every stage, and errors naming their stage.
func TestStepThroughStages(t *testing.T) {
	fs := fakes(0, 1, 3, 6)
	b, err := New(asStages(fs), Options{})
	require.NoError(t, err)
	require.Equal(t, "fake+fake+fake", b.Info().Device)
	_, greedy := b.(runtime.GreedyStepper)
	require.False(t, greedy, "no greedy fast path without a GreedyStage")
	batch := []runtime.SeqStep{
		{Seq: 1, Tokens: []int32{5, 6}, Logits: true},
		{Seq: 2, Tokens: []int32{7}, Logits: false},
		{Seq: 3, Tokens: []int32{9, 10, 11}, Logits: true},
	}
	out, err := b.Step(context.Background(), batch)
	require.NoError(t, err)
	// Each stage adds its first layer: 0 + 1 + 3.
	require.Equal(t, [][]float32{{10, 10, 10}, nil, {15, 15, 15}}, out)

	b.Free(2)
	for _, f := range fs {
		require.Equal(t, []runtime.SeqID{2}, f.freed)
	}
	fs[1].fail = errors.New("boom")
	_, err = b.Step(context.Background(), batch)
	require.ErrorContains(t, err, "stage 1")
	require.ErrorContains(t, err, "boom")
	require.NoError(t, b.Close())
	for _, f := range fs {
		require.True(t, f.closed)
	}
	_, err = b.Step(context.Background(), batch)
	require.ErrorIs(t, err, ErrClosed)
}

// TestMicroBatchesOverlap makes stage 2's first micro-batch wait until
// stage 1 has started the second: it only finishes when the stages run
// concurrently.
func TestMicroBatchesOverlap(t *testing.T) {
	fs := fakes(0, 2, 4)
	fs[0].started = make(chan int, 4)
	fs[1].gate = make(chan struct{})
	var once sync.Once
	go func() {
		n := 0
		for range fs[0].started {
			n++
			if n == 2 {
				once.Do(func() { close(fs[1].gate) })
			}
		}
	}()
	b, err := New(asStages(fs), Options{MicroBatches: 2})
	require.NoError(t, err)
	var batch []runtime.SeqStep
	for i := range 4 {
		batch = append(batch, runtime.SeqStep{Seq: runtime.SeqID(i), Tokens: []int32{int32(i)}, Logits: true})
	}
	out, err := b.Step(context.Background(), batch)
	require.NoError(t, err)
	for i, l := range out {
		require.Equal(t, []float32{float32(i + 2), float32(i + 2), float32(i + 2)}, l, "sequence %d", i)
	}
	close(fs[0].started)
}

func TestBalancedSplit(t *testing.T) {
	cases := []struct {
		name string
		f    Footprint
		want int
	}{
		{"even", Footprint{Layer: []int64{10, 10, 10, 10}}, 2},
		{"big head", Footprint{Layer: []int64{10, 10, 10, 10}, Head: 20}, 1},
		{"big tail", Footprint{Layer: []int64{10, 10, 10, 10}, Tail: 20}, 3},
		{"two layers", Footprint{Layer: []int64{1, 100}}, 1},
	}
	for _, c := range cases {
		k, err := BalancedSplit(c.f)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, k, c.name)
	}
	_, err := BalancedSplit(Footprint{Layer: []int64{5}})
	require.ErrorIs(t, err, ErrStages)
	require.Equal(t, []int64{25, 40}, Footprint{Layer: []int64{10, 10, 10, 10}, Head: 5, Tail: 20}.StageBytes([]int{2}))
	require.NoError(t, CheckSplit(3, 4))
	require.ErrorIs(t, CheckSplit(4, 4), ErrStages)
	require.ErrorIs(t, CheckSplit(0, 4), ErrStages)
}

func TestParseDevices(t *testing.T) {
	d, err := ParseDevices("0, 1", 2)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, d)
	d, err = ParseDevices("0,0", 2)
	require.NoError(t, err)
	require.Equal(t, []int{0, 0}, d)
	for _, bad := range []string{"0", "0,1,2", "0,x", "-1,0", ""} {
		_, err := ParseDevices(bad, 2)
		require.ErrorIs(t, err, ErrStages, bad)
	}
}
