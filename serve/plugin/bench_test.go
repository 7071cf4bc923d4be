package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/serve/chat"
	"github.com/memra-ai/memra/serve/grammar"
)

func BenchmarkCompile(b *testing.B) {
	wasm := buildGuest(b, "./examples/chatml")
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			h, err := NewHost(ctx, Config{NoCache: true})
			require.NoError(b, err)
			_, err = h.LoadTemplate(ctx, "chatml", wasm)
			require.NoError(b, err)
			h.Close()
		}
	})
	b.Run("disk-cache", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		warm, err := NewHost(ctx, Config{CacheDir: dir})
		require.NoError(b, err)
		_, err = warm.LoadTemplate(ctx, "chatml", wasm)
		require.NoError(b, err)
		warm.Close()
		for b.Loop() {
			h, err := NewHost(ctx, Config{CacheDir: dir}) // a new runtime, as a new process would have
			require.NoError(b, err)
			_, err = h.LoadTemplate(ctx, "chatml", wasm)
			require.NoError(b, err)
			h.Close()
		}
	})
}

func BenchmarkInstantiate(b *testing.B) {
	h := newHost(b, Limits{})
	p, err := h.LoadTemplate(context.Background(), "chatml", buildGuest(b, "./examples/chatml"))
	require.NoError(b, err)
	for b.Loop() {
		in, err := p.m.instantiate(context.Background())
		require.NoError(b, err)
		in.kill()
	}
}

func BenchmarkRender20(b *testing.B) {
	ctx := json.RawMessage(twentyMessages())
	b.Run("plugin", func(b *testing.B) {
		h := newHost(b, Limits{})
		p, err := h.LoadTemplate(context.Background(), "chatml", buildGuest(b, "./examples/chatml"))
		require.NoError(b, err)
		for b.Loop() {
			_, err := p.Render(ctx)
			require.NoError(b, err)
		}
	})
	b.Run("native", func(b *testing.B) {
		for b.Loop() {
			_, err := chat.Fallback().Render(ctx)
			require.NoError(b, err)
		}
	})
}

// benchVocab is ~32k tokens of 1–6 bytes over digits, comma and letters,
// with "123" and ",456" included.
func benchVocab() *vocab {
	rng := rand.New(rand.NewPCG(1, 1))
	seen := map[string]bool{"123": true, ",456": true}
	pieces := []string{"123", ",456"}
	const alphabet = "0123456789,abcdefghijklmnopqrstuvwxyz "
	for len(pieces) < 32000 {
		n := 1 + rng.IntN(6)
		s := make([]byte, n)
		for i := range s {
			s[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if !seen[string(s)] {
			seen[string(s)] = true
			pieces = append(pieces, string(s))
		}
	}
	return newVocab(pieces...)
}

// stepper is either mask; the benchmark drives "123" then ",456" forever.
type stepper interface {
	Apply([]float32)
	Accept(int32)
}

func benchSteps(b *testing.B, v *vocab, newMask func() stepper, batch int) {
	masks := make([]stepper, batch)
	for i := range masks {
		masks[i] = newMask()
	}
	logits := make([]float32, len(v.toks))
	tok123, tok456 := int32(2), int32(3)
	n := 0
	for b.Loop() {
		tok := tok456
		if n == 0 {
			tok = tok123
		}
		for _, m := range masks {
			m.Apply(logits)
			m.Accept(tok)
		}
		n++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*batch), "ns/token")
}

func BenchmarkGrammarStep(b *testing.B) {
	v := benchVocab()
	h := newHost(b, Limits{})
	p, err := h.LoadGrammar(context.Background(), "regex", buildGuest(b, "./examples/regex"))
	require.NoError(b, err)
	g, err := grammar.FromGBNF(`root ::= [0-9] [0-9]? [0-9]? ("," [0-9] [0-9] [0-9])*`)
	require.NoError(b, err)
	gv := grammar.NewVocabulary(v)
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("plugin/batch=%d", batch), func(b *testing.B) {
			var ms []*Matcher
			benchSteps(b, v, func() stepper {
				m, err := p.NewMatcher(v, `\d{1,3}(,\d{3})*`)
				require.NoError(b, err)
				ms = append(ms, m)
				return m
			}, batch)
			for _, m := range ms {
				require.NoError(b, m.Err())
				m.Close()
			}
		})
		b.Run(fmt.Sprintf("builtin/batch=%d", batch), func(b *testing.B) {
			benchSteps(b, v, func() stepper { return grammar.NewSamplerMask(g, gv) }, batch)
		})
	}
}
