package ir

import (
	"fmt"
	"slices"
)

// Verify checks every rule of the IR on g and reports the first violation,
// naming the node and the rule: node numbering and order (operands defined
// before use), each op's operand count and kinds, attributes and their kinds,
// the type and shape each op's rules derive, one kv_write per layer, exactly
// one output-group node (output, or hidden_out for a pipeline stage) as the
// last node, and well-formed fusion annotations.
func Verify(g *Graph) error {
	if g.err != nil {
		return fmt.Errorf("%w: construction: %w", ErrVerify, g.err)
	}
	if len(g.Nodes) == 0 {
		return fmt.Errorf("%w: empty graph", ErrVerify)
	}
	layers := map[int]int{}
	for i, n := range g.Nodes {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%w: node %%%d (%v): %s", ErrVerify, i, n.Op, fmt.Sprintf(format, args...))
		}
		if n == nil {
			return fmt.Errorf("%w: node %d is nil", ErrVerify, i)
		}
		if n.ID != i {
			return fail("ID %d differs from its index", n.ID)
		}
		for j, a := range n.Args {
			if a == nil {
				return fail("operand %d is nil", j)
			}
			if a.ID >= i || g.Nodes[a.ID] != a {
				return fail("operand %d (%%%d) is not a node defined earlier in the graph", j, a.ID)
			}
		}
		if err := checkNode(n); err != nil {
			return fmt.Errorf("%w: %w", ErrVerify, err)
		}
		t, s, err := infer(n)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrVerify, err)
		}
		if t != n.Type || !s.Equal(n.Shape) {
			return fail("value %v%v differs from the rules' %v%v", n.Type, n.Shape, t, s)
		}
		switch n.Op {
		case OpKVWrite:
			l := n.Int("layer")
			if prev, dup := layers[l]; dup {
				return fail("layer %d's cache is already written by %%%d", l, prev)
			}
			layers[l] = i
		}
		if n.Op.Group() == GroupOutput && i != len(g.Nodes)-1 {
			return fail("%v must be the last node", n.Op)
		}
		if (n.Kernel == 0) != (n.Role == "") || !slices.Contains([]string{"", "prologue", "main", "epilogue"}, n.Role) {
			return fail("fusion annotation kernel=%d role=%q is malformed", n.Kernel, n.Role)
		}
	}
	if last := g.Nodes[len(g.Nodes)-1]; last.Op.Group() != GroupOutput {
		return fmt.Errorf("%w: the last node is %v, not output or hidden_out", ErrVerify, last.Op)
	}
	return nil
}
