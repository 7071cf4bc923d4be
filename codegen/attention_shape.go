package codegen

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/memra-ai/memra/ir/dtype"
)

// AttnShape is the constant shape of the attention kernels. Queries are read
// from rows of QStride floats (the fused QKV row: q heads first); the KV
// cache holds rows of [HeadsKV][HeadDim] elements of type Cache, in pages
// of PageSize rows: position j of a sequence is row
// pages[base + j/PageSize]·PageSize + j%PageSize, where pages is the step's
// page table and base the sequence's offset in it (PageRow).
type AttnShape struct {
	Heads, HeadsKV, HeadDim int
	QStride                 int // floats between consecutive tokens' query rows
	Cache                   dtype.Type
	Scale                   float32 // score scale; 0 means 1/sqrt(HeadDim)
	PageSize                int     // cache rows a page, a power of two; 0 means DefaultPageSize
	// Softcap, when positive, soft-caps the scaled scores: s → Softcap ·
	// tanh(s / Softcap) (Gemma 2's attention).
	Softcap float32
	// Window, when positive, is a sliding window: a query at position p
	// reads only the keys j > p − Window (Gemma's sliding layers). Decode
	// attention's splits then cover only the window's keys, and prefill
	// skips the keys before it.
	Window int
}

// DefaultPageSize is the KV cache page of AttnShape and LowerOptions where
// they name none: 16 positions, so a prefix is reused to within 15 tokens.
const DefaultPageSize = 16

// MaxPageSize bounds AttnShape.PageSize.
const MaxPageSize = 1024

// page returns s's page size.
func (s AttnShape) page() int {
	if s.PageSize == 0 {
		return DefaultPageSize
	}
	return s.PageSize
}

// CheckPageSize reports whether n is a valid cache page size: a power of
// two from 1 to MaxPageSize.
func CheckPageSize(n int) error {
	if n < 1 || n > MaxPageSize || n&(n-1) != 0 {
		return fmt.Errorf("%w: KV page size %d (a power of two from 1 to %d)", ErrUnsupported, n, MaxPageSize)
	}
	return nil
}

// PageRow is the cache row of position j of a sequence whose page table
// starts at pages[base]: the host's mirror of the kernels' PROW.
func PageRow(pages []int32, base, j, pageSize int) int {
	return int(pages[base+j/pageSize])*pageSize + j%pageSize
}

func (s AttnShape) scale() float32 {
	if s.Scale != 0 {
		return s.Scale
	}
	return float32(1 / math.Sqrt(float64(s.HeadDim)))
}

func (s AttnShape) validate() error {
	switch {
	case s.Window < 0 || !(s.Softcap >= 0) || math.IsInf(float64(s.Softcap), 0):
		return fmt.Errorf("%w: attention window %d, soft-cap %g", ErrUnsupported, s.Window, s.Softcap)
	case s.Heads <= 0 || s.HeadsKV <= 0 || s.Heads%s.HeadsKV != 0:
		return fmt.Errorf("%w: heads %d/%d", ErrUnsupported, s.Heads, s.HeadsKV)
	case s.HeadDim <= 0 || s.HeadDim%32 != 0 || s.HeadDim > 256:
		return fmt.Errorf("%w: attention head dim %d (a multiple of 32, ≤ 256)", ErrUnsupported, s.HeadDim)
	case s.QStride < s.Heads*s.HeadDim:
		return fmt.Errorf("%w: query stride %d < %d", ErrUnsupported, s.QStride, s.Heads*s.HeadDim)
	}
	if err := CheckPageSize(s.page()); err != nil {
		return err
	}
	return CheckCacheRow(s.Cache, s.HeadsKV, s.HeadDim)
}

func (s AttnShape) tag() string {
	t := fmt.Sprintf("h%d_%d_d%d_%s_pg%d", s.Heads, s.HeadsKV, s.HeadDim, typeTag(s.Cache), s.page())
	if s.Softcap > 0 {
		t += "_cap" + identFloat(s.Softcap)
	}
	if s.Window > 0 {
		t += fmt.Sprintf("_win%d", s.Window)
	}
	return t
}

// KeySpan is the most keys a query reads in a cache of capacity
// positions: the capacity, or the window when shorter. Decode attention's
// splits cover it (DecodeArm.Splits(s.KeySpan(capacity))).
func (s AttnShape) KeySpan(capacity int) int {
	if s.Window > 0 {
		return min(capacity, s.Window)
	}
	return capacity
}

// capScore writes the soft cap of the score variable v (nothing without
// one).
func (s AttnShape) capScore(w *Writer, v string) {
	if s.Softcap > 0 {
		w.Linef("%s = SOFTCAP * tanhf(%s * (1.f / SOFTCAP)); // the soft cap", v, v)
	}
}

func (s AttnShape) defines(w *Writer) {
	w.Linef("#define HQ %d", s.Heads)
	w.Linef("#define HKV %d", s.HeadsKV)
	w.Linef("#define HD %d", s.HeadDim)
	w.Linef("#define GROUP %d // query heads per kv head", s.Heads/s.HeadsKV)
	w.Linef("#define QSTRIDE %d", s.QStride)
	w.Linef("#define SCALE %s", cfloat(s.scale()))
	cacheRowDefine(w, s.Cache)
	w.Linef("#define PLOG %d // log2 of the cache rows a page", bits.TrailingZeros(uint(s.page())))
	w.Line("#define PROW(pt, j) (((size_t)(pt)[(j) >> PLOG] << PLOG) | (size_t)((j) & ((1 << PLOG) - 1))) // the cache row of position j of page table pt")
	if s.Softcap > 0 {
		w.Linef("#define SOFTCAP %s // scores become SOFTCAP·tanh(s/SOFTCAP)", cfloat(s.Softcap))
	}
	if s.Window > 0 {
		w.Linef("#define WINDOW %d // a query at p reads the keys after p - WINDOW", s.Window)
	}
}
