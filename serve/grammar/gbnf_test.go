package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGBNFMatch(t *testing.T) {
	cases := []struct {
		name, grammar string
		accept        []string
		reject        []string
	}{
		{"literal", `root ::= "ab"`, []string{"ab"}, []string{"", "a", "abc", "b"}},
		{"alternatives", `root ::= "a" | "bc" | ""`, []string{"a", "bc", ""}, []string{"b", "ab"}},
		{"sequence and rule", "root ::= x y\nx ::= \"1\"\ny ::= \"2\"", []string{"12"}, []string{"1", "21"}},
		{"group", `root ::= ("a" | "b") "c"`, []string{"ac", "bc"}, []string{"c", "abc"}},
		{"star", `root ::= "a"*`, []string{"", "a", "aaaa"}, []string{"b", "ab"}},
		{"plus", `root ::= "ab"+`, []string{"ab", "abab"}, []string{"", "aba"}},
		{"optional", `root ::= "a"? "b"`, []string{"b", "ab"}, []string{"a", "aab"}},
		{"exact count", `root ::= [0-9]{3}`, []string{"123"}, []string{"12", "1234"}},
		{"at least", `root ::= "x"{2,}`, []string{"xx", "xxxxx"}, []string{"x", ""}},
		{"between", `root ::= "x"{1,3}`, []string{"x", "xxx"}, []string{"", "xxxx"}},
		{"zero to n", `root ::= "x"{0,2} "y"`, []string{"y", "xy", "xxy"}, []string{"xxxy"}},
		{"class", `root ::= [a-cX]+`, []string{"abcX", "b"}, []string{"d", "x", ""}},
		{"negated class", `root ::= "\"" [^"]* "\""`, []string{`""`, `"abc"`, `"é😀"`}, []string{`"a"b"`, `"`}},
		{"dot any char", `root ::= . .`, []string{"ab", "é😀", "\n\n"}, []string{"a", "abc", "\xff\xff"}},
		{"utf8 class", `root ::= [α-ω]+`, []string{"αβγ", "ω"}, []string{"a", "Ω", "\xce"}},
		{"escapes", `root ::= "\x41\u00e9\n\t\\\"" [\x30-\x39]`, []string{"Aé\n\t\\\"5"}, []string{"Ae\n\t\\\"5"}},
		{"comments and newlines", "# top\nroot ::= a | # tail\n  b\na ::= \"a\" # c\nb ::= (\n \"b\"\n)", []string{"a", "b"}, []string{"ab"}},
		{"recursion", `root ::= "(" root ")" | ""`, []string{"", "()", "((()))"}, []string{"(()", ")("}},
		{"dash names", "root ::= my-rule\nmy-rule ::= \"z\"", []string{"z"}, []string{""}},
		{"nested nullable star", `root ::= ("a"?)* "b"`, []string{"b", "aab"}, []string{"a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FromGBNF(tc.grammar)
			require.NoError(t, err)
			for _, s := range tc.accept {
				require.True(t, g.Match([]byte(s)), "should accept %q", s)
			}
			for _, s := range tc.reject {
				require.False(t, g.Match([]byte(s)), "should reject %q", s)
			}
		})
	}
}

func TestGBNFErrors(t *testing.T) {
	cases := []struct {
		name, grammar string
		want          error
		where         string
	}{
		{"no root", `x ::= "a"`, ErrSyntax, "no rule named root"},
		{"undefined", "root ::= a\n", ErrSyntax, "1:10"},
		{"unterminated", "root ::= \"abc", ErrSyntax, "1:14"},
		{"bad escape", `root ::= "\q"`, ErrSyntax, "1:12"},
		{"missing arrow", "root \"a\"", ErrSyntax, "1:6"},
		{"unclosed group", "root ::= (\"a\"", ErrSyntax, "expected )"},
		{"reversed range", `root ::= [z-a]`, ErrSyntax, "reversed"},
		{"bad count", `root ::= "a"{3,1}`, ErrSyntax, "max below min"},
		{"left recursion", `root ::= root "a" | "b"`, ErrLeftRecursion, "root"},
		{"indirect left recursion", "root ::= x \"a\"\nx ::= \"\"? root", ErrLeftRecursion, ""},
		{"duplicate", "root ::= \"a\"\nroot ::= \"b\"", ErrSyntax, "2:1"},
		{"huge count", `root ::= "a"{99999}`, ErrSyntax, "above"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromGBNF(tc.grammar)
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.where)
		})
	}
}

func FuzzGBNF(f *testing.F) {
	for _, s := range []string{
		`root ::= "a"`, `root ::= [^"]* | x{2,5}` + "\nx ::= \"\\u00e9\"",
		"root ::= (\"a\" | b)+\nb ::= [a-z]?", `root ::= root`, `root ::= .{3}`,
		arithmeticGBNF, csvGBNF, namesGBNF,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		g, err := FromGBNF(src)
		if err != nil {
			return
		}
		s := g.Start()
		for _, c := range []byte(src) {
			var ok bool
			if s, ok = g.Advance(s, c); !ok {
				break
			}
		}
		_ = g.CanEnd(s)
	})
}
