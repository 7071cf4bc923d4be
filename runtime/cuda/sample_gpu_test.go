package cuda

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
)

// gpuSampler runs one Sample kernel on the device.
type gpuSampler struct {
	dev   *Device
	vocab int
	arm   codegen.BlockArm
	fn    Function
}

func newGPUSampler(t *testing.T, dev *Device, vocab int, arm codegen.BlockArm) *gpuSampler {
	t.Helper()
	k, err := codegen.Sample(vocab, arm)
	require.NoError(t, err)
	nv, err := LoadNVRTC()
	require.NoError(t, err)
	img, err := nv.Compile(k.Source, k.Name+".cu", []string{ArchOption(dev.Info().Arch())})
	require.NoError(t, err, k.Name)
	g := &gpuSampler{dev: dev, vocab: vocab, arm: arm}
	require.NoError(t, dev.Do(func(c *Ctx) error {
		mod, err := c.LoadModule(img.Image())
		try(err)
		t.Cleanup(func() { _ = dev.Do(func(c *Ctx) error { return c.UnloadModule(mod) }) })
		g.fn, err = c.Function(mod, k.Name)
		return err
	}))
	return g
}

// run launches the kernel over rows of logits ([rows][vocab]) with the
// inputs of p (rows records), the output words filled with fill first,
// and returns the output words.
func (g *gpuSampler) run(t *testing.T, logits []float32, p *samplePack, fill uint32) []uint32 {
	t.Helper()
	rows := len(logits) / g.vocab
	require.Len(t, p.rec, rows*codegen.SampleRecordWords)
	out := make([]uint32, rows*codegen.SampleOutWords)
	for i := range out {
		out[i] = fill
	}
	err := g.dev.Do(func(c *Ctx) error {
		var ptrs []DevicePtr
		buf := func(data []byte) DevicePtr {
			p, err := c.Alloc(max(len(data), 256))
			try(err)
			ptrs = append(ptrs, p)
			if len(data) > 0 {
				try(c.CopyHtoD(p, data))
			}
			return p
		}
		defer func() {
			for _, p := range ptrs {
				_ = c.Free(p)
			}
		}()
		dl, dw := buf(f32bytes(logits)), buf(make([]byte, 4*len(logits)))
		dr, db, dp, dm := buf(u32bytes(p.rec)), buf(u32bytes(p.bias)), buf(u32bytes(p.pen)), buf(u32bytes(p.mask))
		do := buf(u32bytes(out))
		cfg := LaunchConfig{Grid: [3]uint32{uint32(rows), 1, 1}, Block: [3]uint32{uint32(g.arm.Threads), 1, 1}}
		try(c.Launch(g.fn, cfg, dl, dw, dr, db, dp, dm, do, rows))
		try(c.Synchronize())
		got := make([]byte, 4*len(out))
		try(c.CopyDtoH(got, do))
		for i := range out {
			out[i] = binary.LittleEndian.Uint32(got[4*i:])
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func u32bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// draws runs c.n draws of case c on the device, rows at a time (one token
// index a row), after mutate, and returns the counts and how many draws
// differ from the kernel's Go mirror at the same index.
func (g *gpuSampler) draws(t *testing.T, c sampleCase, mutate func(*runtime.DeviceSampling)) (map[int32]int, int) {
	const rows = 1000
	d := device(t, c.sampler(), g.vocab)
	if mutate != nil {
		mutate(d)
	}
	logits := slices.Repeat(c.logits, rows)
	counts, differ := map[int32]int{}, 0
	p := newSamplePack(g.vocab)
	for base := 0; base < c.n; base += rows {
		p.reset(rows)
		for s := range rows {
			d.Index = uint64(base + s)
			p.set(s, d)
		}
		out := g.run(t, logits, &p, 0)
		for s := range rows {
			tok := codegen.DecodeSampleOut(out[s*codegen.SampleOutWords:]).Token
			require.GreaterOrEqual(t, tok, int32(0))
			counts[tok]++
			d.Index = uint64(base + s)
			if tok != mirror(t, g.arm, c.logits, d).Token {
				differ++
			}
		}
	}
	return counts, differ
}

// TestGPUSampleKernel runs the sampling kernel on the device against the
// CPU sampler and its Go mirror: the distributions of the mirror's test
// settings (two-sample χ², and the temperature-twice mutant failing it),
// draws equal to the mirror's at the same seed and index (the device's
// expf may move a boundary by an ulp: at most 1 % may differ), greedy
// choices equal to the CPU's, logprobs, the same token for the same seed
// and index wherever the row sits, the error codes, inactive rows left
// alone, and a real vocabulary.
func TestGPUSampleKernel(t *testing.T) {
	gpuOrSkip(t)
	dev := deviceOrSkip(t)
	for _, arm := range []codegen.BlockArm{codegen.DefaultSampleArm, {Threads: 256}} {
		g := newGPUSampler(t, dev, 256, arm)
		t.Run(arm.String()+"/distribution", func(t *testing.T) {
			for _, c := range sampleCases() {
				counts, differ := g.draws(t, c, nil)
				x2, df := chiSquare2(c.cpuDraws(t), counts)
				t.Logf("%s: χ² %.1f over %d degrees of freedom (limit %.1f), %d of %d draws differ from the mirror", c.name, x2, df, chiSquareLimit(df), differ, c.n)
				require.Less(t, x2, chiSquareLimit(df), c.name)
				require.LessOrEqual(t, differ, c.n/100, c.name)
			}
			c := sampleCases()[0]
			counts, _ := g.draws(t, c, func(d *runtime.DeviceSampling) { d.Params.Temperature *= d.Params.Temperature })
			x2, df := chiSquare2(c.cpuDraws(t), counts)
			require.Greater(t, x2, chiSquareLimit(df), "the temperature-twice mutant passes")
		})
		t.Run(arm.String()+"/seeded", func(t *testing.T) {
			c := sampleCases()[3]
			d := device(t, c.sampler(), 256)
			other := device(t, sampleCases()[4].sampler(), 256)
			p := newSamplePack(256)
			p.reset(8)
			for s := range 8 {
				d.Index = uint64(s)
				p.set(s, d)
			}
			logits := slices.Repeat(c.logits, 8)
			first := g.run(t, logits, &p, 0)
			require.Equal(t, first, g.run(t, logits, &p, 0), "the same launch twice")
			// the same records behind other sequences, in reverse order
			q := newSamplePack(256)
			q.reset(16)
			rng := rand.New(rand.NewPCG(41, 42))
			mixed := make([]float32, 0, 16*256)
			for s := range 16 {
				if s%2 == 0 {
					q.set(s, other)
					row := slices.Clone(c.logits)
					rng.Shuffle(len(row), func(i, j int) { row[i], row[j] = row[j], row[i] })
					mixed = append(mixed, row...)
					continue
				}
				d.Index = uint64(7 - s/2)
				q.set(s, d)
				mixed = append(mixed, c.logits...)
			}
			second := g.run(t, mixed, &q, 0)
			for s := range 8 {
				require.Equal(t, codegen.DecodeSampleOut(first[s*codegen.SampleOutWords:]).Token,
					codegen.DecodeSampleOut(second[(2*(7-s)+1)*codegen.SampleOutWords:]).Token, "index %d", s)
			}
		})
	}
	t.Run("greedy, logprobs, codes", func(t *testing.T) {
		const vocab, rows = 1000, 64
		g := newGPUSampler(t, dev, vocab, codegen.DefaultSampleArm)
		rng := rand.New(rand.NewPCG(43, 44))
		logits := make([]float32, rows*vocab)
		for i := range logits {
			logits[i] = float32(rng.IntN(16)) / 4
		}
		p := newSamplePack(vocab)
		p.reset(rows)
		want := make([]int32, rows)
		tops := make([][]runtime.TokenLogprob, rows)
		for s := range rows - 4 {
			row := logits[s*vocab : (s+1)*vocab]
			sp := runtime.SamplingParams{RepeatPenalty: 1.2, PresencePenalty: 0.3, FrequencyPenalty: 0.1, PenaltyLastN: 30,
				LogitBias: map[int32]float32{int32(rng.IntN(vocab)): 3}}
			smp := runtime.NewSampler(sp)
			if s%2 == 0 {
				smp.SetMask(randomMask(rng, vocab, 0.3))
			}
			hist := make([]int32, 40)
			for i := range hist {
				hist[i] = int32(rng.IntN(vocab))
			}
			smp.AddPrompt(hist[:20])
			for _, h := range hist[20:] {
				smp.Accept(h)
			}
			tok, err := smp.Sample(row)
			require.NoError(t, err)
			want[s] = tok
			d := device(t, smp, vocab)
			d.Logprobs, d.TopLogprobs = true, 1+s%20
			_, tops[s] = runtime.Logprobs(row, tok, d.TopLogprobs)
			p.set(s, d)
		}
		// a NaN, a mask that leaves nothing, no finite logit, an inactive row
		n := rows - 4
		logits[n*vocab+17] = float32(math.NaN())
		p.set(n, &runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 1}})
		p.set(n+1, &runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 1}, Masked: true, Mask: make([]uint64, 16)})
		for i := range vocab {
			logits[(n+2)*vocab+i] = float32(math.Inf(-1))
		}
		p.set(n+2, &runtime.DeviceSampling{})
		out := g.run(t, logits, &p, 0xabcdabcd)
		for s := range n {
			r := codegen.DecodeSampleOut(out[s*codegen.SampleOutWords:])
			require.Equal(t, want[s], r.Token, "row %d", s)
			row := logits[s*vocab : (s+1)*vocab]
			lp, _ := runtime.Logprobs(row, r.Token, 0)
			require.InDelta(t, lp, r.Logprob, 1e-4)
			require.Len(t, r.TopIDs, len(tops[s]))
			for j, tl := range tops[s] {
				require.Equal(t, tl.Token, r.TopIDs[j], "row %d rank %d", s, j)
				require.InDelta(t, tl.Logprob, r.TopLogprobs[j], 1e-4)
			}
		}
		code := func(s int) int32 { return codegen.DecodeSampleOut(out[s*codegen.SampleOutWords:]).Token }
		require.Equal(t, int32(codegen.SampleNaN), code(n))
		require.Equal(t, int32(codegen.SampleNone), code(n+1))
		require.Equal(t, int32(codegen.SampleNoFinite), code(n+2))
		for _, w := range out[(n+3)*codegen.SampleOutWords:] {
			require.Equal(t, uint32(0xabcdabcd), w, "an inactive row's output is left alone")
		}
	})
	t.Run("llama3 vocabulary", func(t *testing.T) {
		const vocab, rows = 128256, 16
		g := newGPUSampler(t, dev, vocab, codegen.DefaultSampleArm)
		rng := rand.New(rand.NewPCG(45, 46))
		logits := make([]float32, rows*vocab)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
		}
		p := newSamplePack(vocab)
		p.reset(rows)
		ds := make([]*runtime.DeviceSampling, rows)
		for s := range rows {
			sp := []runtime.SamplingParams{{Temperature: 0.7, TopK: 50}, {Temperature: 1, TopP: 0.9}, {Temperature: 0.8, MinP: 0.05}, {}}[s%4]
			sp.Seed = new(uint64(s))
			ds[s] = device(t, runtime.NewSampler(sp), vocab)
			ds[s].TopLogprobs = 20
			p.set(s, ds[s])
		}
		out := g.run(t, logits, &p, 0)
		differ := 0
		for s := range rows {
			row := logits[s*vocab : (s+1)*vocab]
			got := codegen.DecodeSampleOut(out[s*codegen.SampleOutWords:])
			ref := mirror(t, codegen.DefaultSampleArm, row, ds[s])
			if s%4 == 3 {
				require.Equal(t, runtime.Argmax(row), got.Token, "row %d: greedy", s)
			}
			if got.Token != ref.Token {
				differ++
			}
			require.Equal(t, ref.TopIDs, got.TopIDs, "row %d", s)
		}
		require.LessOrEqual(t, differ, 1, "draws that differ from the mirror")
	})
}

// TestGPUStepSample: the backend's StepSample with greedy parameters gives
// StepGreedy's tokens (prefill and decode steps, graphs and plain
// launches), and StepGreedy after it still does (the sampling records are
// cleared); seeded sampling repeats itself; the logprobs are those of the
// logits of a twin sequence in the same step; an entry whose bias does not
// fit gets its logits.
func TestGPUStepSample(t *testing.T) {
	gpuOrSkip(t)
	m := openModel(t, storiesPath)
	bos := m.Tokenizer.BOS()
	ps := [][]int32{{bos}, {bos, 403, 407}, {bos, 261, 378, 432, 383}}
	ctx := context.Background()
	for _, o := range []BackendOptions{{MaxSeqs: 4}, {MaxSeqs: 4, NoGraphs: true}} {
		g := gpuBackend(t, m, o)
		vocab := g.Info().VocabSize
		// decode runs len(ps) sequences for 12 steps, choosing each step's tokens with pick
		decode := func(first runtime.SeqID, pick func(batch []runtime.SeqStep, step int) []int32) [][]int32 {
			out := make([][]int32, len(ps))
			batch := make([]runtime.SeqStep, len(ps))
			for i, p := range ps {
				batch[i] = runtime.SeqStep{Seq: first + runtime.SeqID(i), Tokens: p, Logits: true}
			}
			for step := range 12 {
				toks := pick(batch, step)
				for i := range batch {
					out[i] = append(out[i], toks[i])
					batch[i].Pos += len(batch[i].Tokens)
					batch[i].Tokens = []int32{toks[i]}
				}
			}
			for i := range batch {
				g.Free(batch[i].Seq)
			}
			return out
		}
		greedy := func(batch []runtime.SeqStep, _ int) []int32 {
			ids, err := g.StepGreedy(ctx, batch)
			require.NoError(t, err)
			return slices.Clone(ids)
		}
		sample := func(params func(i, step int) *runtime.DeviceSampling) func([]runtime.SeqStep, int) []int32 {
			return func(batch []runtime.SeqStep, step int) []int32 {
				pp := make([]*runtime.DeviceSampling, len(batch))
				for i := range pp {
					pp[i] = params(i, step)
				}
				res, err := g.StepSample(ctx, batch, pp)
				require.NoError(t, err)
				ids := make([]int32, len(res))
				for i, r := range res {
					require.Nil(t, r.Logits)
					require.True(t, r.Token >= 0 && int(r.Token) < vocab, "token %d", r.Token)
					ids[i] = r.Token
				}
				return ids
			}
		}
		want := decode(10, greedy)
		got := decode(20, sample(func(int, int) *runtime.DeviceSampling { return &runtime.DeviceSampling{} }))
		require.Equal(t, want, got, "%+v: greedy through the sampler", o)
		require.Equal(t, want, decode(30, greedy), "%+v: greedy after sampling", o)

		seeded := func(i, step int) *runtime.DeviceSampling {
			return &runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 0.9, TopK: 40, TopP: 0.95}, Seed: uint64(100 + i), Index: uint64(step)}
		}
		a := decode(40, sample(seeded))
		require.Equal(t, a, decode(50, sample(seeded)), "%+v: the same seeds, the same tokens", o)
		require.NotEqual(t, want, a, "sampling at temperature 0.9 follows the argmax for 36 tokens")

		// logprobs against a twin sequence's logits in the same step
		twin := []runtime.SeqStep{{Seq: 60, Tokens: ps[2], Logits: true}, {Seq: 61, Tokens: ps[2], Logits: true},
			{Seq: 62, Tokens: ps[1], Logits: true}}
		big := &runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 1}, Bias: make([]runtime.TokenBias, SampleBiasCap+1)}
		for i := range big.Bias {
			big.Bias[i] = runtime.TokenBias{Token: int32(i % vocab)}
		}
		for step := range 4 {
			res, err := g.StepSample(ctx, twin, []*runtime.DeviceSampling{
				{Params: runtime.SamplingParams{Temperature: 0.8}, Seed: 5, Index: uint64(step), Logprobs: true, TopLogprobs: 5}, nil, big})
			require.NoError(t, err)
			require.Nil(t, res[0].Logits)
			require.Len(t, res[1].Logits, vocab, "no parameters: the logits")
			require.Len(t, res[2].Logits, vocab, "parameters that do not fit: the logits")
			lp, top := runtime.Logprobs(res[1].Logits, res[0].Token, 5)
			require.InDelta(t, lp, res[0].Logprob, 1e-3)
			require.Len(t, res[0].Top, 5)
			for j := range top {
				require.InDelta(t, top[j].Logprob, res[0].Top[j].Logprob, 1e-3, "rank %d", j)
			}
			next := res[0].Token
			for i := range twin {
				twin[i].Pos += len(twin[i].Tokens)
				twin[i].Tokens = []int32{next}
			}
		}
		for _, e := range twin {
			g.Free(e.Seq)
		}
	}
}

// time returns the kernel's mean time in µs over reps launches on rows of
// logits with the inputs of p, uploaded once.
func (g *gpuSampler) time(t *testing.T, logits []float32, p *samplePack, reps int) float64 {
	t.Helper()
	rows := len(logits) / g.vocab
	var ms float32
	err := g.dev.Do(func(c *Ctx) error {
		var ptrs []DevicePtr
		buf := func(data []byte, n int) DevicePtr {
			p, err := c.Alloc(max(n, 256))
			try(err)
			ptrs = append(ptrs, p)
			if len(data) > 0 {
				try(c.CopyHtoD(p, data))
			}
			return p
		}
		defer func() {
			for _, p := range ptrs {
				_ = c.Free(p)
			}
		}()
		dl, dw := buf(f32bytes(logits), 4*len(logits)), buf(nil, 4*len(logits))
		dr, db, dp, dm := buf(u32bytes(p.rec), 4*len(p.rec)), buf(u32bytes(p.bias), 4*len(p.bias)), buf(u32bytes(p.pen), 4*len(p.pen)), buf(u32bytes(p.mask), 4*len(p.mask))
		do := buf(nil, 4*rows*codegen.SampleOutWords)
		s, err := c.NewStream()
		try(err)
		defer c.DestroyStream(s)
		cfg := LaunchConfig{Grid: [3]uint32{uint32(rows), 1, 1}, Block: [3]uint32{uint32(g.arm.Threads), 1, 1}, Stream: s}
		try(c.Launch(g.fn, cfg, dl, dw, dr, db, dp, dm, do, rows)) // warm-up
		e0, err := c.NewEvent()
		try(err)
		defer c.DestroyEvent(e0)
		e1, err := c.NewEvent()
		try(err)
		defer c.DestroyEvent(e1)
		try(c.Record(e0, s))
		for range reps {
			try(c.Launch(g.fn, cfg, dl, dw, dr, db, dp, dm, do, rows))
		}
		try(c.Record(e1, s))
		try(c.EventSync(e1))
		ms, err = c.Elapsed(e0, e1)
		return err
	})
	require.NoError(t, err)
	return 1000 * float64(ms) / float64(reps)
}

// TestGPUSampleKernelTime logs the sampling kernel's time at 32k and
// 128k vocabularies for 1, 16 and 64 sequences under the common settings
// (a measurement for docs/PERFORMANCE.md; it checks nothing but that the
// kernel runs).
func TestGPUSampleKernelTime(t *testing.T) {
	gpuOrSkip(t)
	dev := deviceOrSkip(t)
	for _, vocab := range []int{32000, 128256} {
		sampleKernelTimes(t, dev, vocab)
	}
}

func sampleKernelTimes(t *testing.T, dev *Device, vocab int) {
	g := newGPUSampler(t, dev, vocab, codegen.DefaultSampleArm)
	rng := rand.New(rand.NewPCG(47, 48))
	row := make([]float32, vocab)
	for i := range row {
		row[i] = float32(rng.NormFloat64() * 3)
	}
	for _, c := range []struct {
		name string
		d    runtime.DeviceSampling
	}{
		{"inactive", runtime.DeviceSampling{}},
		{"greedy", runtime.DeviceSampling{}},
		{"temperature 0.8", runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 0.8}}},
		{"top-k 40, top-p 0.95, min-p 0.05", runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05}}},
		{"top-p 0.9", runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 1, TopP: 0.9}}},
		{"top-p 0.9, 20 top logprobs", runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 1, TopP: 0.9}, Logprobs: true, TopLogprobs: 20}},
	} {
		for _, rows := range []int{1, 16, 64} {
			p := newSamplePack(vocab)
			p.reset(rows)
			if c.name != "inactive" {
				for s := range rows {
					p.set(s, &c.d)
				}
			}
			t.Logf("vocab %6d %-36s %2d sequences: %8.1f µs", vocab, c.name, rows, g.time(t, slices.Repeat(row, rows), &p, 20))
		}
	}
	// a row peaked as a model's: a few dozen likely tokens over a low, narrow rest, where
	// top-p's candidates fit shared memory (top_p_search)
	peaked := make([]float32, vocab)
	for i := range peaked {
		peaked[i] = float32(2 * rng.NormFloat64())
	}
	for range 40 {
		peaked[rng.IntN(vocab)] = float32(16 + 4*rng.Float64())
	}
	p := newSamplePack(vocab)
	p.reset(1)
	p.set(0, &runtime.DeviceSampling{Params: runtime.SamplingParams{Temperature: 1, TopP: 0.9}})
	t.Logf("vocab %6d %-36s %2d sequences: %8.1f µs", vocab, "top-p 0.9, a peaked row", 1, g.time(t, peaked, &p, 20))
}
