package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/pipeline"
)

// ppOptions are the pipeline-parallel flags of run, serve and bench.
type ppOptions struct {
	stages  int    // --pp-stages / --pp: 0 or 1 = off, 2 = two stages
	split   int    // --pp-split: first layer of stage 2 (0: balance by memory)
	devices string // --pp-devices: GPU ordinals of the stages
	logf    func(format string, args ...any)
}

// addPPFlags registers --pp-stages (also spelled --pp), --pp-split and
// --pp-devices on cmd; MEMRA_PP_STAGES, MEMRA_PP_SPLIT and MEMRA_PP_DEVICES
// set them through the usual environment binding.
func addPPFlags(cmd *cobra.Command, o *ppOptions) {
	f := cmd.Flags()
	f.IntVar(&o.stages, "pp-stages", 0, "pipeline parallelism: split the model by layers into this many stages (2), one per --pp-devices GPU; --pp for short")
	f.IntVar(&o.split, "pp-split", 0, "first layer of pipeline stage 2 (0: balance weights + KV cache bytes between the stages)")
	f.StringVar(&o.devices, "pp-devices", "0,1", "GPU ordinals of the pipeline stages (0,0: both stages on one GPU)")
	prev := f.GetNormalizeFunc()
	f.SetNormalizeFunc(func(fs *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "pp" {
			name = "pp-stages"
		}
		return prev(fs, name)
	})
}

// enabled reports whether the pipeline is on.
func (o ppOptions) enabled() bool { return o.stages > 1 }

// newPipelineBackend builds a two-stage pipeline of m on device ("cpu", or
// cuda with the --pp-devices ordinals). ctxLen (0: the backend default)
// and prefill size the CUDA stages; gpu's --cpu-products the CPU ones.
func newPipelineBackend(m *load.Model, device string, threads, maxSeqs int, pp ppOptions, gpu gpuOptions, base cuda.BackendOptions) (runtime.Backend, error) {
	cudaOpts := gpu.cudaOptions(base)
	if pp.stages != 2 {
		return nil, fmt.Errorf("--pp-stages %d: only 2 stages are supported", pp.stages)
	}
	L := m.HParams.Layers
	k := pp.split
	if k == 0 {
		var err error
		if k, err = balancedSplit(m, device, maxSeqs, cudaOpts); err != nil {
			return nil, err
		}
	}
	if err := pipeline.CheckSplit(k, L); err != nil {
		return nil, fmt.Errorf("--pp-split: %w", err)
	}
	if pp.logf != nil {
		pp.logf("pipeline: 2 stages, layers 0..%d and %d..%d", k, k, L)
	}
	var stages []pipeline.StageBackend
	var err error
	if device == "cpu" {
		if err := (gpuOptions{kvCache: cudaOpts.Cache}).checkCPU(); err != nil {
			return nil, err
		}
		products, perr := gpu.products()
		if perr != nil {
			return nil, perr
		}
		stages, err = cpu.NewStages(m, []int{k}, cpu.Options{Threads: max(threads/2, 1), MaxSeqs: maxSeqs,
			Products: products, Tiles: cpuTiles(max(threads/2, 1))})
	} else {
		devs, derr := pipeline.ParseDevices(pp.devices, 2)
		if derr != nil {
			return nil, fmt.Errorf("--pp-devices: %w", derr)
		}
		cudaOpts.MaxSeqs = max(maxSeqs, 1)
		if cudaOpts.Logf == nil {
			cudaOpts.Logf = pp.logf
		}
		stages, err = cuda.NewStages(m, []int{k}, devs, cudaOpts)
	}
	if err != nil {
		return nil, err
	}
	return pipeline.New(stages, pipeline.Options{})
}

// balancedSplit picks the split that balances weight and KV cache bytes.
func balancedSplit(m *load.Model, device string, maxSeqs int, o cuda.BackendOptions) (int, error) {
	hp := m.HParams
	kvHeads := hp.HeadsKV
	if kvHeads == 0 {
		kvHeads = hp.Heads
	}
	headDim := hp.HeadDim
	if headDim == 0 && hp.Heads > 0 {
		headDim = hp.Embedding / hp.Heads
	}
	ctx, elem := o.Context, int64(2) // the CUDA default cache is f16
	if ctx <= 0 {
		ctx = min(max(hp.ContextLength, 1), 4096)
	}
	if device == "cpu" || o.Cache == "f32" {
		elem = 4
	}
	kv := 2 * int64(max(maxSeqs, 1)+1) * int64(ctx) * int64(kvHeads*headDim) * elem
	f, err := pipeline.ModelFootprint(m, kv)
	if err != nil {
		return 0, err
	}
	return pipeline.BalancedSplit(f)
}
