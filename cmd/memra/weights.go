package main

import (
	"strings"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
)

// releaseHostWeights closes m's memory-mapped files when backend b keeps
// every weight on a GPU (it copied them there at load): no step reads the
// mapping afterwards, so a model file truncated or replaced while served
// cannot fault the server. m's tokenizer and chat template stay usable; its
// tensor bytes do not. A backend with a CPU part keeps the mapping (the
// CPU backend turns a fault into cpu.ErrWeightFault instead).
func releaseHostWeights(m *load.Model, b runtime.Backend) error {
	if !weightsOnDevice(b.Info()) {
		return nil
	}
	return m.Close()
}

// weightsOnDevice reports whether every part of a backend ("cuda:0",
// "cuda:0+cuda:1" for a pipeline) runs on a GPU.
func weightsOnDevice(info runtime.ModelInfo) bool {
	for _, d := range strings.Split(info.Device, "+") {
		if !strings.HasPrefix(d, "cuda") {
			return false
		}
	}
	return true
}
