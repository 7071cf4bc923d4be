package kv

import "fmt"

// Tables keeps the page tables of sequences whose caller gives none (a
// benchmark, a parity check driving a backend directly): a backend's pages
// of such a sequence come from its pool like any other and go back on
// Free. Not safe for concurrent use (a backend steps from one goroutine).
type Tables struct {
	pool *Pool
	seqs map[uint64]*table
}

type table struct {
	pages []int32
	n     int // positions written
}

// NewTables returns page tables drawing on pool.
func NewTables(pool *Pool) *Tables { return &Tables{pool: pool, seqs: map[uint64]*table{}} }

// Len returns the positions sequence seq holds (0 for an unknown one).
func (t *Tables) Len(seq uint64) int {
	if s := t.seqs[seq]; s != nil {
		return s.n
	}
	return 0
}

// Grow returns seq's page table grown to hold n positions, recording n as
// its length once the step that writes them succeeds (Commit). A sequence
// seen for the first time starts empty.
func (t *Tables) Grow(seq uint64, n int) ([]int32, error) {
	s := t.seqs[seq]
	if s == nil {
		s = &table{}
		t.seqs[seq] = s
	}
	if need := t.pool.PagesFor(n) - len(s.pages); need > 0 {
		more, err := t.pool.Alloc(need)
		if err != nil {
			return nil, fmt.Errorf("sequence %d at %d positions: %w", seq, n, err)
		}
		s.pages = append(s.pages, more...)
	}
	return s.pages, nil
}

// Commit records that seq holds n positions.
func (t *Tables) Commit(seq uint64, n int) {
	if s := t.seqs[seq]; s != nil {
		s.n = n
	}
}

// Free returns seq's pages to the pool; an unknown seq is a no-op.
func (t *Tables) Free(seq uint64) {
	if s := t.seqs[seq]; s != nil {
		t.pool.Release(s.pages)
		delete(t.seqs, seq)
	}
}

// Seqs returns how many sequences hold pages.
func (t *Tables) Seqs() int { return len(t.seqs) }
