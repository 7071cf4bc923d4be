package codegen

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// TestLowerYarn lowers a small qwen2 with YaRN scaling (factor 4 over an
// original context of 64) and without: the attention kernels' score scale
// carries YaRN's attention factor m = 1 + 0.1·ln 4 as m², and the RoPE
// table the device gets keeps the fast pairs' frequencies and divides the
// slow ones by 4.
func TestLowerYarn(t *testing.T) {
	yarn := smallQwen2
	yarn.RopeScaling = ir.RopeScaling{Type: "yarn", Factor: 4, OriginalContext: 64}
	m := 1 + 0.1*math.Log(4)
	for _, o := range []LowerOptions{
		{Class: Decode, MaxSeqs: 4, Context: 256, Cache: dtype.F16},
		{Class: Prefill, MaxTokens: 64, MaxSeqs: 2, Context: 256, Cache: dtype.F16},
	} {
		lower := func(hp ir.HParams) *Program {
			p, err := Lower(buildGraph(t, hp, synthTensors(hp, dtype.Q8_0, dtype.Q8_0)), o)
			require.NoError(t, err)
			return p
		}
		for _, c := range []struct {
			p     *Program
			scale float64
		}{{lower(smallQwen2), 1.0 / 8}, {lower(yarn), m * m / 8}} {
			define := "#define SCALE " + cfloat(float32(c.scale)) + "\n"
			n := 0
			for _, k := range c.p.Kernels {
				if strings.Contains(k.Source, "#define SCALE ") {
					require.Contains(t, k.Source, define, k.Name)
					n++
				}
			}
			require.Positive(t, n, "class %v: no attention kernel", o.Class)
		}

		table := func(p *Program) []float32 {
			for i := range p.Weights {
				if w := &p.Weights[i]; w.Kind == WeightRope {
					return w.RopeTable(nil)
				}
			}
			t.Fatal("no rope table")
			return nil
		}
		py := lower(yarn)
		require.Contains(t, py.String(), "scaling yarn factor 4 over 64 positions, ramp 1–32 turns")
		plain, scaled := table(lower(smallQwen2)), table(py)
		require.Len(t, scaled, 32)
		// head size 64, base 1e6: pair i turns 32 times over 64 positions at
		// i = 64·ln(64/(2π·32))/(2·ln 1e6) < 0, once at 5.38: a ramp from 0 to 6
		require.Equal(t, plain[0], scaled[0])
		for i := 1; i < 6; i++ {
			require.Less(t, scaled[i], plain[i], "pair %d", i)
			require.Greater(t, scaled[i], plain[i]/4, "pair %d", i)
		}
		for i := 6; i < 32; i++ {
			require.InEpsilon(t, plain[i]/4, scaled[i], 1e-6, "pair %d", i)
		}
	}
}
