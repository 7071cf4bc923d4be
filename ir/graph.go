// Package ir is memra's intermediate representation: the op table (each op
// defined once, as a row of data), the Graph of a model's forward step, its
// verifier, its text form and the passes that rewrite or annotate it.
//
// A Graph describes one forward step of a decoder-only transformer. Model
// dimensions (hidden size, heads, vocabulary…) are constants baked into the
// shapes; the number of tokens in the step (T) and the number of sequences (S)
// are symbolic, so one graph serves every batch. Backends (the CPU reference,
// generated CUDA) read the graph; they never see model families.
package ir

import (
	"errors"
	"fmt"
	"sort"

	"github.com/memra-ai/memra/ir/dtype"
)

// Errors reported by graph construction, Verify and passes.
var (
	// ErrVerify is wrapped by every rule violation Verify reports.
	ErrVerify = errors.New("ir: verify")
	// ErrShape is wrapped when an op's shape or dtype rule rejects its operands.
	ErrShape = errors.New("ir: shape")
	// ErrPass is wrapped when a pass fails.
	ErrPass = errors.New("ir: pass")
)

// Dim is one dimension of a shape: a non-negative constant, or one of the
// symbolic dimensions T and S (negative values).
type Dim int

const (
	// T is the number of tokens in a step, over all its sequences.
	T Dim = -1
	// S is the number of sequences in a step.
	S Dim = -2
)

// Symbolic reports whether d is a symbolic dimension.
func (d Dim) Symbolic() bool { return d < 0 }

// String returns the decimal value, or "T"/"S".
func (d Dim) String() string {
	switch d {
	case T:
		return "T"
	case S:
		return "S"
	}
	if d < 0 {
		return fmt.Sprintf("sym%d", -int(d))
	}
	return fmt.Sprint(int(d))
}

// Shape is a row-major shape, outermost dimension first (the last dimension
// is contiguous). A weight of GGUF ne order [in, out] has Shape [out, in].
type Shape []Dim

// Equal reports whether s and o are the same shape.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Last returns the innermost dimension (0 for a scalar shape).
func (s Shape) Last() Dim {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// String formats s as "[T,64]".
func (s Shape) String() string {
	b := []byte{'['}
	for i, d := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d.String()...)
	}
	return string(append(b, ']'))
}

// Attrs are a node's attributes, keyed by the names its op's row declares.
// Values are int, float64, string, bool, []int or dtype.Type (see AttrKind).
type Attrs map[string]any

// Node is one op application; it defines one value (its Type and Shape).
type Node struct {
	ID    int     // index in Graph.Nodes
	Op    Op      // what it computes
	Args  []*Node // operands, in the order the op's row declares
	Attrs Attrs   // attributes, as the op's row declares
	Type  dtype.Type
	Shape Shape
	// Kernel is the fusion group this node belongs to (0: none); set by the
	// fusion-marking pass. Nodes of one group are meant to run as one kernel.
	Kernel int
	// Role is the node's part in its fusion group ("prologue", "main",
	// "epilogue"); empty when Kernel is 0.
	Role string
}

// Int returns the int attribute name; it panics (a broken invariant after
// Verify) when absent or of another kind.
func (n *Node) Int(name string) int { return attr[int](n, name) }

// Float returns the float attribute name.
func (n *Node) Float(name string) float64 { return attr[float64](n, name) }

// Str returns the string attribute name.
func (n *Node) Str(name string) string { return attr[string](n, name) }

// Bool returns the bool attribute name.
func (n *Node) Bool(name string) bool { return attr[bool](n, name) }

func attr[V any](n *Node, name string) V {
	v, ok := n.Attrs[name].(V)
	if !ok {
		panic(fmt.Sprintf("BUG: node %%%d (%v) has no %T attribute %q", n.ID, n.Op, v, name))
	}
	return v
}

// Arg returns operand i, or nil when an optional operand is absent.
func (n *Node) Arg(i int) *Node {
	if i < len(n.Args) {
		return n.Args[i]
	}
	return nil
}

// Graph is one forward step of a model.
type Graph struct {
	Arch string // architecture family ("llama", "qwen2", …)
	Name string // model name, for the text form
	// Consts are the model's named static dimensions (embd, heads, …),
	// printed in the text form's header.
	Consts map[string]int
	Nodes  []*Node
	err    error // first construction error
}

// NewGraph returns an empty graph for the given family and model name.
func NewGraph(arch, name string) *Graph {
	return &Graph{Arch: arch, Name: name, Consts: map[string]int{}}
}

// Err returns the first error met while adding nodes, if any.
func (g *Graph) Err() error { return g.err }

// Add appends a node applying op to args with attrs, inferring its type and
// shape from the op's rules. A rule failure is remembered (see Err) and the
// node is still returned, so builders can check once at the end.
func (g *Graph) Add(op Op, attrs Attrs, args ...*Node) *Node {
	if attrs == nil {
		attrs = Attrs{}
	}
	n := &Node{ID: len(g.Nodes), Op: op, Args: args, Attrs: attrs}
	g.Nodes = append(g.Nodes, n)
	if g.err != nil {
		return n
	}
	if err := checkNode(n); err != nil {
		g.err = err
		return n
	}
	t, s, err := infer(n)
	if err != nil {
		g.err = err
		return n
	}
	n.Type, n.Shape = t, s
	return n
}

// Weight appends a Weight node for the named tensor of type t and GGUF ne
// order dims (ne[0] contiguous).
func (g *Graph) Weight(name string, t dtype.Type, ne []int) *Node {
	return g.Add(OpWeight, Attrs{"name": name, "type": t, "ne": append([]int(nil), ne...)})
}

// Output returns the graph's Output node, or nil.
func (g *Graph) Output() *Node {
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		if g.Nodes[i].Op == OpOutput {
			return g.Nodes[i]
		}
	}
	return nil
}

// Users returns, for every node ID, the nodes that take it as an operand.
func (g *Graph) Users() [][]*Node {
	u := make([][]*Node, len(g.Nodes))
	for _, n := range g.Nodes {
		for _, a := range n.Args {
			if a != nil && a.ID < len(u) {
				u[a.ID] = append(u[a.ID], n)
			}
		}
	}
	return u
}

// Weights returns the tensor names the graph reads, sorted.
func (g *Graph) Weights() []string {
	var names []string
	for _, n := range g.Nodes {
		if n.Op == OpWeight {
			names = append(names, n.Str("name"))
		}
	}
	sort.Strings(names)
	return names
}

// Renumber sets every node's ID to its index in Nodes.
func (g *Graph) Renumber() {
	for i, n := range g.Nodes {
		n.ID = i
	}
}

// Ints returns the []int attribute name.
func (n *Node) Ints(name string) []int { return attr[[]int](n, name) }

// DType returns the dtype.Type attribute name.
func (n *Node) DType(name string) dtype.Type { return attr[dtype.Type](n, name) }

// Result returns the graph's last node when it is in the output group (the
// logits' output, or hidden_out for a pipeline stage), or nil.
func (g *Graph) Result() *Node {
	if len(g.Nodes) == 0 || g.Nodes[len(g.Nodes)-1].Op.Group() != GroupOutput {
		return nil
	}
	return g.Nodes[len(g.Nodes)-1]
}

// Node returns the first node applying op, or nil.
func (g *Graph) Node(op Op) *Node {
	for _, n := range g.Nodes {
		if n.Op == op {
			return n
		}
	}
	return nil
}

// CacheLayers returns the layers whose KV cache the graph writes (the layer
// attribute of its kv_write nodes), in graph order: [0, layers) for a whole
// model, the stage's range for a pipeline stage.
func (g *Graph) CacheLayers() []int {
	var ls []int
	for _, n := range g.Nodes {
		if n.Op == OpKVWrite {
			ls = append(ls, n.Int("layer"))
		}
	}
	return ls
}
