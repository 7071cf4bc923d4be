package codegen_test

import (
	"testing"

	"github.com/memra-ai/memra/codegen"
	"github.com/stretchr/testify/require"
)

// TestStepInputsCompiles compiles the step inputs kernel at several block
// sizes for the cards memra targets.
func TestStepInputsCompiles(t *testing.T) {
	nv := nvrtcOrSkip(t)
	for _, arm := range []codegen.BlockArm{codegen.DefaultBlockArm, {Threads: 64}, {Threads: 1024}} {
		k, err := codegen.StepInputs(arm)
		require.NoError(t, err)
		for _, arch := range []string{"compute_80", "compute_90"} {
			compileAll(t, nv, arch, []*codegen.Kernel{k})
		}
	}
}
