package ir

import "fmt"

// Pass is one named rewrite or annotation of a graph.
type Pass struct {
	Name string
	Run  func(g *Graph) error
}

// Passes are the standard passes, in the order they run.
var Passes = []Pass{
	{"dce", DCE},
	{"fuse", MarkFusion},
}

// RunPasses verifies g, then runs passes in order, verifying after each; an
// error names the pass.
func RunPasses(g *Graph, passes []Pass) error {
	if err := Verify(g); err != nil {
		return fmt.Errorf("before passes: %w", err)
	}
	for _, p := range passes {
		if err := p.Run(g); err != nil {
			return fmt.Errorf("%w %s: %w", ErrPass, p.Name, err)
		}
		if err := Verify(g); err != nil {
			return fmt.Errorf("after pass %s: %w", p.Name, err)
		}
	}
	return nil
}

// DCE removes the nodes that neither reach the output nor have an effect
// (see Op.HasEffect), and renumbers the rest in their order.
func DCE(g *Graph) error {
	live := make([]bool, len(g.Nodes))
	var mark func(n *Node)
	mark = func(n *Node) {
		if live[n.ID] {
			return
		}
		live[n.ID] = true
		for _, a := range n.Args {
			mark(a)
		}
	}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		if n := g.Nodes[i]; n.Op.HasEffect() {
			mark(n)
		}
	}
	kept := g.Nodes[:0]
	for _, n := range g.Nodes {
		if live[n.ID] {
			kept = append(kept, n)
		}
	}
	g.Nodes = kept
	g.Renumber()
	return nil
}

// MarkFusion annotates fusion groups for codegen, without changing the
// computation: an rms_norm whose every user is a matmul becomes the
// prologue of one kernel with those matmuls (the QKV and gate/up products
// share their norm); a matmul whose only user is an add or bias_add takes
// it as its epilogue (the residual add, the bias). Earlier annotations are
// cleared first, so the pass is idempotent.
func MarkFusion(g *Graph) error {
	for _, n := range g.Nodes {
		n.Kernel, n.Role = 0, ""
	}
	users := g.Users()
	next := 0
	newKernel := func() int { next++; return next }
	for _, n := range g.Nodes {
		if n.Op != OpRMSNorm || len(users[n.ID]) == 0 {
			continue
		}
		all := true
		for _, u := range users[n.ID] {
			all = all && u.Op.Group() == GroupMatmul && u.Args[0] == n
		}
		if !all {
			continue
		}
		k := newKernel()
		n.Kernel, n.Role = k, "prologue"
		for _, u := range users[n.ID] {
			u.Kernel, u.Role = k, "main"
		}
	}
	for _, n := range g.Nodes {
		if n.Op.Group() != GroupMatmul || len(users[n.ID]) != 1 {
			continue
		}
		u := users[n.ID][0]
		if (u.Op != OpAdd && u.Op != OpBiasAdd) || u.Kernel != 0 {
			continue
		}
		if n.Kernel == 0 {
			n.Kernel, n.Role = newKernel(), "main"
		} else if u.Op == OpAdd && sharesKernel(g, n) {
			// A residual add reads another value than the product; keep it
			// in the product's own group only when the group has one product.
			continue
		}
		u.Kernel, u.Role = n.Kernel, "epilogue"
	}
	// Number the groups in order of first appearance.
	seen := map[int]int{}
	for _, n := range g.Nodes {
		if n.Kernel == 0 {
			continue
		}
		if _, ok := seen[n.Kernel]; !ok {
			seen[n.Kernel] = len(seen) + 1
		}
		n.Kernel = seen[n.Kernel]
	}
	return nil
}

// sharesKernel reports whether another matmul is in n's fusion group.
func sharesKernel(g *Graph, n *Node) bool {
	for _, m := range g.Nodes {
		if m != n && m.Kernel == n.Kernel && m.Op.Group() == GroupMatmul {
			return true
		}
	}
	return false
}
