package cpu

import (
	"fmt"

	"github.com/memra-ai/memra/runtime/load"
)

// New builds the CPU backend of a loaded model. The backend reads weights
// from the model's (memory-mapped) tensors; m must stay open while it runs.
func New(m *load.Model, opts Options) (*Backend, error) {
	return NewFromSource(m.HParams, modelSource{m}, opts)
}

// modelSource adapts a load.Model to Source.
type modelSource struct{ *load.Model }

func (s modelSource) Data(name string) ([]byte, error) {
	t, ok := s.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s: no tensor %q", ErrWeight, s.Path, name)
	}
	return t.Data()
}
