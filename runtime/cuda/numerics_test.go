package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNumerics: the classes' names parse back, "" is the default class,
// only the width class is not invariant, and another name is refused.
func TestNumerics(t *testing.T) {
	for _, n := range []Numerics{NumericsWidth, NumericsF16, NumericsInt8} {
		p, err := ParseNumerics(n.String())
		require.NoError(t, err)
		require.Equal(t, n, p)
		require.Equal(t, n != NumericsWidth, n.Invariant(), n.String())
	}
	d, err := ParseNumerics("")
	require.NoError(t, err)
	require.Equal(t, NumericsDefault, d)
	require.Equal(t, DefaultNumerics, d.Resolve())
	require.Equal(t, DefaultNumerics.String(), d.String())
	for s, want := range map[string]Numerics{"TRUE": NumericsF16, "on": NumericsF16, "false": NumericsWidth, "Int8": NumericsInt8} {
		n, err := ParseNumerics(s)
		require.NoError(t, err, s)
		require.Equal(t, want, n, s)
	}
	_, err = ParseNumerics("bf16")
	require.ErrorIs(t, err, ErrArg)
	m := Manifest{}
	n, err := m.NumericsClass()
	require.NoError(t, err)
	require.Equal(t, NumericsWidth, n, "a manifest of before the field was compiled off")
	m.Numerics = "int8"
	n, err = m.NumericsClass()
	require.NoError(t, err)
	require.Equal(t, NumericsInt8, n)
}

// TestLowerNumerics: the class reaches the lowering as BatchInvariant and
// InvariantInt8.
func TestLowerNumerics(t *testing.T) {
	for n, want := range map[Numerics][2]bool{NumericsWidth: {false, false}, NumericsF16: {true, false}, NumericsInt8: {true, true},
		NumericsDefault: {DefaultNumerics.Invariant(), DefaultNumerics == NumericsInt8}} {
		o := lowerOptions(BackendOptions{Numerics: n}, 0)
		require.Equal(t, want, [2]bool{o.BatchInvariant, o.InvariantInt8}, n.String())
	}
}
