package check

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

var lowBitTypes = []dtype.Type{dtype.Q2_K, dtype.Q3_K, dtype.IQ4_NL, dtype.IQ4_XS}

// `memra kernel-check --types q2_k,q3_k,iq4_nl,iq4_xs` has, for each type
// at each real dense shape, the embedding, the QKV product as the decode
// GEMV, the prefill mma and gemm_small, and the FFN-down GEMV: the
// products lowering runs for these types (the file's layout only, so no
// repacked arms beside the default).
func TestKernelCheckCasesLowBit(t *testing.T) {
	for _, name := range []string{"llama3-8b", "qwen2.5-7b", "qwen3-8b", "tiny"} {
		s, err := codegen.ShapeByName(name)
		require.NoError(t, err)
		got := map[string]bool{}
		for _, c := range KernelCheckCases(s, lowBitTypes, 1) {
			got[c.Label+" "+c.DType] = true
			if c.Family == "gemv" {
				for _, a := range c.ExtraArms {
					require.Zero(t, a["layout"], "%s %s: a repacked arm", c.Label, c.DType)
				}
			}
		}
		for _, ty := range lowBitTypes {
			dt := " " + map[dtype.Type]string{dtype.Q2_K: "q2_k", dtype.Q3_K: "q3_k", dtype.IQ4_NL: "iq4_nl", dtype.IQ4_XS: "iq4_xs"}[ty]
			for _, l := range []string{"embedding", "gemv/qkv", "mma/qkv", "gemm_small/qkv", "gemv/down"} {
				require.True(t, got[l+dt], "%s: no %s case", name, l+dt)
			}
		}
	}
}

// Each low-bit case launches its default arm with weights in the file's
// layout: the weights dequantised by ir/dtype and multiplied (or looked
// up) on the host, with the tensor-core products' bf16 operands, pass the
// case's reference, and the untouched outputs do not.
func TestLowBitCasesHost(t *testing.T) {
	for _, c := range KernelCheckCases(tiny(t), lowBitTypes, 2) {
		if c.Family != "embedding" && c.Family != "gemv" && c.Family != "gemm_small" && c.Family != "mma" {
			continue
		}
		t.Run(c.Label+" "+c.DType, func(t *testing.T) {
			ty, err := dtype.Parse(c.DType)
			require.NoError(t, err)
			l, err := c.Launch(c.Space().Default)
			require.NoError(t, err)
			require.Len(t, l.Kernels, 1)
			require.Contains(t, l.Kernels[0].Source, "dq32_"+c.DType+"(")
			args := l.Args[0]
			var got []float32
			if c.Family == "embedding" {
				ids := args[0].Buf.Data
				table := args[1].Buf.Data
				dim := len(l.Outs[0].Data) / 4 / l.Dims.Tokens
				rb, err := ty.RowBytes(dim)
				require.NoError(t, err)
				for i := 0; i < l.Dims.Tokens; i++ {
					id := int(bytesI32(ids)[i])
					row := make([]float32, dim)
					require.NoError(t, dtype.Dequantize(ty, table[id*rb:(id+1)*rb], row))
					got = append(got, row...)
				}
			} else {
				k, n, m := c.K, c.N, l.Dims.Tokens
				w := make([]float32, n*k)
				require.NoError(t, dtype.Dequantize(ty, args[0].Buf.Data, w))
				x := bytesF32(args[1].Buf.Data)
				if c.Family != "gemv" {
					// the tensor-core products multiply bf16 operands
					for _, v := range [][]float32{w, x} {
						for i := range v {
							v[i] = dtype.BF16ToF32(dtype.F32ToBF16(v[i]))
						}
					}
				}
				got = cpuGEMV(w, n, k, x, bytesF32(args[2].Buf.Data), m)
			}
			untouched := append([]byte(nil), l.Outs[0].Data...)
			e, err := c.Compare([][]byte{f32Bytes(got)})
			require.NoError(t, err)
			require.LessOrEqual(t, e, c.Tol)
			e, err = c.Compare([][]byte{untouched})
			require.NoError(t, err)
			require.False(t, e <= c.Tol, "untouched outputs pass: %g", e)
		})
	}
}
