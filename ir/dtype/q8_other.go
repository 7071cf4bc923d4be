//go:build !amd64 || purego

package dtype

// q8KernelSets: no assembly kernels in this build; the portable ones run.
func q8KernelSets() []q8KernelSet { return nil }
