package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime/synth"
)

// TestLowerOne lowers the one-sequence decode program beside a batch
// decode program (no GPU needed): it fuses what the batch program
// launches apart (fewer launches), shares every weight, and is not made
// for one-sequence backends or the f16 class of --batch-invariant (the
// int8 class keeps it).
func TestLowerOne(t *testing.T) {
	for _, c := range []struct{ preset, quant string }{{"llama3-8b", "q4_k_m"}, {"qwen3-8b", "q4_k_m"}, {"qwen2.5-7b", "q8_0"}} {
		m := synthModel(t, c.preset, c.quant, synth.WeightsBlocks)
		opts := BackendOptions{MaxSeqs: 8}
		progs, err := lowerPrograms(m, opts, 0, m.HParams.Layers)
		require.NoError(t, err)
		dec, one := progs.decode, progs.one
		require.NotNil(t, one, c.preset)
		require.Equal(t, 1, one.MaxSeqs)
		require.Less(t, len(one.Launches), len(dec.Launches), "%s: one %d launches, batch %d", c.preset, len(one.Launches), len(dec.Launches))
		require.True(t, sharesWeights(one, dec), c.preset)
		_, wb := uniqueWeights(dec)
		_, both := uniqueWeights(dec, one)
		require.Equal(t, wb, both, "%s: no weight bytes of its own", c.preset)
		require.GreaterOrEqual(t, one.Argmax, 0)
		require.GreaterOrEqual(t, one.SampleOut, 0)
		require.GreaterOrEqual(t, one.StepInputs, 0)

		single, err := lowerPrograms(m, BackendOptions{MaxSeqs: 1}, 0, m.HParams.Layers)
		require.NoError(t, err)
		require.Nil(t, single.one, "a one-sequence backend's decode program is the one")
		inv, err := lowerPrograms(m, BackendOptions{MaxSeqs: 8, Numerics: NumericsF16}, 0, m.HParams.Layers)
		require.NoError(t, err)
		require.Nil(t, inv.one, "--batch-invariant runs one row on the batch's kernels")
		i8, err := lowerPrograms(m, BackendOptions{MaxSeqs: 8, Numerics: NumericsInt8}, 0, m.HParams.Layers)
		require.NoError(t, err)
		require.NotNil(t, i8.one, "--batch-invariant=int8 keeps the one-sequence program")
		require.Less(t, len(i8.one.Launches), len(i8.decode.Launches), c.preset)
	}
}

// TestDecodeState: one-row decode steps run the one-sequence program where
// there is one, every other step the decode program.
func TestDecodeState(t *testing.T) {
	dec, one := &progState{}, &progState{}
	b := &Backend{}
	b.progs[codegen.Decode] = dec
	require.Same(t, dec, b.decodeState(1))
	require.Same(t, dec, b.decodeState(4))
	b.one = one
	require.Same(t, one, b.decodeState(1))
	require.Same(t, dec, b.decodeState(2))
	require.True(t, b.isDecode(one))
	require.True(t, b.isDecode(dec))
	require.False(t, b.isDecode(&progState{}))
}

// TestArtifactHoldsOne: memra compile's kernels include the one-sequence
// program's, and an artifact without them (one compiled before it, or of
// another source) is found out, so the backend runs without the program
// instead of refusing the artifact.
func TestArtifactHoldsOne(t *testing.T) {
	m := synthModel(t, "llama3-8b", "q4_k_m", synth.WeightsBlocks)
	opts := BackendOptions{MaxSeqs: 4}
	dec, _, ks, err := ArtifactKernels(m, opts)
	require.NoError(t, err)
	progs, err := lowerPrograms(m, opts, 0, m.HParams.Layers)
	require.NoError(t, err)
	one := progs.one
	require.NotNil(t, one)
	a := &Artifact{Dir: "art", byName: map[string]*KernelImages{}}
	for _, k := range ks {
		sum := sha256.Sum256([]byte(k.Source))
		a.byName[k.Name] = &KernelImages{SourceSHA256: hex.EncodeToString(sum[:])}
	}
	require.True(t, a.holds(one.Kernels), "memra compile includes the one-sequence program's kernels")
	last := one.Kernels[len(one.Kernels)-1].Name
	for _, k := range one.Kernels {
		if !slices.ContainsFunc(dec.Kernels, func(d *codegen.Kernel) bool { return d.Name == k.Name }) {
			last = k.Name // a kernel of its own
		}
	}
	a.byName[last].SourceSHA256 = "0"
	require.False(t, a.holds(one.Kernels), "another source")
	delete(a.byName, last)
	require.False(t, a.holds(one.Kernels), "compiled before it")
}
