// Package load opens a model — a GGUF file or a Hugging Face checkpoint
// folder — and presents it one way: hyperparameters (ir.HParams), tensors
// under their GGUF names with ne-order shapes, the tokenizer and the chat
// template. Tensor bytes stay in the memory-mapped files until asked for.
package load

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// Errors returned by Open, wrapped with the file and the key or tensor.
var (
	ErrFormat   = errors.New("load: unrecognised model format")
	ErrMetadata = errors.New("load: missing or bad metadata")
	ErrArch     = errors.New("load: unsupported architecture")
	ErrTensor   = errors.New("load: bad tensor")
	// ErrMismatch: the metadata contradicts the tensors' shapes (a hidden
	// size, head or block count, vocabulary size the weights do not have).
	ErrMismatch = errors.New("load: metadata does not match the tensors")
)

// Formats reported in Model.Format.
const (
	FormatGGUF        = "gguf"
	FormatSafetensors = "safetensors"
)

// Model is an opened model.
type Model struct {
	Path         string
	Format       string // FormatGGUF or FormatSafetensors
	HParams      ir.HParams
	Tensors      map[string]*Tensor // by GGUF name: token_embd.weight, blk.N.attn_q.weight, …
	Tokenizer    *tokenizer.Tokenizer
	ChatTemplate string
	FileType     string // "F16", "Q4_K_M", "BF16", … ("" when unknown)
	// Pooling is how the model, when it is an embedding model, makes one
	// vector of a sequence's final hidden states: PoolMean, PoolCLS or
	// PoolLast; "" for a generative model. From GGUF's {arch}.pooling_type,
	// a sentence-transformers Pooling module, or the Qwen3-Embedding
	// layout (a qwen3 backbone stored without "model." and without a head:
	// last-token pooling).
	Pooling string

	// GGUF is the parsed file of a GGUF model (nil for other formats), for
	// callers that want its raw metadata.
	GGUF *gguf.File
	// Skipped lists checkpoint tensors that map to no GGUF name and are not
	// used (rotary caches, FP8 scales consumed by dequantisation, …).
	Skipped []string

	order   []string // tensor names in file order
	closers []io.Closer
}

// Tensor is one weight of a model.
type Tensor struct {
	Name  string
	Type  dtype.Type
	Shape []int // ne order: Shape[0] is the contiguous row length

	load func() ([]byte, error)
	once sync.Once
	data []byte
	err  error
}

// Data returns the tensor's bytes: a slice of the mapped file, or, for a
// weight converted at load (FP8 presented as BF16), the converted bytes,
// computed on first use. The bytes must not be modified.
func (t *Tensor) Data() ([]byte, error) {
	t.once.Do(func() {
		t.data, t.err = t.load()
		if t.err == nil {
			if want := t.Bytes(); int64(len(t.data)) != want {
				t.err = fmt.Errorf("%w: %s: %d bytes, %v %v needs %d", ErrTensor, t.Name, len(t.data), t.Type, t.Shape, want)
			}
		}
	})
	return t.data, t.err
}

// Elements returns the number of elements.
func (t *Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Bytes returns the size of the tensor's data.
func (t *Tensor) Bytes() int64 {
	if be := t.Type.BlockElems(); be > 0 {
		return t.Elements() / int64(be) * int64(t.Type.BlockBytes())
	}
	return 0
}

// Names returns the tensor names in file order (sorted for checkpoints,
// whose JSON headers have no order).
func (m *Model) Names() []string { return m.order }

// Lookup reports a tensor's type and shape; with it a Model serves as the
// weights an architecture is built against.
func (m *Model) Lookup(name string) (dtype.Type, []int, bool) {
	t, ok := m.Tensors[name]
	if !ok {
		return 0, nil, false
	}
	return t.Type, t.Shape, true
}

// Close releases the model's files. Tensor bytes must not be used after it.
func (m *Model) Close() error {
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	m.closers = nil
	return errors.Join(errs...)
}

// addTensor records a tensor, keeping file order.
func (m *Model) addTensor(t *Tensor) {
	m.Tensors[t.Name] = t
	m.order = append(m.order, t.Name)
}

// Open opens the model at path: a GGUF file (any shard of a split GGUF
// model opens all of them), a Hugging Face checkpoint folder (config.json
// and *.safetensors), or a .safetensors file or config.json inside such a
// folder.
func Open(path string) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if st.IsDir() {
		return openHF(path)
	}
	if isGGUF(path) {
		return openGGUF(path)
	}
	base := filepath.Base(path)
	if strings.HasSuffix(base, ".safetensors") || base == "config.json" || base == "model.safetensors.index.json" {
		return openHF(filepath.Dir(path))
	}
	return nil, fmt.Errorf("%w: %s is neither a GGUF file nor a Hugging Face checkpoint", ErrFormat, path)
}

// isGGUF reports whether the file starts with the GGUF magic.
func isGGUF(path string) bool {
	fd, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fd.Close()
	var magic [4]byte
	if _, err := io.ReadFull(fd, magic[:]); err != nil {
		return false
	}
	return string(magic[:]) == "GGUF"
}

// OpenGGUFBytes opens a GGUF model held in memory (an embedded file); name
// stands for its path in messages. Its tensors are slices of data.
func OpenGGUFBytes(name string, data []byte) (*Model, error) {
	f, err := gguf.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return fromGGUF(name, f)
}
