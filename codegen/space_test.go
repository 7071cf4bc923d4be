package codegen

import (
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

func TestSpacesMatchTypedArms(t *testing.T) {
	typed := map[string][]string{}
	for _, a := range BlockArms() {
		typed["block"] = append(typed["block"], a.String())
	}
	for _, a := range GEMVArms() {
		typed["gemv"] = append(typed["gemv"], a.String())
	}
	for _, a := range MMAArms() {
		typed["mma"] = append(typed["mma"], a.String())
	}
	for _, a := range DecodeArms() {
		typed["attn_decode"] = append(typed["attn_decode"], a.String())
	}
	for _, a := range PrefillArms() {
		typed["attn_prefill"] = append(typed["attn_prefill"], a.String())
	}
	for _, a := range enumerate(FlashKnobs, func(v map[string]int) FlashArm { return FlashArm{Warps: v["warps"], Stages: v["stages"]} }, FlashArm.Validate) {
		typed["attn_flash"] = append(typed["attn_flash"], a.String())
	}
	for _, a := range GemmSmallArms() {
		typed["gemm_small"] = append(typed["gemm_small"], a.String())
	}
	for _, a := range enumerate(DecodeLiveKnobs, func(v map[string]int) DecodeArm {
		return DecodeArm{Threads: v["threads"], Chunk: v["chunk"], Live: v["live"], Fuse: v["fuse"] != 0}
	}, DecodeArm.Validate) {
		typed["attn_decode_live"] = append(typed["attn_decode_live"], a.String())
	}
	for _, a := range MoEArms() {
		typed["moe_gemv"] = append(typed["moe_gemv"], a.String())
	}
	typed["tail"] = []string{"off", "on"}
	for _, s := range Spaces() {
		t.Run(s.Family, func(t *testing.T) {
			want, ok := typed[s.Family]
			if !ok {
				want = typed["block"]
			}
			var got []string
			for _, p := range s.Arms() {
				require.NoError(t, s.Valid(p))
				got = append(got, s.ArmName(p))
			}
			require.Equal(t, want, got)
			require.NoError(t, s.Valid(s.Default), "default arm")
			require.Contains(t, got, s.ArmName(s.Default))
		})
	}
}

func TestSpaceValid(t *testing.T) {
	gemv, err := SpaceByName("gemv")
	require.NoError(t, err)
	tests := []struct {
		name string
		p    Point
		ok   bool
	}{
		{"default", DefaultGEMVArm.Point(), true},
		{"missing knob", Point{"threads": 256, "rows_per_block": 8, "unroll": 4}, false},
		{"extra knob", Point{"threads": 256, "rows_per_block": 8, "unroll": 4, "shared_x": 1, "x": 1}, false},
		{"wrong knob", Point{"threads": 256, "rows_per_block": 8, "unroll": 4, "sharedx": 1}, false},
		{"constraint", Point{"threads": 64, "rows_per_block": 4, "unroll": 4, "shared_x": 1}, false},
		{"outside list but valid", Point{"threads": 96, "rows_per_block": 1, "unroll": 3, "shared_x": 0}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ok {
				require.NoError(t, gemv.Valid(tc.p))
			} else {
				require.ErrorIs(t, gemv.Valid(tc.p), ErrUnsupported)
			}
		})
	}
	_, err = SpaceByName("nope")
	require.ErrorIs(t, err, ErrUnsupported)
	require.Equal(t, "rows_per_block=8,shared_x=1,threads=256,unroll=4", DefaultGEMVArm.Point().String())
	require.True(t, DefaultMMAArm.Point().Equal(MMAArmOf(DefaultMMAArm.Point()).Point()))
	require.False(t, DefaultMMAArm.Point().Equal(DefaultGEMVArm.Point()))
}

// TestGEMVOneSpace: the one-row space of a repacked type is its XQ 2 arms
// with one activation row a block, the untuned arm among them; a type
// without a repacked layout has none.
func TestGEMVOneSpace(t *testing.T) {
	s := GEMVOneSpaceFor(dtype.Q4_K)
	arms := s.Arms()
	// 8 block shapes (2 to 16 warps; each row set one warp, or two splitting K) × 4 unrolls × 3 rows a
	// warp, each with MinBlocks 0, 2 and 4 where that many blocks hold at most 1024 threads (the 512-thread
	// shapes, 24 of the 96, take 0 and 2)
	require.Len(t, arms, 72*3+24*2)
	names := map[string]bool{}
	for _, p := range arms {
		a := GEMVArmOf(p)
		require.NoError(t, a.ValidFor(dtype.Q4_K))
		require.Equal(t, 1, a.Layout, s.ArmName(p))
		require.Equal(t, 1, a.BatchRows, s.ArmName(p))
		require.Equal(t, 2, a.XQ, s.ArmName(p))
		names[s.ArmName(p)] = true
	}
	require.True(t, names[DefaultXQGlobalOneArm.String()])
	require.True(t, names[DefaultXQGlobalOneArm.Split(2).String()], "the split arm lowering runs untuned on products of few blocks")
	require.False(t, names["t512_r4_u1_s1_l1_g1_w4"], "four warps a row set are not searched")
	require.Equal(t, DefaultXQGlobalOneArm, GEMVArmOf(s.Default))
	rows, prefetch := map[int]bool{}, map[int]int{}
	for _, p := range GEMVBatchSpaceFor(dtype.Q4_K).Arms() {
		require.Equal(t, 1, GEMVArmOf(p).kSplit(), "batch arms that split K are not searched")
		rows[GEMVArmOf(p).BatchRows] = true
		prefetch[GEMVArmOf(p).Prefetch]++
	}
	require.Equal(t, map[int]bool{4: true, 8: true, 16: true}, rows, "batch arms of 4, 8 and 16 rows a block")
	require.Equal(t, prefetch[0], prefetch[1], "each batch arm with and without the prefetch")
	for _, p := range GEMVOneSpaceFor(dtype.Q4_K).Arms() {
		require.Zero(t, GEMVArmOf(p).Prefetch, "one-row arms have no next row to load")
	}
	require.Empty(t, GEMVOneSpaceFor(dtype.F32).Arms())
}

// TestSplitUntuned: the untuned one-row arm splits where its blocks are
// fewer than the card's multiprocessors, and only an unsplit XQ 2 one-row
// arm that stays within 1024 threads.
func TestSplitUntuned(t *testing.T) {
	a := DefaultXQGlobalOneArm                    // 32 rows a block
	require.True(t, SplitUntuned(a, 4096, 132))   // 128 blocks
	require.False(t, SplitUntuned(a, 12288, 132)) // 384 blocks
	require.False(t, SplitUntuned(a, 4096, 128))  // exactly one block a multiprocessor
	require.False(t, SplitUntuned(a.Split(2), 4096, 132), "already split")
	require.False(t, SplitUntuned(DefaultXQGlobalBatchArm, 4096, 132), "batch arm")
	require.False(t, SplitUntuned(GEMVArm{Threads: 1024, RowsPerBlock: 32, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 1}, 64, 132), "2048 threads")
}
