package runtime

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"
)

// fakeVocab is a vocabulary of whole-string pieces; ids in eog end
// generation.
type fakeVocab struct {
	pieces []string
	eog    map[int32]bool
}

type fakeDecoder struct{ v *fakeVocab }

func (d fakeDecoder) Add(id int32) string {
	if d.v.eog[id] {
		return ""
	}
	return d.v.pieces[id]
}
func (fakeDecoder) Flush() string { return "" }

func (v *fakeVocab) newDecoder() textDecoder { return fakeDecoder{v} }
func (v *fakeVocab) IsEOG(id int32) bool     { return v.eog[id] }
func (v *fakeVocab) TokenBytes(id int32) []byte {
	if v.eog[id] {
		return nil
	}
	return []byte(v.pieces[id])
}

// stepRecord is what the fake backend saw of one batch entry.
type stepRecord struct {
	Seq    SeqID
	Pos, N int
	Logits bool
}

// fakeBackend keeps each sequence's tokens and returns logits that are a
// pure function of them, so outputs depend only on the sequence, never on
// the batch around it.
type fakeBackend struct {
	info   ModelInfo
	logits func(hist []int32) []float32
	delay  time.Duration
	gate   chan struct{} // when set, every Step waits for a value

	mu     sync.Mutex
	seqs   map[SeqID][]int32
	steps  [][]stepRecord
	freed  []SeqID
	closed bool
}

func newFakeBackend(vocab, ctx int, logits func([]int32) []float32) *fakeBackend {
	return &fakeBackend{
		info:   ModelInfo{Name: "fake", Arch: "fake", VocabSize: vocab, ContextLength: ctx, Device: "cpu"},
		logits: logits,
		seqs:   make(map[SeqID][]int32),
	}
}

func (b *fakeBackend) Info() ModelInfo { return b.info }

func (b *fakeBackend) Step(ctx context.Context, batch []SeqStep) ([][]float32, error) {
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if b.delay > 0 {
		time.Sleep(b.delay)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := make([]stepRecord, len(batch))
	out := make([][]float32, len(batch))
	for i, s := range batch {
		hist := b.seqs[s.Seq]
		if s.Pos > len(hist) {
			return nil, fmt.Errorf("seq %d: pos %d beyond cached %d", s.Seq, s.Pos, len(hist))
		}
		if s.Pos+len(s.Tokens) > b.info.ContextLength {
			return nil, fmt.Errorf("seq %d: context overflow", s.Seq)
		}
		hist = append(hist[:s.Pos:s.Pos], s.Tokens...)
		b.seqs[s.Seq] = hist
		rec[i] = stepRecord{Seq: s.Seq, Pos: s.Pos, N: len(s.Tokens), Logits: s.Logits}
		if s.Logits {
			out[i] = b.logits(slices.Clone(hist))
		}
	}
	b.steps = append(b.steps, rec)
	return out, nil
}

func (b *fakeBackend) Free(seq SeqID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.seqs, seq)
	b.freed = append(b.freed, seq)
}

func (b *fakeBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *fakeBackend) record() ([][]stepRecord, []SeqID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.steps), slices.Clone(b.freed)
}

// hashLogits gives every history a different, fixed distribution over vocab
// tokens, never preferring token 0 (no EOG in the hash vocabulary).
func hashLogits(vocab int) func([]int32) []float32 {
	return func(hist []int32) []float32 {
		out := make([]float32, vocab)
		for j := range out {
			h := fnv.New64a()
			for _, t := range hist {
				fmt.Fprint(h, t, ",")
			}
			fmt.Fprint(h, "|", j)
			out[j] = float32(h.Sum64()%4096) / 1024 // 0..4
		}
		return out
	}
}

// tableLogits makes next[last token] the clear favourite.
func tableLogits(vocab int, next map[int32]int32) func([]int32) []float32 {
	return func(hist []int32) []float32 {
		out := make([]float32, vocab)
		if n, ok := next[hist[len(hist)-1]]; ok {
			out[n] = 10
		}
		return out
	}
}

func hashVocab(n int) *fakeVocab {
	v := &fakeVocab{eog: map[int32]bool{}}
	for i := range n {
		v.pieces = append(v.pieces, fmt.Sprintf("<%d>", i))
	}
	return v
}

// collect reads ch to its end.
func collect(ch <-chan Event) (text string, toks []int32, last Event) {
	for ev := range ch {
		text += ev.Text
		for _, g := range ev.Tokens {
			toks = append(toks, g.Token)
		}
		last = ev
	}
	return text, toks, last
}
