package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
)

// The mapping of a served model is released only when no CPU reads it.
func TestWeightsOnDevice(t *testing.T) {
	for dev, want := range map[string]bool{
		"cuda:0": true, "cuda:0+cuda:1": true, "cuda:0+cuda:0": true,
		"cpu": false, "cpu+cpu": false, "cuda:0+cpu": false, "": false,
	} {
		require.Equal(t, want, weightsOnDevice(runtime.ModelInfo{Device: dev}), dev)
	}
}
