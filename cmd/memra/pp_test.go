package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// TestPPBackendCPU builds the embedded model with --pp-stages 2 on the CPU
// (balanced split and an explicit one) and wants the greedy tokens of the
// single backend; a bad split is refused.
func TestPPBackendCPU(t *testing.T) {
	m, err := openModel(rootCmd, "")
	require.NoError(t, err)
	defer m.Close()
	run := func(b runtime.Backend) []int32 {
		defer b.Close()
		step := runtime.SeqStep{Seq: 1, Tokens: []int32{1, 403, 407}, Logits: true}
		var ids []int32
		for range 16 {
			out, err := b.Step(context.Background(), []runtime.SeqStep{step})
			require.NoError(t, err)
			id := int32(0)
			for i, v := range out[0] {
				if v > out[0][id] {
					id = int32(i)
				}
			}
			ids = append(ids, id)
			step.Pos += len(step.Tokens)
			step.Tokens = []int32{id}
		}
		return ids
	}
	one, err := newBackend(m, "cpu", 1, 1, gpuOptions{})
	require.NoError(t, err)
	want := run(one)
	for _, split := range []int{0, 1, m.HParams.Layers - 1} {
		b, err := newBackend(m, "cpu", 2, 1, gpuOptions{}, ppOptions{stages: 2, split: split})
		require.NoError(t, err)
		require.Contains(t, b.Info().Device, "cpu+cpu")
		require.Equal(t, want, run(b), "split %d", split)
	}
	_, err = newBackend(m, "cpu", 2, 1, gpuOptions{}, ppOptions{stages: 2, split: m.HParams.Layers})
	require.ErrorContains(t, err, "--pp-split")
	_, err = newBackend(m, "cpu", 2, 1, gpuOptions{}, ppOptions{stages: 3})
	require.ErrorContains(t, err, "only 2 stages")
}

// TestKVCacheFlagOnCPU: the CPU backend keeps its KV cache in f32; asking
// it for another type is a clear error, f32 is accepted.
func TestKVCacheFlagOnCPU(t *testing.T) {
	m, err := openModel(rootCmd, "")
	require.NoError(t, err)
	defer m.Close()
	_, err = newBackend(m, "cpu", 1, 1, gpuOptions{kvCache: "f16"})
	require.ErrorContains(t, err, "--kv-cache f16")
	b, err := newBackend(m, "cpu", 1, 1, gpuOptions{kvCache: "f32"})
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

// TestCPUProducts: --cpu-products picks the CPU backend's class (int8 by
// default, exact on request, in pipeline stages too) and refuses others.
func TestCPUProducts(t *testing.T) {
	m, err := builtin.Open()
	require.NoError(t, err)
	defer m.Close()
	for _, tc := range []struct {
		flag string
		want cpu.Products
	}{{"", cpu.ProductsInt8}, {"int8", cpu.ProductsInt8}, {"exact", cpu.ProductsExact}} {
		b, err := newBackend(m, "cpu", 1, 1, gpuOptions{cpuProducts: tc.flag})
		require.NoError(t, err)
		require.Equal(t, tc.want, b.(*cpu.Backend).Products(), "--cpu-products %q", tc.flag)
		b.Close()
	}
	_, err = newBackend(m, "cpu", 1, 1, gpuOptions{cpuProducts: "fast"})
	require.ErrorContains(t, err, `--cpu-products "fast"`)
	_, err = newBackend(m, "cpu", 2, 1, gpuOptions{cpuProducts: "fast"}, ppOptions{stages: 2, split: 2})
	require.ErrorContains(t, err, `--cpu-products "fast"`)
}
