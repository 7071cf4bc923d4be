package codegen

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestLowerLargePick: in a 16-sequence decode program the f16 tensor-core
// arm runs large steps untuned (where the rows allow); a tunedb pick for a product's
// GEMVLargeClass of the int8 arm gives the int8 kernel instead (where it
// computes the product's epilogue), a pick of the batch arm gives none (the batch kernel serves
// those steps), and a pick for one product alone still lowers.
func TestLowerLargePick(t *testing.T) {
	llama := smallQwen3
	llama.Arch, llama.Name, llama.RopeStyle, llama.QKNorm, llama.TiedEmbedding = "llama", "llama-small", ir.RopeInterleaved, false, false
	g := buildGraph(t, llama, synthTensors(llama, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 16, Context: 256, Cache: dtype.F16, NoQuantOut: QuantOutBatch}
	large := func(p *Program, tag string) (n, tagged int) {
		for _, ln := range p.Launches {
			if ln.Large > 0 {
				n++
				if strings.Contains(p.Kernels[ln.Large-1].Name, tag) {
					tagged++
				}
			}
		}
		return n, tagged
	}
	pickAll := func(a GEMVArm, picks map[string]bool) LowerOptions {
		oo := o
		oo.Pick = func(family, class string) (Point, bool) {
			if family == "gemv" && strings.HasSuffix(class, "_large") {
				picks[class] = true
				return a.Point(), true
			}
			return nil, false
		}
		return oo
	}
	untuned, err := Lower(g, o)
	require.NoError(t, err)
	n, half := large(untuned, "_h16_")
	require.Positive(t, n)
	require.Positive(t, half, "untuned: the f16 arm")

	picks := map[string]bool{}
	p, err := Lower(g, pickAll(DefaultXQMMAPipeArm, picks))
	require.NoError(t, err)
	m, int8 := large(p, "_m16_")
	require.Positive(t, m)
	require.Equal(t, m, int8, "picked: the int8 arm")
	_, left := large(p, "_h16_")
	require.Zero(t, left)
	require.Contains(t, picks, GEMVLargeClass(ProductClass(dtype.Q4_K, 2*llama.FFN, llama.Embedding, false)), "gate/up looked up")

	p, err = Lower(g, pickAll(DefaultXQGlobalBatchArm, map[string]bool{}))
	require.NoError(t, err)
	m, _ = large(p, "")
	require.Zero(t, m, "a batch arm picked: no large kernel")

	one := o
	gateUp := GEMVLargeClass(ProductClass(dtype.Q4_K, 2*llama.FFN, llama.Embedding, false))
	one.Pick = func(family, class string) (Point, bool) {
		return DefaultXQMMAPipeArm.Point(), family == "gemv" && class == gateUp
	}
	p, err = Lower(g, one)
	require.NoError(t, err)
	_, int8 = large(p, "_m16_")
	_, half2 := large(p, "_h16_")
	require.Positive(t, int8)
	require.Less(t, half2, half, "the picked product left the f16 arm")
}

// TestGEMVLargeSpace: the large space holds tensor-core arms of 16 rows a
// block, f16 ones only for the f16 kernel's types, with the untuned arm as
// its default, and refuses the batch arm.
func TestGEMVLargeSpace(t *testing.T) {
	for ty, want := range map[dtype.Type]GEMVArm{dtype.Q4_K: DefaultXQHalfArm, dtype.Q6_K: DefaultXQHalfArm, dtype.Q8_0: DefaultXQMMAPipeArm} {
		s := GEMVLargeSpaceFor(ty)
		require.Equal(t, want.Point(), s.Default, ty)
		require.NoError(t, s.Valid(s.Default), ty)
		require.Error(t, s.Valid(DefaultXQGlobalBatchArm.Point()), ty)
		arms := s.Arms()
		require.NotEmpty(t, arms, ty)
		for _, p := range arms {
			a := GEMVArmOf(p)
			require.Equal(t, 16, a.BatchRows, ty)
			require.True(t, a.XQ == 3 || (a.XQ == 4 && mmahTypes[ty]), "%v %v", ty, a)
		}
	}
}
