package pipeline

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/runtime/load"
)

// Footprint is what a model needs in memory, by where it goes: Layer[l] is
// layer l's weights plus its KV cache, Head what only the first stage holds
// (the embedding), Tail what only the last stage holds (the output norm and
// projection; the embedding again when the projection is tied to it).
type Footprint struct {
	Layer      []int64
	Head, Tail int64
}

// StageBytes returns the bytes each stage of a split holds, for the stage
// boundaries bounds (the first layer of every stage after the first).
func (f Footprint) StageBytes(bounds []int) []int64 {
	out := make([]int64, len(bounds)+1)
	s := 0
	for l, b := range f.Layer {
		for s < len(bounds) && l >= bounds[s] {
			s++
		}
		out[s] += b
	}
	out[0] += f.Head
	out[len(out)-1] += f.Tail
	return out
}

// BalancedSplit returns the layer k at which a two-stage split holds the
// most even share of f: stage 1 takes layers [0,k) and Head, stage 2
// [k,n) and Tail; k minimises the larger stage (the smaller k on ties).
// A model of fewer than 2 layers cannot be split.
func BalancedSplit(f Footprint) (int, error) {
	n := len(f.Layer)
	if n < 2 {
		return 0, fmt.Errorf("%w: a model of %d layers cannot be split in two", ErrStages, n)
	}
	var total int64
	for _, b := range f.Layer {
		total += b
	}
	best, bestMax := 1, int64(-1)
	var before int64
	for k := 1; k < n; k++ {
		before += f.Layer[k-1]
		a, b := f.Head+before, f.Tail+total-before
		if m := max(a, b); bestMax < 0 || m < bestMax {
			best, bestMax = k, m
		}
	}
	return best, nil
}

// CheckSplit reports whether k splits a model of n layers into two
// non-empty stages.
func CheckSplit(k, n int) error {
	if k < 1 || k >= n {
		return fmt.Errorf("%w: split at layer %d of a model of %d layers, want 1..%d", ErrStages, k, n, n-1)
	}
	return nil
}

// ParseDevices parses a --pp-devices list such as "0,1" into GPU ordinals;
// it wants exactly want entries (an ordinal may repeat: "0,0" runs both
// stages on one GPU).
func ParseDevices(s string, want int) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) != want {
		return nil, fmt.Errorf("%w: devices %q name %d GPUs, want %d", ErrStages, s, len(parts), want)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: devices %q: %q is not a GPU ordinal", ErrStages, s, p)
		}
		out[i] = n
	}
	return out, nil
}

// ModelFootprint returns the footprint of m's tensors (stored bytes, from
// their types and shapes) plus kvPerLayer bytes of KV cache per layer.
// Tensors named blk.N.* belong to layer N, token_embd to the first stage
// (and to the last as well when the model has no output.weight), the
// output norm and projection to the last, anything else to the first.
func ModelFootprint(m *load.Model, kvPerLayer int64) (Footprint, error) {
	f := Footprint{Layer: make([]int64, m.HParams.Layers)}
	for i := range f.Layer {
		f.Layer[i] = kvPerLayer
	}
	_, hasOutput := m.Tensors["output.weight"]
	for name, t := range m.Tensors {
		if len(t.Shape) == 0 {
			continue
		}
		rows := int64(1)
		for _, d := range t.Shape[1:] {
			rows *= int64(d)
		}
		rb, err := t.Type.RowBytes(t.Shape[0])
		if err != nil {
			return f, fmt.Errorf("%w: tensor %s: %w", ErrStages, name, err)
		}
		n := rows * int64(rb)
		if rest, ok := strings.CutPrefix(name, "blk."); ok {
			if l, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '.'), 0)]); err == nil && l >= 0 && l < len(f.Layer) {
				f.Layer[l] += n
				continue
			}
		}
		switch {
		case strings.HasPrefix(name, "output"):
			f.Tail += n
		case name == "token_embd.weight" && !hasOutput:
			f.Head += n
			f.Tail += n
		default:
			f.Head += n
		}
	}
	return f, nil
}
