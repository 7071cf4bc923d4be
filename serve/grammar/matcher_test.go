package grammar

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

var (
	_ runtime.Mask = (*SamplerMask)(nil)
	_ TokenSource  = (*tokenizer.Tokenizer)(nil)
)

// bruteAllowed is the mask by definition: each token's bytes stepped
// through the automaton one at a time.
func bruteAllowed(g *Grammar, src *synthVocab, s State) []bool {
	out := make([]bool, src.VocabSize())
	for id := range out {
		if src.IsEOG(int32(id)) {
			out[id] = g.CanEnd(s)
			continue
		}
		b := src.TokenBytes(int32(id))
		if len(b) == 0 {
			continue
		}
		cur, ok := s, true
		for _, c := range b {
			if cur, ok = g.Advance(cur, c); !ok {
				break
			}
		}
		out[id] = ok
	}
	return out
}

func TestMaskMatchesBruteForce(t *testing.T) {
	src := newSynthVocab(3, 500)
	voc := NewVocabulary(src)
	g, err := FromJSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"string","maxLength":4},"b":{"type":"array","items":{"type":"integer"}}},"required":["b"]}`))
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 20; run++ {
		m := NewMatcher(g, voc)
		for step := 0; step < 60 && !m.Done(); step++ {
			mask := make([]uint64, voc.Words())
			m.Mask(mask)
			want := bruteAllowed(g, src, m.State())
			var allowed []int32
			for id, w := range want {
				got := mask[id/64]&(1<<(id%64)) != 0
				require.Equal(t, w, got, "token %d %q in state %d", id, src.TokenBytes(int32(id)), m.State())
				require.Equal(t, w, m.Allowed(int32(id)))
				if w {
					allowed = append(allowed, int32(id))
				}
			}
			require.NotEmpty(t, allowed)
			tok := allowed[rng.IntN(len(allowed))]
			require.NoError(t, m.Accept(tok))
		}
	}
}

func TestMatcherAcceptAndApply(t *testing.T) {
	src := &synthVocab{toks: [][]byte{[]byte("{"), []byte("}"), []byte(`"a"`), []byte(":"), []byte("1"), nil, nil}, eos: 6}
	voc := NewVocabulary(src)
	g := JSONObject()
	m := NewMatcher(g, voc)

	logits := make([]float32, 9) // two padded ids past the vocabulary
	m.Apply(logits)
	inf := float32(math.Inf(-1))
	require.Equal(t, []float32{0, inf, inf, inf, inf, inf, inf, inf, inf}, logits)

	require.ErrorIs(t, m.Accept(1), ErrRejected)
	require.ErrorIs(t, m.Accept(6), ErrRejected, "EOS before the object is complete")
	require.ErrorIs(t, m.Accept(5), ErrRejected, "control token")
	require.ErrorIs(t, m.Accept(99), ErrRejected)
	for _, tok := range []int32{0, 2, 3, 4} {
		require.NoError(t, m.Accept(tok))
		require.False(t, m.CanEnd())
	}
	require.NoError(t, m.Accept(1))
	require.True(t, m.CanEnd())
	require.True(t, m.Done())
	mask := make([]uint64, voc.Words())
	m.Mask(mask)
	require.Equal(t, uint64(1)<<6, mask[0], "only EOS after a complete object")
	require.NoError(t, m.Accept(6))
	m.Mask(mask)
	require.Zero(t, mask[0])

	sm := NewSamplerMask(g, voc)
	sm.Accept(1) // not allowed: recorded, then only EOG is allowed
	require.ErrorIs(t, sm.Err(), ErrRejected)
	for i := range logits {
		logits[i] = 1
	}
	sm.Apply(logits)
	require.Equal(t, []float32{inf, inf, inf, inf, inf, inf, 1, inf, inf}, logits)
}

func TestMaskCacheBounded(t *testing.T) {
	src := newSynthVocab(5, 200)
	voc := NewVocabulary(src)
	g, err := FromGBNF(`root ::= [0-9]{0,40}`) // 41 distinct states
	require.NoError(t, err)
	m := NewMatcher(g, voc)
	m.cache.cap = 8
	one, ok := src.tokenOf("1")
	require.True(t, ok)
	for i := 0; i < 40; i++ {
		require.True(t, m.Allowed(one))
		require.NoError(t, m.Accept(one))
	}
	require.LessOrEqual(t, len(m.cache.entries), 8)
	require.False(t, m.Allowed(one))
	require.True(t, m.Allowed(src.eos))
}

func (v *synthVocab) tokenOf(s string) (int32, bool) {
	for id, b := range v.toks {
		if string(b) == s {
			return int32(id), true
		}
	}
	return 0, false
}

// llama3Source is the Llama 3 vocabulary read from its encoder.json, bytes
// unmapped from the byte-level BPE alphabet; ids past the file are the
// special tokens (no bytes), 128001 and 128009 end generation.
type llama3Source struct{ toks [][]byte }

func (s *llama3Source) VocabSize() int             { return len(s.toks) }
func (s *llama3Source) TokenBytes(id int32) []byte { return s.toks[id] }
func (s *llama3Source) IsEOG(id int32) bool        { return id == 128001 || id == 128009 }

var (
	llama3Once sync.Once
	llama3Src  *llama3Source
	llama3Err  error
)

func loadLlama3() (*llama3Source, error) {
	llama3Once.Do(func() {
		data, err := os.ReadFile("../../testdata/vocab/llama3/encoder.json")
		if err != nil {
			llama3Err = err
			return
		}
		var enc map[string]int32
		if llama3Err = json.Unmarshal(data, &enc); llama3Err != nil {
			return
		}
		// The byte-level alphabet: printable bytes stand for themselves,
		// the other 68 are shifted to U+0100… in byte order.
		unmap := map[rune]byte{}
		shifted := 0
		for b := 0; b < 256; b++ {
			if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
				unmap[rune(b)] = byte(b)
			} else {
				unmap[rune(256+shifted)] = byte(b)
				shifted++
			}
		}
		src := &llama3Source{toks: make([][]byte, 128256)}
		for piece, id := range enc {
			var b []byte
			for _, r := range piece {
				b = append(b, unmap[r])
			}
			src.toks[id] = b
		}
		llama3Src = src
	})
	return llama3Src, llama3Err
}

// BenchmarkMaskLlama3 measures one mask per step with the 128k Llama 3
// vocabulary: "hit" from the cache, "miss" with a fresh cache each step
// (the transition memo stays warm, as it does in a running request), and
// "miss-cold" with a fresh grammar each step; batch 16 runs 16 matchers.
func BenchmarkMaskLlama3(b *testing.B) {
	src, err := loadLlama3()
	if err != nil {
		b.Skip("llama3 vocabulary:", err)
	}
	voc := NewVocabulary(src)
	schema := []byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age"]}`)
	prefixes := []string{`{"name":"Al`, `{"name":"Ali", "age":`, `{"name":"Ali", "age":3`, `{"name":"Ali", "age":3, "tags":[`, `{`}
	setup := func(g *Grammar, batch int) []*Matcher {
		ms := make([]*Matcher, batch)
		for i := range ms {
			ms[i] = NewMatcher(g, voc)
			for _, c := range []byte(prefixes[i%len(prefixes)]) {
				s, ok := g.Advance(State(ms[i].state), c)
				if !ok {
					b.Fatal("prefix rejected")
				}
				ms[i].state = int32(s)
			}
		}
		return ms
	}
	dst := make([]uint64, voc.Words())
	logits := make([]float32, 128256)
	for _, batch := range []int{1, 16} {
		g, _ := FromJSONSchema(schema)
		ms := setup(g, batch)
		for _, m := range ms {
			m.Mask(dst) // warm the cache
		}
		b.Run("hit/mask/batch"+itoa(batch), func(b *testing.B) {
			for b.Loop() {
				for _, m := range ms {
					m.Mask(dst)
				}
			}
		})
		b.Run("hit/apply/batch"+itoa(batch), func(b *testing.B) {
			for b.Loop() {
				for _, m := range ms {
					m.Apply(logits)
				}
			}
		})
		b.Run("miss/batch"+itoa(batch), func(b *testing.B) {
			for b.Loop() {
				for _, m := range ms {
					m.cache.entries = map[int32]*maskEntry{}
					m.cache.head, m.cache.tail = nil, nil
					m.Mask(dst)
				}
			}
		})
		b.Run("miss-cold/batch"+itoa(batch), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				g, _ := FromJSONSchema(schema)
				ms := setup(g, batch)
				b.StartTimer()
				for _, m := range ms {
					m.Mask(dst)
				}
			}
		})
	}
}

func TestLlama3Mask(t *testing.T) {
	src, err := loadLlama3()
	if err != nil {
		t.Skip("llama3 vocabulary:", err)
	}
	voc := NewVocabulary(src)
	g := JSONObject()
	m := NewMatcher(g, voc)
	brace, quote := int32(90), int32(1)
	require.Equal(t, "{", string(src.toks[brace]))
	require.Equal(t, `"`, string(src.toks[quote]))
	require.True(t, m.Allowed(brace))
	require.False(t, m.Allowed(quote))
	require.False(t, m.Allowed(128009))
	require.False(t, m.Allowed(128000), "BOS is a control token")
	require.NoError(t, m.Accept(brace))
	require.True(t, m.Allowed(quote))
}
