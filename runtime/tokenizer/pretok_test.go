package tokenizer

import (
	"math/rand"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/stretchr/testify/require"
)

// splitCase pairs a pattern with the splitter that must match its regex.
type splitCase struct {
	name    string
	pattern string
	fast    splitFunc
}

var splitCases = []splitCase{
	{"gpt-2", patGPT2, splitGPT2},
	{"gpt-2+gaps", patGPT2 + `|\s+`, splitGPT2},
	{"llama-bpe", patLlama3, splitLlama3},
	{"llama-bpe-alt", patLlama3Alt, splitLlama3},
	{"qwen2", patQwen2, splitQwen2},
	{"qwen2-alt", patQwen2Alt, splitQwen2},
}

// curatedSplitInputs are strings chosen to hit every alternative and its
// edges.
var curatedSplitInputs = []string{
	"", " ", "  ", "\n", "\r\n", "a", "'", "''", "'s", "'S", "'ſ", "'\u017fx", "'K", "'\u212a", "'İ", "'ı",
	"it's", "IT'S", "I'VE 'sx", "we'll we'LL we'Ll", "they're THEY'RE they'rE", "'re're", "'r", "'l", "'v",
	"don't DON'T", "I'm I'M", "he'd HE'D", "'t'", "x'", "'x", "!'s", "''s", "' s", " 's", "  's",
	"don\u2019t", "don\u02bct", "don`t", "don\u00b4t", "l\u2032", "\uff07s",
	"Hello world", "   Hello", "\t\tHello", "  \n\n  x", "   \n\n  x", "a \u00a0b", "a\u00a0\u00a0b", "\u00a0b",
	"x\u3000\u3000y", "\u2028\u2029x", "a\u0085b", "\u0085\u0085\u0085", "a\u180eb", "a\u200bb", "a\ufeffb",
	"\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205fz",
	"\v\f x", "\x1c\x1d\x1e\x1fx", "\x00\x01x", "\x7f",
	"\r\n\r\nfoo", "a\r\n \r\n  b", "\r\r\r", "\n \n \n ", " \n", "\n ", "\n\n\n", "  \r\n\t x", "x\n", "x \n",
	"!!!\n\n", " !!!\r\n\r\nz", " ?!", "  ?!", "?\n\nx", ". \n", "...\r\n", "(a)", "[1,2]", "a.b.c",
	"1", "12", "123", "1234", "1234567", " 1234", "a1b2", "12345678901", "\u0663\u0664\u0665\u0666", "\u0969\u096a",
	"\uff10\uff11\uff12\uff13", "\u00b2\u00b3\u00b9", "\u00bd\u2153", "\u216b\u2160", "x\u00b2", "\U0001d7d8\U0001d7d9",
	"e\u0301t\u00e9", "\u0301abc", " \u0301abc", "a\u0301\u0301b", "\u0915\u093f\u0924\u093e\u092c",
	"\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627",
	"\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0393\u03b5\u03b9\u03ac", "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
	"\uc548\ub155\ud558\uc138\uc694", "\u3053\u3093\u306b\u3061\u306f", "Stra\u00dfe \u00c4rger",
	"\U0001f601 ?", "\U0001f999.cpp", "\U0001f468\u200d\U0001f469\u200d\U0001f467", " \U0001f601\U0001f601x",
	"\xff", "\xffabc", "a\xc3", "\xc3\xa9\xc3", " \xff\xfe x", "'\xff", "1\xff2", "\ufffd\ufffd",
	"<|im_start|>user\nhi<|im_end|>\n", "    def f(x):\n        return x\n", "\t\n\t\n\tx",
	strings.Repeat(" ", 50) + "x", strings.Repeat(" ", 40), strings.Repeat("\u00a0", 30) + "y",
	strings.Repeat("ab ", 20), strings.Repeat("9", 20),
}

// randomSplitInput draws a string from an alphabet biased towards the
// characters the patterns treat specially.
func randomSplitInput(r *rand.Rand) string {
	groups := [][]string{
		strings.Split("a b c d e l m r s t v x y z A D E L M R S T V Z", " "),
		{"'s", "'S", "'t", "'re", "'RE", "'Ve", "'m", "'LL", "'lL", "'d", "'", "'", "\u2019", "\u02bc", "`", "\u017f", "\u212a"},
		strings.Split("\u00e9 \u00df \u0130 \u0131 \u0436 \u0416 \u03a9 \u03c9 \u0645 \u05d0 \u6211 \uac00 \u0915 \u093f \u0e2a \u0e31 \u0301 \u3042", " "),
		strings.Split("0 1 2 3 4 5 6 7 8 9 \u0663 \u0969 \uff11 \u00b2 \u00bd \u2160 \U0001d7d9", " "),
		{" ", " ", " ", " ", "\t", "\n", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u1680", "\u2003", "\u200a",
			"\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff", "\x1f"},
		strings.Split("! ? . , ; : - _ ( ) [ ] { } \" # $ % & * + / < = > @ \\ ^ | ~ \u00bf \u2014 \u3002 \uff5e \U0001f601 \U0001f999 \u200d \x00", " "),
		{"\xff", "\xc3", "\xe2\x80", "\ufffd"},
	}
	weights := []int{30, 12, 10, 12, 24, 10, 2}
	total := 0
	for _, w := range weights {
		total += w
	}
	var sb strings.Builder
	for n := r.Intn(25); n > 0; n-- {
		x := r.Intn(total)
		g := 0
		for x >= weights[g] {
			x -= weights[g]
			g++
		}
		piece := groups[g][r.Intn(len(groups[g]))]
		reps := 1
		if r.Intn(4) == 0 {
			reps += r.Intn(6) // runs: long spaces, digit groups, "''"
		}
		sb.WriteString(strings.Repeat(piece, reps))
	}
	return sb.String()
}

// pieces collects what a splitter emits.
func pieces(split func(string, func(string)), s string) []string {
	out := []string{}
	split(s, func(p string) { out = append(out, p) })
	return out
}

// regexSplitters compiles the regexp2 reference of every split case.
func regexSplitters(t testing.TB) []*preTokenizer {
	t.Helper()
	refs := make([]*preTokenizer, len(splitCases))
	for i, c := range splitCases {
		p, err := newRegexPreTokenizer([]string{c.pattern})
		require.NoError(t, err)
		refs[i] = p
	}
	return refs
}

// checkSplit compares every splitter with its regex on s.
func checkSplit(t testing.TB, refs []*preTokenizer, s string, only ...int) {
	t.Helper()
	idx := only
	if idx == nil {
		for i := range splitCases {
			idx = append(idx, i)
		}
	}
	for _, i := range idx {
		want := pieces(refs[i].split, s)
		got := pieces(splitCases[i].fast, s)
		require.Equal(t, want, got, "%s on %q", splitCases[i].name, s)
		require.Equal(t, s, strings.Join(got, ""), "%s on %q", splitCases[i].name, s)
		for _, p := range got {
			require.NotEmpty(t, p, "%s on %q", splitCases[i].name, s)
		}
	}
}

// fixtureSplitInputs gathers the texts of all tokenizer vector fixtures.
func fixtureSplitInputs(t *testing.T) []string {
	var in []string
	for _, n := range []string{"gpt-2", "llama-bpe", "qwen2", "llama-spm", "deepseek-r1-qwen"} {
		for _, c := range loadVectors(t, "ggml-vocab-"+n+".gguf.inp", "ggml-vocab-"+n+".gguf.out") {
			in = append(in, c.text)
		}
	}
	for _, c := range llama3Inputs(t) {
		in = append(in, c.text)
	}
	return in
}

func TestSplitMatchesRegex(t *testing.T) {
	refs := regexSplitters(t)
	t.Run("fixtures", func(t *testing.T) {
		in := fixtureSplitInputs(t)
		require.Greater(t, len(in), 200)
		for _, s := range in {
			checkSplit(t, refs, s)
		}
	})
	t.Run("curated", func(t *testing.T) {
		for _, s := range curatedSplitInputs {
			checkSplit(t, refs, s)
		}
	})
	t.Run("random", func(t *testing.T) {
		r := rand.New(rand.NewSource(20240611))
		// The main spellings get every string; the equivalent spellings
		// a sample.
		for n := 0; n < 20000; n++ {
			s := randomSplitInput(r)
			if n%8 == 0 {
				checkSplit(t, refs, s)
			} else {
				checkSplit(t, refs, s, 0, 2, 4)
			}
		}
	})
}

// TestSplitCaseFold checks every code point that case-maps onto an ASCII
// letter after an apostrophe: (?i:...) in regexp2 lower-cases the input,
// so 'ſ and 'K (Kelvin) are not contractions.
func TestSplitCaseFold(t *testing.T) {
	refs := regexSplitters(t)
	var odd []rune
	for r := rune(128); r <= unicode.MaxRune; r++ {
		for _, f := range []rune{unicode.ToLower(r), unicode.ToUpper(r), unicode.SimpleFold(r)} {
			if f < 128 && unicode.IsLetter(f) {
				odd = append(odd, r)
				break
			}
		}
	}
	require.Contains(t, odd, rune(0x17f))
	for _, r := range odd {
		for _, tail := range []string{"", "e", "E", "l", "x"} {
			checkSplit(t, refs, "'"+string(r)+tail)
			checkSplit(t, refs, "'r"+string(r)+tail)
			checkSplit(t, refs, "'l"+string(r)+tail)
		}
	}
}

// TestSplitClasses checks the character classes against regexp2's on
// every code point of the first three planes and the tag plane: runs of
// one class must match the same spans.
func TestSplitClasses(t *testing.T) {
	re := regexp2.MustCompile(`\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+`, regexp2.None)
	var runes []rune
	for r := rune(0); r < 0x30000; r++ {
		if !(r >= 0xd800 && r < 0xe000) {
			runes = append(runes, r)
		}
	}
	for r := rune(0xe0000); r < 0xe0200; r++ {
		runes = append(runes, r)
	}
	var want []int
	m, err := re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		want = append(want, m.Index+m.Length)
	}
	require.NoError(t, err)
	var got []int
	for i, r := range runes {
		if i+1 == len(runes) || classOf(r) != classOf(runes[i+1]) {
			got = append(got, i+1)
		}
	}
	require.Equal(t, want, got)
}

// TestNewPreTokenizerFast checks which patterns get a hand-written
// splitter: only the hot ones, also inside a sequence of regexes.
func TestNewPreTokenizerFast(t *testing.T) {
	for _, tc := range []struct {
		pre  string
		fast []bool
	}{
		{"gpt-2", []bool{true}},
		{"llama-bpe", []bool{true}},
		{"qwen2", []bool{true}},
		{"default", []bool{false, true, false, false}},
		{"deepseek-coder", []bool{false, false, false, false, false}},
	} {
		p, err := newPreTokenizer(prePatterns[tc.pre])
		require.NoError(t, err)
		var fast []bool
		for _, f := range p.fast {
			fast = append(fast, f != nil)
		}
		require.Equal(t, tc.fast, fast, tc.pre)
	}
}

// TestPreTokenizerMatchesRegex compares whole pre-tokenizers (all levels)
// with their regex-only versions for every named pre.
func TestPreTokenizerMatchesRegex(t *testing.T) {
	inputs := append(append([]string{}, curatedSplitInputs...), fixtureSplitInputs(t)...)
	for name, pats := range prePatterns {
		slow, err := newRegexPreTokenizer(pats)
		fast, ferr := newPreTokenizer(pats)
		if err != nil {
			// A regex regexp2 rejects is rejected either way.
			require.ErrorIs(t, ferr, ErrInvalid, name)
			continue
		}
		require.NoError(t, ferr)
		for _, s := range inputs {
			require.Equal(t, pieces(slow.split, s), pieces(fast.split, s), "%s on %q", name, s)
		}
	}
}

// FuzzSplit compares the hand-written splitters with their regexes.
func FuzzSplit(f *testing.F) {
	for _, s := range curatedSplitInputs {
		f.Add(s)
	}
	refs := regexSplitters(f)
	f.Fuzz(func(t *testing.T, s string) {
		if utf8.RuneCountInString(s) > 4096 {
			return
		}
		checkSplit(t, refs, s)
	})
}

func benchSplit(b *testing.B, split func(string, func(string))) {
	text := englishText(1 << 20)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		split(text, func(string) {})
	}
}

func BenchmarkSplitLlama3Fast(b *testing.B) { benchSplit(b, splitLlama3) }
func BenchmarkSplitGPT2Fast(b *testing.B)   { benchSplit(b, splitGPT2) }
func BenchmarkSplitLlama3Regex(b *testing.B) {
	p, err := newRegexPreTokenizer([]string{patLlama3})
	require.NoError(b, err)
	benchSplit(b, p.split)
}

// Every named pre-tokenizer compiles. deepseek-llm's letter ranges hold
// Greek extended code points (U+1F5F–U+1F7D, U+1FD0–U+1FD3, U+1FD6–U+1FDB)
// whose upper ends NFC-normalise to lower code points, which once turned
// them into reversed ranges.
func TestEveryPreCompiles(t *testing.T) {
	for name, pats := range prePatterns {
		_, err := newPreTokenizer(pats)
		require.NoError(t, err, name)
	}
	p, err := newPreTokenizer(prePatterns["deepseek-llm"])
	require.NoError(t, err)
	require.Equal(t, "a\u1f7db c", strings.Join(pieces(p.split, "a\u1f7db c"), ""))
}
