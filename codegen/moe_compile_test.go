package codegen_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestCompileGateMoE compiles the mixture-of-experts kernels to compute_90
// PTX: at the tiny, Qwen3-30B-A3B and Mixtral-8x7B shapes for every weight
// type the rows allow, a gate/up pair of two types (Q4_K_M's Q4_K beside a
// Q6_K), ragged row sets and small arms, and the sum without residual.
func TestCompileGateMoE(t *testing.T) {
	nv := nvrtcOrSkip(t)
	var ks []*codegen.Kernel
	for _, name := range []string{"tiny-moe", "qwen3-30b-a3b", "mixtral-8x7b"} {
		s, err := codegen.ShapeByName(name)
		require.NoError(t, err)
		m, err := codegen.MoEKernels(s, codegen.WeightTypes)
		require.NoError(t, err, name)
		require.Greater(t, len(m), 3, name)
		ks = append(ks, m...)
	}
	mixed := codegen.MoEShape{Type: dtype.Q4_K, Up: dtype.Q6_K, SwiGLU: true, N: 100, K: 512, Experts: 6, Used: 3}
	for _, a := range []codegen.MoEArm{{RowsPerBlock: 3, BatchRows: 5}, {RowsPerBlock: 1, BatchRows: 16}, {RowsPerBlock: 16, BatchRows: 1, One: 1}} {
		k, err := codegen.MoEGEMV(mixed, a)
		require.NoError(t, err)
		ks = append(ks, k)
	}
	for _, c := range []struct{ e, used int }{{1, 1}, {60, 4}, {256, 8}, {512, 16}} {
		k, err := codegen.MoERoute(c.e, c.used, c.used%8 == 0, codegen.BlockArm{Threads: 96})
		require.NoError(t, err)
		ks = append(ks, k)
	}
	k, err := codegen.MoESum(100, 3, false, codegen.BlockArm{Threads: 64})
	require.NoError(t, err)
	ks = append(ks, k)
	compileAll(t, nv, "compute_90", ks)
}

// TestCompileMoEProgramKernels compiles every kernel of the lowered
// mixture-of-experts test programs (qwen3moe Q4_K with Q6_K downs, mixtral
// Q8_0; decode at one and eight sequences, prefill, the exact prefill) to
// compute_90 PTX.
func TestCompileMoEProgramKernels(t *testing.T) {
	nv := nvrtcOrSkip(t)
	seen := map[string]bool{}
	var ks []*codegen.Kernel
	for _, p := range codegen.MoEProgramsForTest(t) {
		for _, k := range p.Kernels {
			if !seen[k.Name] {
				seen[k.Name] = true
				ks = append(ks, k)
			}
		}
	}
	compileAll(t, nv, "compute_90", ks)
}

// TestCompileMoEXQ compiles the experts' products on int8 activations
// (codegen.MoEXQ) to compute_90 PTX: the gate/up pair and the down product
// at the Qwen3-30B-A3B and Mixtral-8x7B shapes for every repacked type
// whose rows the lanes hold, in one-row and grouped arms, ragged row sets
// included.
func TestCompileMoEXQ(t *testing.T) {
	nv := nvrtcOrSkip(t)
	var ks []*codegen.Kernel
	for _, name := range []string{"tiny-moe", "qwen3-30b-a3b", "mixtral-8x7b"} {
		s, err := codegen.ShapeByName(name)
		require.NoError(t, err)
		for _, typ := range codegen.RepackTypes {
			gu, dn := codegen.MoEShapes(s, typ)
			for _, p := range []codegen.MoEShape{gu, dn} {
				for _, a := range []codegen.MoEArm{codegen.DefaultMoEOneArm, codegen.DefaultMoEArm, {RowsPerBlock: 3, BatchRows: 5}} {
					k, err := codegen.MoEXQ(p, a)
					if err != nil {
						require.ErrorIs(t, err, codegen.ErrUnsupported, "%s %v %+v", name, typ, p)
						continue
					}
					ks = append(ks, k)
				}
			}
		}
		// the summing down product of one token, and with the next norm's quantisation in its last block
		for _, typ := range codegen.RepackTypes {
			_, dn := codegen.MoEShapes(s, typ)
			dn.Sum = true
			for _, next := range []bool{false, true} {
				dn.QuantNext = next
				for _, rows := range []int{8, 16} {
					a := codegen.DefaultMoEOneArm
					a.XQ, a.RowsPerBlock = 1, rows
					k, err := codegen.MoEXQ(dn, a)
					if err != nil {
						require.ErrorIs(t, err, codegen.ErrUnsupported, "%s %v", name, typ)
						continue
					}
					require.Equal(t, next, strings.HasSuffix(k.Name, "_qn"), k.Name)
					ks = append(ks, k)
				}
			}
		}
		// the quantiser of the down product's input: a token's slot rows side by side
		q, err := codegen.XQuant(s.ExpertsUsed*s.ExpertFFN, codegen.Prologue{})
		require.NoError(t, err, name)
		ks = append(ks, q)
	}
	require.NotEmpty(t, ks)
	compileAll(t, nv, "compute_90", ks)
}
