package tunedb

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// Change is one row of a diff between two files.
type Change struct {
	Op     byte   // '=' same arm, '~' different arm, '-' only in a, '+' only in b
	ID     string // family/class
	A, B   *Entry // nil where absent
	Change float64
}

// Diff compares the entries of a and b by (family, class), sorted by ID.
// Change is B's time relative to A's (−0.1 = 10 % faster) where both exist.
func Diff(a, b *File) []Change {
	m := map[string]*Change{}
	for i := range a.Entries {
		e := &a.Entries[i]
		m[e.id()] = &Change{Op: '-', ID: e.id(), A: e}
	}
	for i := range b.Entries {
		e := &b.Entries[i]
		c := m[e.id()]
		if c == nil {
			m[e.id()] = &Change{Op: '+', ID: e.id(), B: e}
			continue
		}
		c.B = e
		c.Op = '~'
		if c.A.Arm.Equal(e.Arm) {
			c.Op = '='
		}
		c.Change = e.TimeUS/c.A.TimeUS - 1
	}
	out := make([]Change, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// WriteDiff writes Diff(a, b) as a table and returns the number of rows
// that differ (arm changed, or present on one side only).
func WriteDiff(w io.Writer, a, b *File) (int, error) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  a: %s\n  b: %s\n", a.Key, b.Key)
	fmt.Fprintln(tw, "op\tfamily/class\ta arm\ta µs\tb arm\tb µs\tchange")
	differ := 0
	cell := func(e *Entry) (string, string) {
		if e == nil {
			return "-", "-"
		}
		return e.ArmName, fmt.Sprintf("%.2f", e.TimeUS)
	}
	for _, c := range Diff(a, b) {
		aa, at := cell(c.A)
		ba, bt := cell(c.B)
		ch := "-"
		if c.A != nil && c.B != nil {
			ch = fmt.Sprintf("%+.1f%%", 100*c.Change)
		}
		if c.Op != '=' {
			differ++
		}
		fmt.Fprintf(tw, "%c\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Op, c.ID, aa, at, ba, bt, ch)
	}
	return differ, tw.Flush()
}
