package codegen

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStepInputsLayout packs inputs of every width as the runtime does,
// runs the reference kernel and checks each word lands where the copies
// it replaces put it: the first width rows of each input at its pitch, the
// page tables, the records, and the fed tokens from their strided source.
func TestStepInputsLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const pitch, sentinel = 40, 0xdeadbeef
	fill := func(n int) []uint32 {
		v := make([]uint32, n)
		for i := range v {
			v[i] = rng.Uint32()
		}
		return v
	}
	for _, c := range []struct{ width, tab, rec, feedStride, feedN int }{
		{1, 2, 0, 0, 0}, {1, 1, 16, 1, 1}, {7, 9, 0, 1, 5}, {33, 60, 48, 4, 33}, {40, 1, 0, 4, 12}, {0, 1, 0, 0, 0},
	} {
		src := fill(int(NumInputs) * pitch)
		tabIn, recIn := fill(c.tab), fill(c.rec)
		host := make([]uint32, StepInputsWords(c.width, c.tab, c.rec)+3)
		require.Equal(t, len(host)-3, PackStepInputs(host, src, pitch, c.width, tabIn, recIn))
		var feed []uint32
		if c.feedN > 0 {
			feed = fill(c.feedN * c.feedStride)
		}
		inputs := make([]uint32, int(NumInputs)*pitch)
		for i := range inputs {
			inputs[i] = sentinel
		}
		tab, rec := make([]uint32, c.tab), make([]uint32, c.rec)
		RefStepInputs(host, inputs, pitch, c.width, tab, rec, feed, c.feedStride, c.feedN)
		for a := range int(NumInputs) {
			for r := range pitch {
				want := uint32(sentinel)
				switch {
				case r >= c.width:
				case Input(a) == InTokens && r < c.feedN:
					want = feed[r*c.feedStride]
				default:
					want = src[a*pitch+r]
				}
				require.Equal(t, want, inputs[a*pitch+r], "width %d: input %v row %d", c.width, Input(a), r)
			}
		}
		require.Equal(t, tabIn, tab)
		require.Equal(t, recIn, rec)
	}
}

func TestStepInputsKernel(t *testing.T) {
	k, err := StepInputs(DefaultBlockArm)
	require.NoError(t, err)
	require.Equal(t, "step_inputs", k.Family)
	require.Len(t, k.Params, 11)
	require.Contains(t, k.Source, "#define IN_TOKENS 0")
	require.Contains(t, k.Source, "#define NUM_INPUTS 8")
	require.Contains(t, k.Source, "__ldcv(")
	require.NotContains(t, k.Source, "griddepcontrol", "launched without programmatic dependent launch")
	require.True(t, strings.HasPrefix(k.Source, "// Code generated"))
	for _, c := range []struct{ words, blocks int }{{0, 1}, {1, 1}, {256, 1}, {257, 2}, {64 * 256, 64}, {1 << 20, StepInputsMaxBlocks}} {
		g := k.Launch(Dims{Tokens: c.words})
		require.Equal(t, uint32(c.blocks), g.Grid[0], "%d words", c.words)
		require.Equal(t, uint32(256), g.Block[0])
	}
	_, err = StepInputs(BlockArm{Threads: 100})
	require.Error(t, err)
}
