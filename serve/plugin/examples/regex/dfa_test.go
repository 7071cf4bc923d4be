package main

import (
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func matches(d *dfa, s string) bool {
	st := d.Start()
	for i := 0; i < len(s); i++ {
		if st = d.Next(st, s[i]); st < 0 {
			return false
		}
	}
	return d.CanEnd(st)
}

func TestDFAAgreesWithRegexp(t *testing.T) {
	exprs := []string{`[a-c]+x?`, `(ab|a)*c`, `^héllo|wörld$`, `\d{2,3}-[^-]+`, `(?i)abc`, `x*`, `.é.`}
	alphabet := []string{"a", "b", "c", "x", "1", "2", "-", "é", "ö", "h", "l", "o", "w", "r", "d", "A", "e"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, e := range exprs {
		d, err := compile(e)
		require.NoError(t, err, e)
		re := regexp.MustCompile(`^(?:` + e + `)$`)
		for range 2000 {
			s := ""
			for range rng.IntN(7) {
				s += alphabet[rng.IntN(len(alphabet))]
			}
			require.Equal(t, re.MatchString(s), matches(d, s), "expr %q input %q", e, s)
		}
	}
}

func TestDFARejectsInvalidUTF8(t *testing.T) {
	d, err := compile(`.*`)
	require.NoError(t, err)
	require.True(t, matches(d, "é"))
	require.False(t, matches(d, "\xff"))
	require.False(t, matches(d, "\xc3"), "a partial rune cannot end the output")
	d, err = compile(`[a-z]+`)
	require.NoError(t, err)
	require.Less(t, d.Next(d.Start(), 0xc3), int32(0), "no rune of [a-z] starts with 0xc3")
	d, err = compile(`é`)
	require.NoError(t, err)
	require.GreaterOrEqual(t, d.Next(d.Start(), 0xc3), int32(0))
	require.Less(t, d.Next(d.Start(), 0xc4), int32(0))
}

func TestDFARefuses(t *testing.T) {
	for _, e := range []string{`a(`, `\bfoo`, `(?m)^a`} {
		_, err := compile(e)
		require.ErrorIs(t, err, errRegex, e)
	}
}
