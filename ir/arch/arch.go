// Package arch builds the ir.Graph of a model from its hyperparameters and
// the tensors it ships. Each architecture family lives in its own file
// (llama.go, qwen2.go, qwen3.go…) and registers its builder by name in init;
// adding a family touches only its file and its test.
package arch

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// Errors returned by Build, wrapped with the architecture or tensor name.
var (
	// ErrUnknownArch: no builder is registered for the architecture.
	ErrUnknownArch = errors.New("arch: unknown architecture")
	// ErrMissingTensor: a tensor the architecture needs is absent.
	ErrMissingTensor = errors.New("arch: missing tensor")
	// ErrTensorShape: a tensor has the wrong shape or type.
	ErrTensorShape = errors.New("arch: wrong tensor shape")
	// ErrHParams: the hyperparameters are inconsistent or unsupported.
	ErrHParams = errors.New("arch: bad hyperparameters")
	// ErrStage: a pipeline stage's layer range is empty or outside the model.
	ErrStage = errors.New("arch: bad stage range")
)

// Weights tells a builder which tensors a model has: the type and GGUF ne
// order shape (shape[0] contiguous) of a tensor by its GGUF name.
type Weights interface {
	Lookup(name string) (t dtype.Type, shape []int, ok bool)
}

// Builder builds the graph of one family: the pipeline stage holding layers
// [first, last) (see BuildStage); [0, hp.Layers) is the whole model.
type Builder func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error)

var (
	mu       sync.RWMutex
	builders = map[string]Builder{}
)

// Register makes a builder available under name; registering a name twice
// is a bug.
func Register(name string, b Builder) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := builders[name]; dup {
		panic("BUG: arch " + name + " registered twice")
	}
	builders[name] = b
}

// Names returns the registered architecture names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	var names []string
	for n := range builders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Build builds and verifies the graph of the model described by hp (its
// family is hp.Arch) with tensors w. Passes are not run. It is
// BuildStage(hp, w, 0, hp.Layers).
func Build(hp ir.HParams, w Weights) (*ir.Graph, error) {
	return BuildStage(hp, w, 0, hp.Layers)
}

// BuildStage builds and verifies the graph of one pipeline stage: the
// decoder layers [first, last) of the model. The first stage (first = 0)
// starts from the tokens and the embedding lookup; a later one starts from
// a hidden_in of the residual stream. The last stage (last = hp.Layers)
// ends with the output norm, the logits and output; an earlier one ends
// with hidden_out. A stage reads only its own layers' tensors (and the
// embedding, the output norm and projection where it holds them).
// Whole-model graphs (0, hp.Layers) print the same text as before stages
// existed. Passes are not run.
func BuildStage(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
	mu.RLock()
	b, ok := builders[hp.Arch]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %v)", ErrUnknownArch, hp.Arch, Names())
	}
	// A model without layers is the builder's ErrHParams.
	if hp.Layers > 0 && (first < 0 || last <= first || last > hp.Layers) {
		return nil, fmt.Errorf("%w: layers [%d,%d) of a model of %d", ErrStage, first, last, hp.Layers)
	}
	g, err := b(hp, w, first, last)
	if err != nil {
		return nil, fmt.Errorf("arch %s: %w", hp.Arch, err)
	}
	if err := ir.Verify(g); err != nil {
		return nil, fmt.Errorf("arch %s: %w", hp.Arch, err)
	}
	return g, nil
}
