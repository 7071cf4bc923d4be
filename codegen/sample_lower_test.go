package codegen

import (
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// TestLowerSample: with Sample, both classes end with the argmax and the
// sampling launch over the logits; the sampling inputs are bound by kind,
// and the argmax and sampling outputs stay live to the last launch, so no
// buffer shares their bytes whichever of the two the host reads.
func TestLowerSample(t *testing.T) {
	for _, o := range []LowerOptions{
		{Class: Decode, MaxSeqs: 8, Context: 256, Cache: dtype.F16, Argmax: true, Sample: true},
		{Class: Prefill, MaxTokens: 64, MaxSeqs: 4, Context: 256, Cache: dtype.F16, Argmax: true, Sample: true},
	} {
		p, err := Lower(storiesGraph(t), o)
		require.NoError(t, err)
		last := len(p.Launches) - 1
		l := p.Launches[last]
		k := p.Kernels[l.Kernel]
		require.Equal(t, "sample", k.Family)
		require.Equal(t, "argmax", p.Kernels[p.Launches[last-1].Kernel].Family)
		require.Equal(t, SampleClass(p.Vocab), "v512")
		require.Contains(t, k.Name, "_v512_t1024")
		var inputs []SampleInput
		for i, a := range l.Args {
			switch a.Kind {
			case ArgSample:
				inputs = append(inputs, SampleInput(a.Index))
			case ArgBuffer:
				if i == 0 {
					require.Equal(t, p.Logits, a.Index, "the sampler reads the logits")
				}
			}
		}
		require.Equal(t, []SampleInput{SampleRecords, SampleBias, SamplePenalties, SampleMasks}, inputs)
		out := p.Buffers.Buffers[p.SampleOut]
		require.True(t, out.Int32)
		require.Equal(t, SampleOutWords, out.Width)
		require.Equal(t, last, out.Last)
		require.Equal(t, last, p.Buffers.Buffers[p.Argmax].Last)
		require.NoError(t, p.Buffers.Check())
		for i := range p.Buffers.Buffers {
			for _, j := range []int{p.Argmax, p.SampleOut, p.Logits} {
				if i != j {
					require.False(t, p.Buffers.Overlaps(i, j), "b%d b%d", i, j)
				}
			}
		}
		require.Contains(t, p.String(), ", sample b")
		require.Contains(t, p.String(), "rec=sample.records")
	}
}
