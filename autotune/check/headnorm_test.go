package check

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// The RoPE case with the q/k norms compares against the norms then RoPE:
// the reference's own outputs pass, RoPE without the norms does not, and
// a row whose k part was normalised in place does not either (the kernel
// leaves it as the product wrote it).
func TestRopeKVNormCompare(t *testing.T) {
	s, err := codegen.ShapeByName("tiny")
	require.NoError(t, err)
	c := RopeKVNorm(s, 3, 7)
	l, err := c.Launch(c.Space().Default)
	require.NoError(t, err)
	a := l.Args[0]
	require.Len(t, a, 9)
	rs := s.Rope(dtype.F16)
	qkv, pos, slot, inv := bytesF32(a[0].Buf.Data), bytesI32(a[1].Buf.Data), bytesI32(a[2].Buf.Data), bytesF32(a[3].Buf.Data)
	kvw := rs.HeadsKV * rs.HeadDim
	kc, err := codegen.DecodeCache(rs.Cache, kvw, a[4].Buf.Data)
	require.NoError(t, err)
	vc, err := codegen.DecodeCache(rs.Cache, kvw, a[5].Buf.Data)
	require.NoError(t, err)
	wq, wk := bytesF32(a[6].Buf.Data), bytesF32(a[7].Buf.Data)
	hs := codegen.HeadNormShape{Heads: rs.Heads, Heads2: rs.HeadsKV, HeadDim: rs.HeadDim, Stride: rs.QKVStride(), Eps: s.Eps}
	outs := func(in []float32, keepK bool) [][]byte {
		qo, ko, vo := codegen.RefRopeKV(rs, in, pos, slot, inv, kc, vc)
		if keepK {
			q0, k0, st := rs.Heads*rs.HeadDim, (rs.Heads+rs.HeadsKV)*rs.HeadDim, rs.QKVStride()
			for r := 0; r+st <= len(qo); r += st {
				copy(qo[r+q0:r+k0], qkv[r+q0:])
			}
		}
		kb, err := codegen.EncodeCache(rs.Cache, kvw, ko)
		require.NoError(t, err)
		vb, err := codegen.EncodeCache(rs.Cache, kvw, vo)
		require.NoError(t, err)
		return [][]byte{f32Bytes(qo), kb, vb}
	}
	normed := codegen.RefHeadRMSNorm(hs, qkv, wq, wk)
	e, err := c.Compare(outs(normed, true))
	require.NoError(t, err)
	require.Less(t, e, 1e-6)
	e, _ = c.Compare(outs(qkv, true))
	require.Greater(t, e, 0.01, "RoPE without the norms")
	e, _ = c.Compare(outs(normed, false))
	require.Greater(t, e, 0.01, "the row's k part normalised")
}
