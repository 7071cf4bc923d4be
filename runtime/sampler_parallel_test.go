package runtime

import (
	"math"
	"math/rand/v2"
	goruntime "runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// parallelFixture returns n sequences with seeded samplers of assorted
// parameters (every third greedy, one masked, one not wanting a token) and
// their logits rows of vocab.
func parallelFixture(n, vocab int, r *rand.Rand) ([]SeqStep, []*sequence, [][]float32) {
	batch := make([]SeqStep, n)
	members := make([]*sequence, n)
	logits := make([][]float32, n)
	for i := range n {
		p := SamplingParams{Temperature: 0.7 + 0.1*float32(i%4), TopK: []int{0, 40, 0, 200}[i%4],
			TopP: []float32{1, 0.95, 0.9, 1}[i%4], MinP: []float32{0, 0.05, 0, 0.02}[i%4], Seed: seed(uint64(7 + i))}
		if i%3 == 2 {
			p.Temperature = 0
		}
		s := &sequence{id: SeqID(i), sampler: NewSampler(p)}
		if i == 1 {
			s.req.Mask = allowEven{}
			s.sampler.SetMask(s.req.Mask)
		}
		members[i] = s
		batch[i] = SeqStep{Seq: s.id, Logits: i != 4}
		logits[i] = make([]float32, vocab)
		for j := range logits[i] {
			logits[i][j] = float32(r.NormFloat64() * 3)
		}
	}
	return batch, members, logits
}

// allowEven is a Mask that allows even token ids.
type allowEven struct{}

func (allowEven) Apply(x []float32) {
	for i := 1; i < len(x); i += 2 {
		x[i] = float32(math.Inf(-1))
	}
}
func (allowEven) Accept(int32) {}

// TestSampleParallelMatchesSerial: the tokens sampleParallel draws over
// several steps are those a serial pass draws with the same seeds; masked
// entries and entries that want no token are left to the serial pass, and
// a small vocabulary or a single entry is not worth the goroutines.
func TestSampleParallelMatchesSerial(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(4))
	const n, vocab = 12, 4096
	batch, par, logits := parallelFixture(n, vocab, rand.New(rand.NewPCG(1, 2)))
	_, ser, _ := parallelFixture(n, vocab, rand.New(rand.NewPCG(1, 2)))
	for step := range 5 {
		out := sampleParallel(batch, par, logits)
		require.Len(t, out, n)
		for i := range n {
			want := batch[i].Logits && i != 1
			require.Equal(t, want, out[i].ok, "step %d entry %d", step, i)
			if !batch[i].Logits {
				continue
			}
			tok, err := ser[i].sampler.Sample(logits[i])
			require.NoError(t, err)
			if !out[i].ok {
				out[i].tok, out[i].err = par[i].sampler.Sample(logits[i])
			}
			require.NoError(t, out[i].err)
			require.Equal(t, tok, out[i].tok, "step %d entry %d", step, i)
			par[i].sampler.Accept(tok)
			ser[i].sampler.Accept(tok)
		}
	}
	small := [][]float32{make([]float32, parallelSampleMin-1), make([]float32, parallelSampleMin-1)}
	require.Nil(t, sampleParallel(batch[:2], par[:2], small))
	require.Nil(t, sampleParallel(batch[:1], par[:1], logits[:1]))
}

// TestEngineParallelSamplingMatchesSolo: with a vocabulary large enough
// for parallel sampling, each seeded request generates the same tokens in
// a batch as alone.
func TestEngineParallelSamplingMatchesSolo(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(4))
	reqs := make([]Request, 6)
	for i := range reqs {
		reqs[i] = Request{Prompt: []int32{int32(1 + i), int32(2 + i)}, MaxTokens: 6,
			Sampling: SamplingParams{Temperature: 1, TopP: 0.9, Seed: seed(uint64(50 + i))}}
	}
	requireBatchedMatchesSolo(t, parallelSampleMin, 0, reqs, 2)
}

// BenchmarkSampleStep: the sampling of one decode step of 64 sequences at
// temperature 1 over a 32k vocabulary, on the loop goroutine (serial) and
// with sampleParallel.
func BenchmarkSampleStep(b *testing.B) {
	const n, vocab = 64, 32000
	r := rand.New(rand.NewPCG(3, 4))
	batch := make([]SeqStep, n)
	members := make([]*sequence, n)
	logits := make([][]float32, n)
	for i := range n {
		members[i] = &sequence{sampler: NewSampler(SamplingParams{Temperature: 1, Seed: seed(uint64(i))})}
		batch[i] = SeqStep{Logits: true}
		logits[i] = make([]float32, vocab)
		for j := range logits[i] {
			logits[i][j] = float32(r.NormFloat64() * 3)
		}
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			for i, s := range members {
				if _, err := s.sampler.Sample(logits[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		for b.Loop() {
			if out := sampleParallel(batch, members, logits); out == nil {
				b.Skip("one core: nothing to run in parallel")
			}
		}
	})
}
