package check

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
)

func TestGemmaCheckCases(t *testing.T) {
	s, err := codegen.ShapeByName("gemma3-12b")
	require.NoError(t, err)
	var labels []string
	for _, c := range KernelCheckCases(s, nil, 1) {
		if strings.Contains(c.Label, "+win") || c.Family == "scale" || c.Family == "softcap" || c.Family == "geglu" || c.Family == "postnorm_add" {
			labels = append(labels, c.Label+" "+c.DType)
		}
	}
	var want []string
	for _, tag := range []string{"+win1024", "+win1024+cap50"} {
		for _, l := range []string{"attn_decode", "attn_decode+xq", "attn_decode_live", "attn_decode_live+xq",
			"attn_decode_live+preload", "attn_prefill", "attn_prefill@16"} {
			if l == "attn_prefill@16" {
				want = append(want, "attn_prefill@16"+tag+" f16 cache")
				continue
			}
			want = append(want, l+tag+" f16 cache")
		}
		for _, l := range []string{"attn_decode", "attn_decode_live+preload", "attn_prefill"} {
			want = append(want, l+tag+" q8_0 cache")
		}
	}
	require.Equal(t, append([]string{"scale f32", "softcap f32", "geglu f32", "postnorm_add f32", "postnorm_add+xq f32"}, want...), labels,
		"head dim 256 has no tensor-core prefill")
}

// At a small shape with a window of 64: every Gemma case builds its
// launch, decode's splits cover the window, and the untouched outputs fail
// the reference.
func TestGemmaCheckCasesLaunch(t *testing.T) {
	s := tiny(t)
	s.Window = 64
	ids := map[string]bool{}
	for _, c := range gemmaCases(s, 4, 1) {
		t.Run(c.Label+" "+c.DType, func(t *testing.T) {
			require.False(t, ids[c.ID()+c.Label], "duplicate case")
			ids[c.ID()+c.Label] = true
			for _, p := range c.ExtraArms { // kernel-check's other arms launch with their parameters bound
				l, err := c.Launch(p)
				require.NoError(t, err)
				for i, k := range l.Kernels {
					require.Len(t, l.Args[i], len(k.Params), k.Name)
				}
			}
			arm := c.Space().Default
			l, err := c.Launch(arm)
			require.NoError(t, err)
			for i, k := range l.Kernels {
				require.Len(t, l.Args[i], len(k.Params), k.Name)
				if strings.HasPrefix(k.Name, "attn_") {
					require.Contains(t, k.Name, "_win64")
				}
			}
			if c.Family == "attn_decode" || c.Family == "attn_decode_live" {
				splits := l.Args[0][len(l.Args[0])-1].Scalar
				require.Equal(t, codegen.DecodeArmOf(arm).Splits(64), splits, "splits over the window")
				require.Equal(t, int(l.Kernels[0].Launch(l.Dims).Grid[1]), splits)
			}
			outs := make([][]byte, len(l.Outs))
			for i, o := range l.Outs {
				outs[i] = append([]byte(nil), o.Data...)
			}
			e, err := c.Compare(outs)
			require.NoError(t, err)
			require.Greater(t, e, c.Tol, "untouched outputs must not pass")
		})
	}
}
