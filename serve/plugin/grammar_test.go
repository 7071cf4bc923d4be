package plugin

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/serve/chat"
)

// vocab is a synthetic tokenizer: token 0 is EOS, token 1 a control token.
type vocab struct{ toks [][]byte }

func (v *vocab) VocabSize() int             { return len(v.toks) }
func (v *vocab) TokenBytes(id int32) []byte { return v.toks[id] }
func (v *vocab) IsEOG(id int32) bool        { return id == 0 }

func newVocab(pieces ...string) *vocab {
	v := &vocab{toks: [][]byte{nil, nil}}
	for _, p := range pieces {
		v.toks = append(v.toks, []byte(p))
	}
	return v
}

func syntheticVocab() *vocab {
	var pieces []string
	for c := 'a'; c <= 'z'; c++ {
		pieces = append(pieces, string(c))
	}
	for c := '0'; c <= '9'; c++ {
		pieces = append(pieces, string(c))
	}
	pieces = append(pieces, "@", ".", ",", "-", " ", "é", "\xc3", "\xa9", "ab", "com", ".com", "@ex", "ample", "12", "345", ",000", "xyz", "hello", " world", "!")
	return newVocab(pieces...)
}

// generate samples from random logits under m until EOS or maxLen
// tokens, returning the text and whether EOS ended it.
func generate(t *testing.T, m *Matcher, v *vocab, rng *rand.Rand, maxLen int) (string, bool) {
	var out []byte
	logits := make([]float32, len(v.toks)+3) // a padded output layer
	for range maxLen {
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		logits[0] += 1 // lean towards ending when allowed
		m.Apply(logits)
		best, bestV := -1, float32(math.Inf(-1))
		for i, x := range logits {
			if x > bestV {
				best, bestV = i, x
			}
		}
		require.GreaterOrEqual(t, best, 0, "no token allowed after %q", out)
		require.Less(t, best, len(v.toks), "a padded id was allowed")
		m.Accept(int32(best))
		if best == 0 {
			return string(out), true
		}
		require.NotEqual(t, 1, best, "the control token was allowed")
		out = append(out, v.toks[best]...)
	}
	return string(out), false
}

func TestRegexPluginConstrains(t *testing.T) {
	checkGoroutines(t)
	h := newHost(t, Limits{MaxHandles: 4})
	p, err := h.LoadGrammar(context.Background(), "regex", buildGuest(t, "./examples/regex"))
	require.NoError(t, err)
	v := syntheticVocab()
	rng := rand.New(rand.NewPCG(7, 9))
	for _, expr := range []string{`[a-z]{2,6}@[a-z]+\.com`, `\d{1,3}(,\d{3})*`, `(hello|xyz)( world)?!?`, `é+[0-9]`} {
		re := regexp.MustCompile(`^(?:` + expr + `)$`)
		finished := 0
		for range 40 {
			m, err := p.NewMatcher(v, expr)
			require.NoError(t, err)
			text, done := generate(t, m, v, rng, 40)
			require.NoError(t, m.Err())
			if done {
				finished++
				require.True(t, re.MatchString(text), "expr %q produced %q", expr, text)
			}
			m.Close()
		}
		require.Greater(t, finished, 20, "expr %q: most generations should finish", expr)
	}
	st := p.Stats()
	require.Equal(t, 0, st.Handles, "every handle freed")
	require.Equal(t, 0, st.Discarded)
	require.GreaterOrEqual(t, st.Live, 1)

	_, err = p.NewMatcher(v, `a(`)
	require.ErrorIs(t, err, ErrPluginError)
	require.Contains(t, err.Error(), "missing closing )")
	require.Equal(t, 0, p.Stats().Handles)
	require.NoError(t, p.Close())
	require.Equal(t, 0, p.Stats().Live)
}

func TestGrammarRejectsAndEnds(t *testing.T) {
	checkGoroutines(t)
	h := newHost(t, Limits{})
	p, err := h.LoadGrammar(context.Background(), "hostile", buildGuest(t, "./testdata/hostile"))
	require.NoError(t, err)
	v := newVocab("1", "2", "a", "!")
	logits := make([]float32, 6)

	m, err := p.NewMatcher(v, "digits")
	require.NoError(t, err)
	m.Apply(logits)
	neg := float32(math.Inf(-1))
	require.Equal(t, []float32{neg, neg, 0, 0, neg, 0}, logits, "EOS not yet, digits and ! allowed")
	m.Accept(2)
	clear(logits)
	m.Apply(logits)
	require.Equal(t, float32(0), logits[0], "EOS allowed once a digit was read")
	m.Accept(4) // "a": not allowed
	m.Apply(logits)
	require.ErrorIs(t, m.Err(), ErrPluginError)
	require.Equal(t, float32(0), logits[0])
	require.Equal(t, neg, logits[2], "after a failure only EOS remains")
	m.Close()

	m, err = p.NewMatcher(v, "digits")
	require.NoError(t, err)
	m.Apply(logits)
	m.Accept(0) // EOS before the grammar may end
	require.ErrorIs(t, m.Err(), ErrPluginError)
	m.Close()
	require.Equal(t, 0, p.Stats().Handles)
}

// TestGrammarHostileStep: a step that loops forever or panics fails its
// own sequence within the deadline; a sequence sharing the instance
// replays into a fresh instance and goes on.
func TestGrammarHostileStep(t *testing.T) {
	checkGoroutines(t)
	const timeout = 200 * time.Millisecond
	wasm := buildGuest(t, "./testdata/hostile")
	v := newVocab("1", "2", "!")
	for _, tc := range []struct {
		source string
		want   error
	}{{"loop", ErrPluginTimeout}, {"panic", ErrPluginTrap}} {
		t.Run(tc.source, func(t *testing.T) {
			h := newHost(t, Limits{StepTimeout: timeout, MaxInstances: 1})
			p, err := h.LoadGrammar(context.Background(), "hostile", wasm)
			require.NoError(t, err)
			good, err := p.NewMatcher(v, "digits")
			require.NoError(t, err)
			bad, err := p.NewMatcher(v, tc.source)
			require.NoError(t, err)
			require.Equal(t, 1, p.Stats().Live, "both sequences share one instance")

			logits := make([]float32, 5)
			good.Apply(logits)
			good.Accept(2)
			bad.Apply(logits)
			bad.Accept(4) // "!" makes the hostile grammar misbehave
			start := time.Now()
			bad.Apply(logits)
			require.Less(t, time.Since(start), timeout+time.Second)
			require.ErrorIs(t, bad.Err(), tc.want)
			require.Equal(t, 1, p.Stats().Discarded)

			clear(logits)
			good.Apply(logits)
			require.NoError(t, good.Err(), "the other sequence survives")
			require.Equal(t, float32(0), logits[0], "its state was replayed: a digit was read, so it may end")
			good.Accept(3)
			good.Apply(logits)
			require.NoError(t, good.Err())
			good.Close()
			bad.Close()
			st := p.Stats()
			require.Equal(t, 0, st.Handles)
			require.Equal(t, 1, st.Live)
			require.Equal(t, 2, st.Created)
		})
	}
}

func TestChatMLPluginMatchesFallback(t *testing.T) {
	checkGoroutines(t)
	h := newHost(t, Limits{})
	p, err := h.LoadTemplate(context.Background(), "chatml", buildGuest(t, "./examples/chatml"))
	require.NoError(t, err)
	cases := []string{
		`{"messages":[{"role":"user","content":"Hello"}],"add_generation_prompt":true,"bos_token":"<s>","eos_token":"</s>"}`,
		`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi\nthere"},{"role":"assistant","content":"Yes?"}],"add_generation_prompt":false}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}],"add_generation_prompt":true}`,
		`{"messages":[{"role":"assistant","content":null},{"role":"user","content":"héllo ✓ \"q\""}]}`,
		`{"messages":[],"add_generation_prompt":true}`,
		twentyMessages(),
	}
	for _, c := range cases {
		want, err := chat.Fallback().Render(json.RawMessage(c))
		require.NoError(t, err, c)
		got, err := p.Render(json.RawMessage(c))
		require.NoError(t, err, c)
		require.Equal(t, want, got, c)
	}
	_, err = p.Render(json.RawMessage(`{"messages": 5}`))
	require.ErrorIs(t, err, ErrPluginError)
}

// twentyMessages is a chat of 20 messages of a few sentences each.
func twentyMessages() string {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []msg
	for i := range 20 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		ms = append(ms, msg{role, "This is message number " + string(rune('A'+i)) +
			". It has a couple of sentences, like a real chat turn would. Nothing special here."})
	}
	b, err := json.Marshal(map[string]any{"messages": ms, "add_generation_prompt": true})
	if err != nil {
		panic(err)
	}
	return string(b)
}
