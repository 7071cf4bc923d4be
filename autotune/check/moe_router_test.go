package check

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestMoERouterNormCompare: the router case with the norm before it passes
// the CPU's norm and product and refuses logits of the unnormalised row
// and normalised rows without the norm's weight.
func TestMoERouterNormCompare(t *testing.T) {
	s, err := codegen.ShapeByName("tiny-moe")
	require.NoError(t, err)
	const m = 3
	c := MoERouterNorm(s.Name, s.Experts, s.Hidden, s.Eps, m, false, 5)
	l, err := c.Launch(c.Space().Default)
	require.NoError(t, err)
	W, x, nw := l.Args[0][0].Buf.Data, bytesF32(l.Args[0][1].Buf.Data), bytesF32(l.Args[0][2].Buf.Data)
	_, h := codegen.RefRMSNormAdd(s.Hidden, s.Eps, false, x, nil, nw)
	y, err := refMatMul(dtype.F32, s.Experts, s.Hidden, W, h, m, nil, false)
	require.NoError(t, err)
	e, err := c.Compare([][]byte{f32Bytes(y), f32Bytes(h)})
	require.NoError(t, err)
	require.Less(t, e, c.Tol)

	raw, err := refMatMul(dtype.F32, s.Experts, s.Hidden, W, x, m, nil, false)
	require.NoError(t, err)
	e, err = c.Compare([][]byte{f32Bytes(raw), f32Bytes(h)})
	require.NoError(t, err)
	require.Greater(t, e, c.Tol, "the logits of the row before the norm")

	ones := make([]float32, s.Hidden)
	for i := range ones {
		ones[i] = 1
	}
	_, bare := codegen.RefRMSNormAdd(s.Hidden, s.Eps, false, x, nil, ones)
	e, err = c.Compare([][]byte{f32Bytes(y), f32Bytes(bare)})
	require.NoError(t, err)
	require.Greater(t, e, c.Tol, "normalised rows without the norm's weight")

	// with the quantised rows: they must be XQuant's bytes of the rows it wrote
	cq := MoERouterNorm(s.Name, s.Experts, s.Hidden, s.Eps, m, true, 5)
	lq, err := cq.Launch(cq.Space().Default)
	require.NoError(t, err)
	W, x, nw = lq.Args[0][0].Buf.Data, bytesF32(lq.Args[0][1].Buf.Data), bytesF32(lq.Args[0][2].Buf.Data)
	_, h = codegen.RefRMSNormAdd(s.Hidden, s.Eps, false, x, nil, nw)
	y, err = refMatMul(dtype.F32, s.Experts, s.Hidden, W, h, m, nil, false)
	require.NoError(t, err)
	q := make([]byte, m*codegen.XQRowBytes(s.Hidden))
	for i := range q {
		q[i] = byte(i)
	}
	e, err = cq.Compare([][]byte{f32Bytes(y), f32Bytes(h), q, slices.Clone(q)})
	require.NoError(t, err)
	require.Less(t, e, cq.Tol)
	other := slices.Clone(q)
	other[len(other)/2]++
	e, err = cq.Compare([][]byte{f32Bytes(y), f32Bytes(h), q, other})
	require.NoError(t, err)
	require.True(t, math.IsInf(e, 1), "rows other than XQuant's")
}
