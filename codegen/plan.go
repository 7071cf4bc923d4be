package codegen

import (
	"fmt"
	"sort"

	"github.com/memra-ai/memra/ir"
)

// bufferAlign is the byte alignment of every buffer in the arena.
const bufferAlign = 256

// Buffer is one activation value (or fused group of values) of a Program,
// placed in the activation arena.
type Buffer struct {
	Name   string
	Rows   ir.Dim // ir.T or ir.S (its row count in a step)
	Width  int    // elements per row
	Int32  bool   // int32 elements (else float32); both are 4 bytes
	Offset int64  // byte offset in the arena
	Size   int64  // bytes for the class's largest step, aligned
	First  int    // first launch that touches it
	Last   int    // last launch that touches it
}

func (b *Buffer) elemName() string {
	if b.Int32 {
		return "I32"
	}
	return "F32"
}

// BufferPlan places the activation buffers of a Program in one arena:
// buffers whose live ranges (launch intervals) are disjoint may share bytes.
type BufferPlan struct {
	Buffers    []Buffer
	ArenaBytes int64
}

// TotalBytes returns the sum of all buffer sizes (the arena without reuse).
func (p *BufferPlan) TotalBytes() int64 {
	var n int64
	for i := range p.Buffers {
		n += p.Buffers[i].Size
	}
	return n
}

// Overlaps reports whether buffers i and j are live at the same launch and
// share bytes of the arena.
func (p *BufferPlan) Overlaps(i, j int) bool {
	a, b := &p.Buffers[i], &p.Buffers[j]
	live := a.First <= b.Last && b.First <= a.Last
	mem := a.Offset < b.Offset+b.Size && b.Offset < a.Offset+a.Size
	return live && mem
}

// Check verifies the plan: every buffer lies inside the arena, is aligned,
// and no two live buffers overlap.
func (p *BufferPlan) Check() error {
	for i := range p.Buffers {
		b := &p.Buffers[i]
		if b.Offset < 0 || b.Offset%bufferAlign != 0 || b.Offset+b.Size > p.ArenaBytes || b.First > b.Last {
			return fmt.Errorf("%w: buffer b%d %s at %d+%d (live %d..%d) in arena %d", ErrPlan, i, b.Name, b.Offset, b.Size, b.First, b.Last, p.ArenaBytes)
		}
		for j := i + 1; j < len(p.Buffers); j++ {
			if p.Overlaps(i, j) {
				return fmt.Errorf("%w: buffers b%d %s and b%d %s overlap while both live", ErrPlan, i, b.Name, j, p.Buffers[j].Name)
			}
		}
	}
	return nil
}

// place assigns offsets by first fit in order of first use: a buffer takes
// the lowest aligned gap not used by a buffer whose live range meets its
// own. Sizes are each buffer's rows (maxTokens or maxSeqs) × width × 4.
func (p *BufferPlan) place(maxTokens, maxSeqs int) {
	order := make([]int, len(p.Buffers))
	for i := range order {
		order[i] = i
		b := &p.Buffers[i]
		rows := maxTokens
		if b.Rows == ir.S {
			rows = maxSeqs
		}
		b.Size = alignUp(int64(rows)*int64(b.Width)*4, bufferAlign)
		if b.First < 0 {
			b.Size = 0 // no launch touches it (a value computed into an epilogue)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return p.Buffers[order[a]].First < p.Buffers[order[b]].First })
	var placed []int
	p.ArenaBytes = 0
	for _, i := range order {
		b := &p.Buffers[i]
		var busy [][2]int64
		for _, j := range placed {
			o := &p.Buffers[j]
			if o.First <= b.Last && b.First <= o.Last {
				busy = append(busy, [2]int64{o.Offset, o.Offset + o.Size})
			}
		}
		sort.Slice(busy, func(x, y int) bool { return busy[x][0] < busy[y][0] })
		off := int64(0)
		for _, r := range busy {
			if off+b.Size <= r[0] {
				break
			}
			off = max(off, alignUp(r[1], bufferAlign))
		}
		b.Offset = off
		p.ArenaBytes = max(p.ArenaBytes, off+b.Size)
		placed = append(placed, i)
	}
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }
