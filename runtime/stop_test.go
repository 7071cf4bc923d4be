package runtime

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// pieceDecoder decodes token i to pieces[i].
type pieceDecoder []string

func (p pieceDecoder) Add(id int32) string { return p[id] }
func (pieceDecoder) Flush() string         { return "" }

// streamAll feeds every piece and returns the events' texts, whether a stop
// matched, and the tokens released.
func streamAll(pieces, stops []string) (texts []string, stopped bool, ntok int) {
	ts := newTextStream(pieceDecoder(pieces), stops)
	for i := range pieces {
		text, toks, hit := ts.add(int32(i), GeneratedToken{TokenLogprob: TokenLogprob{Token: int32(i)}})
		texts = append(texts, text)
		ntok += len(toks)
		if hit {
			return texts, true, ntok
		}
	}
	text, toks, hit := ts.finish()
	return append(texts, text), hit, ntok + len(toks)
}

func TestTextStream(t *testing.T) {
	tests := []struct {
		name    string
		pieces  []string
		stops   []string
		texts   []string
		stopped bool
	}{
		{"no stops pass through", []string{"hel", "lo", " w", "orld"}, nil,
			[]string{"hel", "lo", " w", "orld", ""}, false},
		{"stop over three tokens", []string{"hel", "lo", " w", "orld"}, []string{"lo w"},
			[]string{"he", "l", ""}, true},
		{"held back then released", []string{"hel", "lo", " x", "orld"}, []string{"lo w"},
			[]string{"he", "l", "lo x", "orld", ""}, false},
		{"text after the stop in the same token is dropped", []string{"a", "b.c", "d"}, []string{"."},
			[]string{"a", "b"}, true},
		{"held at the end is released by finish", []string{"ab", "c"}, []string{"cd"},
			[]string{"ab", "", "c"}, false},
		{"two stops, shorter prefix held", []string{"x", "ab", "Z"}, []string{"abc", "bZ"},
			[]string{"x", "", "a"}, true},
		{"multi-byte stop", []string{"Grüß", "e ", "dich"}, []string{"ße"},
			[]string{"Grü", "", ""}[:2], true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			texts, stopped, _ := streamAll(tc.pieces, tc.stops)
			require.Equal(t, tc.texts, texts)
			require.Equal(t, tc.stopped, stopped)
		})
	}
}

// FuzzTextStream checks the stream against its definition: the emitted text
// is the whole text cut before the first stop string, each event is valid
// UTF-8 and contains no stop string, and every token is reported at most once.
func FuzzTextStream(f *testing.F) {
	f.Add("hel|lo| w|orld", "lo w", "")
	f.Add("a|b.c|d", ".", "c")
	f.Add("x|ab|Z", "abc", "bZ")
	f.Add("Grüß|e |dich", "ße", "")
	f.Add("aaaa|aa|a", "aab", "aaa")
	f.Fuzz(func(t *testing.T, joined, stop1, stop2 string) {
		if !utf8.ValidString(joined) || !utf8.ValidString(stop1) || !utf8.ValidString(stop2) {
			return
		}
		pieces := strings.Split(joined, "|")
		stops := nonEmpty([]string{stop1, stop2})
		texts, stopped, ntok := streamAll(pieces, stops)
		full := strings.Join(pieces, "")
		want, cut := full, false
		for _, s := range stops {
			if i := strings.Index(full, s); i >= 0 && (!cut || i < len(want)) {
				want, cut = full[:i], true
			}
		}
		require.Equal(t, want, strings.Join(texts, ""))
		require.Equal(t, cut, stopped)
		require.LessOrEqual(t, ntok, len(pieces))
		for _, text := range texts {
			require.True(t, utf8.ValidString(text))
			for _, s := range stops {
				require.NotContains(t, text, s)
			}
		}
	})
}
