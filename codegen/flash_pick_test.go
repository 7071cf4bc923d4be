package codegen

import (
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// flashKernel returns the prefill program's tensor-core attention kernel
// and the program's tile rows.
func flashKernel(t *testing.T, p *Program) (*Kernel, int) {
	t.Helper()
	var found *Kernel
	for _, k := range p.Kernels {
		if k.Family == "attn_flash" {
			require.Nil(t, found, "one flash kernel a program: %s and %s", k.Name, found)
			found = k
		}
	}
	require.NotNil(t, found, "a flash kernel")
	return found, p.FlashRows
}

// A tunedb entry of family attn_flash, not an environment variable, picks
// the tensor-core prefill attention's arm: the register arm or the cp.async
// ring and its tile rows; untuned the default ring; the ring is refused for
// the 8-bit cache (another class), whose programs stage through registers.
func TestLowerFlashPick(t *testing.T) {
	g := buildGraph(t, smallLlama, synthTensors(smallLlama, dtype.Q4_K, dtype.Q6_K))
	pre := LowerOptions{Class: Prefill, MaxTokens: 128, MaxSeqs: 4, Context: 256, Cache: dtype.F16, Argmax: true, FlashPrefill: true}
	p, err := Lower(g, pre)
	require.NoError(t, err)
	k, rows := flashKernel(t, p)
	require.True(t, strings.HasSuffix(k.Name, "_w4_s2"), "untuned: the ring: %s", k.Name)
	require.Equal(t, DefaultFlashArm.Rows(), rows)

	reg := pre
	reg.Pick = func(family, class string) (Point, bool) {
		if family == "attn_flash" {
			return FlashArm{Warps: 4, Stages: 1}.Point(), true
		}
		return nil, false
	}
	p, err = Lower(g, reg)
	require.NoError(t, err)
	k, _ = flashKernel(t, p)
	require.True(t, strings.HasSuffix(k.Name, "_w4"), "a pick of the register arm: %s", k.Name)
	require.NotContains(t, k.Source, "cp.async")

	var asked []string
	tuned := pre
	tuned.Pick = func(family, class string) (Point, bool) {
		if family == "attn_flash" {
			asked = append(asked, class)
			return FlashArm{Warps: 8, Stages: 2}.Point(), true
		}
		return nil, false
	}
	p, err = Lower(g, tuned)
	require.NoError(t, err)
	k, rows = flashKernel(t, p)
	require.True(t, strings.HasSuffix(k.Name, "_w8_s2"), k.Name)
	require.Contains(t, k.Source, "cp.async")
	require.Equal(t, 128, rows)
	require.Contains(t, asked, AttnClass(AttnShape{Heads: smallLlama.Heads, HeadsKV: smallLlama.HeadsKV, HeadDim: smallLlama.HeadDim, Cache: dtype.F16}))
	geo := k.Launch(Dims{Tokens: 128, Seqs: 4, KVLen: 256})
	require.Equal(t, uint32(2*2*flashKeys*(smallLlama.HeadDim+8)*2), geo.Shared)

	q8 := tuned
	q8.Cache = CacheQ8
	p, err = Lower(g, q8)
	require.NoError(t, err)
	k, _ = flashKernel(t, p)
	require.True(t, strings.HasSuffix(k.Name, "_w4"), "the 8-bit cache stages through registers: %s", k.Name)
}
