package sdk

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// evenA accepts "a"-runs of even length followed by any number of "b".
type evenA struct{}

func (evenA) Start() int32 { return 0 }
func (evenA) Next(s int32, b byte) int32 {
	switch {
	case b == 'a' && s <= 1:
		return 1 - s
	case b == 'b' && s != 1:
		return 2
	}
	return -1
}
func (evenA) CanEnd(s int32) bool { return s != 1 }

func payload(toks ...string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(toks)))
	for _, t := range toks {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t)))
		b = append(b, t...)
	}
	return b
}

func TestWalkMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var toks []string
	for range 300 {
		n := rng.IntN(5)
		s := ""
		for range n {
			s += string("abc"[rng.IntN(3)])
		}
		toks = append(toks, s)
	}
	v, err := parseVocab(payload(toks...))
	require.NoError(t, err)
	g := evenA{}
	for _, s := range []int32{0, 1, 2} {
		m := make([]uint64, v.words())
		walk(g, v, s, m)
		for id, tok := range toks {
			st := s
			for i := 0; i < len(tok) && st >= 0; i++ {
				st = g.Next(st, tok[i])
			}
			want := tok != "" && st >= 0
			require.Equal(t, want, m[id>>6]&(1<<(id&63)) != 0, "state %d token %q", s, tok)
		}
	}
}

func TestParseVocabRefuses(t *testing.T) {
	good := payload("a", "bc")
	for _, bad := range [][]byte{nil, {1, 0, 0}, good[:len(good)-1], append(good, 0), {0xff, 0xff, 0xff, 0xff}} {
		_, err := parseVocab(bad)
		require.ErrorIs(t, err, errVocab)
	}
}

func TestStepAndHandles(t *testing.T) {
	RegisterGrammar(func(src string) (Grammar, error) { return evenA{}, nil })
	require.Equal(t, int32(0), setVocab(payload("", "a", "b", "aa")))
	h := newSequence([]byte("x"))
	require.NotZero(t, h)
	flags, mask := step(h, -1)
	require.Equal(t, uint32(flagMayEnd), flags)
	require.Equal(t, uint64(0b1110), mask[0])
	flags, mask = step(h, 1)
	require.Equal(t, uint32(0), flags)
	require.Equal(t, uint64(0b1010), mask[0]) // "a" and "aa" keep the run alive
	flags, _ = step(h, 2)                     // "b" after an odd run
	require.Equal(t, uint32(flagError), flags)
	freeSequence(h)
	flags, _ = step(h, -1)
	require.Equal(t, uint32(flagError), flags)
	require.Equal(t, uint32(0), uint32(newSequenceFails()))
}

func newSequenceFails() int32 {
	compileFn = nil
	defer RegisterGrammar(func(src string) (Grammar, error) { return evenA{}, nil })
	return newSequence([]byte("x"))
}

func FuzzParseVocab(f *testing.F) {
	f.Add(payload("a", "bc"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseVocab(b)
		if err == nil {
			require.Len(t, v.sorted, countNonEmpty(v.tokens))
		}
	})
}

func countNonEmpty(toks [][]byte) int {
	n := 0
	for _, t := range toks {
		if len(t) > 0 {
			n++
		}
	}
	return n
}
