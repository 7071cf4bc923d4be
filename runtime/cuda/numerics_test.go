package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
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

// TestStepOrder: in an invariant class a step's one-token entries run
// first as a launch sequence of their own (so a decode beside prompt
// chunks still runs the decode program), the prompt chunks after them;
// otherwise, and in a pipeline stage, the batch's order.
func TestStepOrder(t *testing.T) {
	batch := []runtime.SeqStep{{Tokens: []int32{1, 2, 3}}, {Tokens: []int32{4}}, {Tokens: []int32{5, 6}}, {Tokens: []int32{7}}}
	b := &Backend{opts: BackendOptions{Numerics: NumericsInt8}}
	order, split := b.stepOrder(batch)
	require.Equal(t, []int{1, 3, 0, 2}, order)
	require.Equal(t, 2, split)
	b.opts.Numerics = NumericsWidth
	order, split = b.stepOrder(batch)
	require.Equal(t, []int{0, 1, 2, 3}, order)
	require.Equal(t, 4, split)
	b.opts.Numerics, b.stage = NumericsF16, &stageIO{}
	order, split = b.stepOrder(batch)
	require.Equal(t, []int{0, 1, 2, 3}, order, "a pipeline stage keeps the batch's order")
	require.Equal(t, 4, split)
	b.stage = nil
	_, split = b.stepOrder(batch[1:2])
	require.Equal(t, 1, split, "decodes alone: no early end")
}
