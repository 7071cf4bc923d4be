package ir

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// Group is a kind of op. Passes and backends ask an op's group instead of
// listing ops.
type Group int

// The op groups.
const (
	GroupNone     Group = iota // only OpInvalid
	GroupLeaf                  // step inputs and weights: no operands
	GroupMovement              // gathers, reshapes: move data, no arithmetic
	GroupUnary                 // elementwise, one operand
	GroupBinary                // elementwise, two operands (maybe broadcast)
	GroupReduce                // reductions over the innermost axis (norms)
	GroupMatmul                // products with a weight matrix
	GroupModel                 // transformer-specific ops (RoPE, KV cache, attention)
	GroupOutput                // the graph's result
)

var groupNames = [...]string{"none", "leaf", "movement", "unary", "binary", "reduce", "matmul", "model", "output"}

// String returns the group's lower-case name.
func (g Group) String() string {
	if int(g) < len(groupNames) {
		return groupNames[g]
	}
	return fmt.Sprintf("group(%d)", int(g))
}

// ArgKind says what an operand must be.
type ArgKind int

// The operand kinds.
const (
	ArgF32    ArgKind = iota // an F32 activation (not a weight)
	ArgI32                   // an I32 value (tokens, positions)
	ArgWeight                // a weight node, of the dtypes the op accepts
	ArgCache                 // a kv_write node's handle
)

// Operand declares one operand of an op: its role name, kind and whether it
// may be absent (optional operands come last).
type Operand struct {
	Role     string
	Kind     ArgKind
	Optional bool
}

// AttrKind is the Go type of an attribute value.
type AttrKind int

// The attribute kinds.
const (
	AttrInt    AttrKind = iota // int
	AttrFloat                  // float64
	AttrString                 // string
	AttrBool                   // bool
	AttrInts                   // []int
	AttrDType                  // dtype.Type
)

// AttrSpec declares one attribute: its name and kind. Every declared
// attribute is required.
type AttrSpec struct {
	Name string
	Kind AttrKind
}

// opDef is one row of the op table.
type opDef struct {
	Name   string     // spelling in the text form; opgen derives the Go name
	Group  Group      // kind of op
	Args   []Operand  // operands, in order
	Attrs  []AttrSpec // attributes, in text-form order
	Effect bool       // has an effect beyond its value (DCE keeps it)
	Shape  func(n *Node) (Shape, error)
	Type   func(n *Node) (dtype.Type, error)
	Doc    string // exact semantics

	// Opt are optional attributes: a node may leave one out, and the op's
	// Doc says what its absence means. The text form prints those present,
	// after Attrs, so graphs that do not use them print as before.
	Opt []AttrSpec
}

// Group returns the op's group.
func (o Op) Group() Group { return o.def().Group }

// Operands returns the op's declared operands.
func (o Op) Operands() []Operand { return o.def().Args }

// AttrSpecs returns the op's declared attributes.
func (o Op) AttrSpecs() []AttrSpec { return o.def().Attrs }

// OptAttrSpecs returns the op's optional attributes.
func (o Op) OptAttrSpecs() []AttrSpec { return o.def().Opt }

// HasEffect reports whether the op does more than define its value.
func (o Op) HasEffect() bool { return o.def().Effect }

// Doc returns the op's exact semantics.
func (o Op) Doc() string { return o.def().Doc }

// Elementwise reports whether the op is in the unary or binary group.
func (o Op) Elementwise() bool { g := o.Group(); return g == GroupUnary || g == GroupBinary }

func (o Op) def() *opDef {
	if int(o) >= len(opTable) {
		panic(fmt.Sprintf("BUG: op %d has no row in the op table", int(o)))
	}
	return &opTable[o]
}

// ruleErr builds a rule violation naming the node.
func ruleErr(n *Node, format string, args ...any) error {
	return fmt.Errorf("%w: %%%d %v: %s", ErrShape, n.ID, n.Op, fmt.Sprintf(format, args...))
}

// checkNode checks operand count and kinds and attribute presence and kinds.
func checkNode(n *Node) error {
	if n.Op == OpInvalid || int(n.Op) >= len(opTable) {
		return ruleErr(n, "invalid op")
	}
	d := n.Op.def()
	min := 0
	for _, a := range d.Args {
		if !a.Optional {
			min++
		}
	}
	if len(n.Args) < min || len(n.Args) > len(d.Args) {
		return ruleErr(n, "has %d operands, want %d..%d", len(n.Args), min, len(d.Args))
	}
	for i, a := range n.Args {
		spec := d.Args[i]
		if a == nil {
			return ruleErr(n, "operand %s is nil", spec.Role)
		}
		switch spec.Kind {
		case ArgF32:
			if a.Op == OpWeight || a.Type != dtype.F32 {
				return ruleErr(n, "operand %s (%%%d) must be an F32 activation, is %v %v", spec.Role, a.ID, a.Op, a.Type)
			}
		case ArgI32:
			if a.Type != dtype.I32 {
				return ruleErr(n, "operand %s (%%%d) must be I32, is %v", spec.Role, a.ID, a.Type)
			}
		case ArgWeight:
			if a.Op != OpWeight {
				return ruleErr(n, "operand %s (%%%d) must be a weight, is %v", spec.Role, a.ID, a.Op)
			}
		case ArgCache:
			if a.Op != OpKVWrite {
				return ruleErr(n, "operand %s (%%%d) must be a kv_write, is %v", spec.Role, a.ID, a.Op)
			}
		}
	}
	for _, s := range d.Attrs {
		v, ok := n.Attrs[s.Name]
		if !ok {
			return ruleErr(n, "missing attribute %s", s.Name)
		}
		if !s.Kind.holds(v) {
			return ruleErr(n, "attribute %s has kind %T", s.Name, v)
		}
	}
	present := len(d.Attrs)
	for _, s := range d.Opt {
		if v, ok := n.Attrs[s.Name]; ok {
			present++
			if !s.Kind.holds(v) {
				return ruleErr(n, "attribute %s has kind %T", s.Name, v)
			}
		}
	}
	if len(n.Attrs) != present {
		for k := range n.Attrs {
			found := false
			for _, s := range append(d.Attrs[:len(d.Attrs):len(d.Attrs)], d.Opt...) {
				found = found || s.Name == k
			}
			if !found {
				return ruleErr(n, "unknown attribute %s", k)
			}
		}
	}
	return nil
}

// holds reports whether v is a value of kind k.
func (k AttrKind) holds(v any) bool {
	ok := false
	switch k {
	case AttrInt:
		_, ok = v.(int)
	case AttrFloat:
		_, ok = v.(float64)
	case AttrString:
		_, ok = v.(string)
	case AttrBool:
		_, ok = v.(bool)
	case AttrInts:
		_, ok = v.([]int)
	case AttrDType:
		_, ok = v.(dtype.Type)
	}
	return ok
}

// infer applies the op's type and shape rules.
func infer(n *Node) (dtype.Type, Shape, error) {
	d := n.Op.def()
	t, err := d.Type(n)
	if err != nil {
		return 0, nil, err
	}
	s, err := d.Shape(n)
	if err != nil {
		return 0, nil, err
	}
	return t, s, nil
}

// --- type rules ---

func typeIs(t dtype.Type) func(*Node) (dtype.Type, error) {
	return func(*Node) (dtype.Type, error) { return t, nil }
}

var (
	typeF32 = typeIs(dtype.F32)
	typeI32 = typeIs(dtype.I32)
)

func typeWeight(n *Node) (dtype.Type, error) {
	t := n.DType("type")
	if !t.Known() {
		return 0, ruleErr(n, "tensor %q has unknown type %v", n.Str("name"), t)
	}
	return t, nil
}

// --- shape rules ---

func shapeOf(dims ...Dim) func(*Node) (Shape, error) {
	return func(*Node) (Shape, error) { return Shape(dims), nil }
}

func shapeWeight(n *Node) (Shape, error) {
	ne := n.Ints("ne")
	if len(ne) == 0 || len(ne) > 4 {
		return nil, ruleErr(n, "tensor %q has %d dims", n.Str("name"), len(ne))
	}
	s := make(Shape, len(ne))
	for i, d := range ne {
		if d <= 0 {
			return nil, ruleErr(n, "tensor %q has dim %d", n.Str("name"), d)
		}
		s[len(ne)-1-i] = Dim(d)
	}
	if _, err := n.DType("type").RowBytes(ne[0]); err != nil {
		return nil, ruleErr(n, "tensor %q: %v", n.Str("name"), err)
	}
	return s, nil
}

// floatVector checks that w is a 1-D weight of length d with a float dtype.
func floatVector(n *Node, w *Node, d Dim) error {
	if len(w.Shape) != 1 || w.Shape[0] != d {
		return ruleErr(n, "weight %q has shape %v, want [%v]", w.Str("name"), w.Shape, d)
	}
	switch w.Type {
	case dtype.F32, dtype.F16, dtype.BF16:
		return nil
	}
	return ruleErr(n, "weight %q has type %v, want F32, F16 or BF16", w.Str("name"), w.Type)
}

func shapeEmbed(n *Node) (Shape, error) {
	tab, ids := n.Args[0], n.Args[1]
	if len(tab.Shape) != 2 {
		return nil, ruleErr(n, "table %q has shape %v, want [V,E]", tab.Str("name"), tab.Shape)
	}
	if len(ids.Shape) != 1 {
		return nil, ruleErr(n, "ids have shape %v, want [T]", ids.Shape)
	}
	return Shape{ids.Shape[0], tab.Shape[1]}, nil
}

func shapeReshape(n *Node) (Shape, error) {
	x, dims := n.Args[0], n.Ints("dims")
	if len(x.Shape) < 1 || len(dims) == 0 {
		return nil, ruleErr(n, "cannot reshape %v to inner dims %v", x.Shape, dims)
	}
	in, out := 1, 1
	for _, d := range x.Shape[1:] {
		if d.Symbolic() {
			return nil, ruleErr(n, "inner axes of %v are not static", x.Shape)
		}
		in *= int(d)
	}
	s := Shape{x.Shape[0]}
	for _, d := range dims {
		if d <= 0 {
			return nil, ruleErr(n, "dims %v must be positive", dims)
		}
		out *= d
		s = append(s, Dim(d))
	}
	if in != out {
		return nil, ruleErr(n, "inner axes of %v hold %d elements, dims %v hold %d", x.Shape, in, dims, out)
	}
	return s, nil
}

func shapeLastTokens(n *Node) (Shape, error) {
	x := n.Args[0]
	if len(x.Shape) != 2 || x.Shape[0] != T {
		return nil, ruleErr(n, "x has shape %v, want [T,E]", x.Shape)
	}
	return Shape{S, x.Shape[1]}, nil
}

func shapeSame(n *Node) (Shape, error) { return n.Args[0].Shape, nil }

func shapeSameBinary(n *Node) (Shape, error) {
	x, y := n.Args[0], n.Args[1]
	if !x.Shape.Equal(y.Shape) {
		return nil, ruleErr(n, "operand shapes differ: %v and %v", x.Shape, y.Shape)
	}
	return x.Shape, nil
}

func shapeBias(n *Node) (Shape, error) {
	x, b := n.Args[0], n.Args[1]
	if len(x.Shape) != 2 {
		return nil, ruleErr(n, "x has shape %v, want [T,N]", x.Shape)
	}
	if err := floatVector(n, b, x.Shape[1]); err != nil {
		return nil, err
	}
	return x.Shape, nil
}

func shapeNorm(n *Node) (Shape, error) {
	x, w := n.Args[0], n.Args[1]
	if len(x.Shape) < 1 || x.Shape.Last().Symbolic() {
		return nil, ruleErr(n, "x has shape %v, want a static innermost axis", x.Shape)
	}
	if err := floatVector(n, w, x.Shape.Last()); err != nil {
		return nil, err
	}
	if n.Float("eps") <= 0 {
		return nil, ruleErr(n, "eps %g must be positive", n.Float("eps"))
	}
	return x.Shape, nil
}

func shapeMatmul(n *Node) (Shape, error) {
	x, w := n.Args[0], n.Args[1]
	if len(x.Shape) != 2 {
		return nil, ruleErr(n, "x has shape %v, want [T,K]", x.Shape)
	}
	if len(w.Shape) != 2 {
		return nil, ruleErr(n, "weight %q has shape %v, want [N,K]", w.Str("name"), w.Shape)
	}
	if w.Shape[1] != x.Shape[1] {
		return nil, ruleErr(n, "weight %q has rows of %v, x has %v columns", w.Str("name"), w.Shape[1], x.Shape[1])
	}
	return Shape{x.Shape[0], w.Shape[0]}, nil
}

// heads3 checks a [T,H,D] activation.
func heads3(n *Node, role string, x *Node) error {
	if len(x.Shape) != 3 || x.Shape[0] != T || x.Shape[1].Symbolic() || x.Shape[2].Symbolic() {
		return ruleErr(n, "%s has shape %v, want [T,H,D]", role, x.Shape)
	}
	return nil
}

func shapeRope(n *Node) (Shape, error) {
	x := n.Args[0]
	if err := heads3(n, "x", x); err != nil {
		return nil, err
	}
	if p := n.Args[1].Shape; len(p) != 1 || p[0] != T {
		return nil, ruleErr(n, "pos has shape %v, want [T]", p)
	}
	dims := n.Int("dims")
	if dims <= 0 || dims%2 != 0 || Dim(dims) > x.Shape[2] {
		return nil, ruleErr(n, "dims %d must be even and in (0,%v]", dims, x.Shape[2])
	}
	if st := n.Str("style"); st != RopeInterleaved.String() && st != RopeHalf.String() {
		return nil, ruleErr(n, "style %q is not interleaved or half", st)
	}
	if n.Float("base") <= 0 {
		return nil, ruleErr(n, "base %g must be positive", n.Float("base"))
	}
	switch sc := n.Str("scaling"); sc {
	case "none":
	case "linear":
		if n.Float("factor") <= 0 {
			return nil, ruleErr(n, "linear scaling factor %g must be positive", n.Float("factor"))
		}
	case "llama3", "yarn":
		if n.Float("factor") <= 0 || n.Int("orig_ctx") <= 0 || n.Float("high_freq") <= n.Float("low_freq") || n.Float("low_freq") <= 0 {
			return nil, ruleErr(n, "%s scaling needs factor > 0, orig_ctx > 0 and 0 < low_freq < high_freq", sc)
		}
	default:
		return nil, ruleErr(n, "scaling %q is not none, linear, llama3 or yarn", sc)
	}
	if f := n.Arg(2); f != nil {
		if sc := n.Str("scaling"); sc == "llama3" || sc == "yarn" {
			return nil, ruleErr(n, "freq_factors and %s scaling both given", sc)
		}
		if err := floatVector(n, f, Dim(dims/2)); err != nil {
			return nil, err
		}
	}
	return x.Shape, nil
}

func shapeKVWrite(n *Node) (Shape, error) {
	k, v := n.Args[0], n.Args[1]
	if err := heads3(n, "k", k); err != nil {
		return nil, err
	}
	if !k.Shape.Equal(v.Shape) {
		return nil, ruleErr(n, "k %v and v %v differ", k.Shape, v.Shape)
	}
	if n.Int("layer") < 0 {
		return nil, ruleErr(n, "layer %d is negative", n.Int("layer"))
	}
	return Shape{}, nil
}

func shapeAttention(n *Node) (Shape, error) {
	q, c := n.Args[0], n.Args[1]
	if err := heads3(n, "q", q); err != nil {
		return nil, err
	}
	k := c.Args[0].Shape
	if k[2] != q.Shape[2] {
		return nil, ruleErr(n, "q head size %v differs from the cache's %v", q.Shape[2], k[2])
	}
	if q.Shape[1]%k[1] != 0 {
		return nil, ruleErr(n, "%v query heads are not a multiple of %v KV heads", q.Shape[1], k[1])
	}
	if n.Float("scale") <= 0 {
		return nil, ruleErr(n, "scale %g must be positive", n.Float("scale"))
	}
	if c := AttnSoftcap(n); !(c >= 0) || math.IsInf(c, 0) {
		return nil, ruleErr(n, "softcap %g must be a finite number ≥ 0", c)
	}
	if w := AttnWindow(n); w < 0 || (w > 0 && !n.Bool("causal")) {
		return nil, ruleErr(n, "window %d must be ≥ 0, and only causal attention has one", w)
	}
	return q.Shape, nil
}

func shapeScale(n *Node) (Shape, error) {
	if f := n.Float("factor"); math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, ruleErr(n, "factor %g must be finite", f)
	}
	return n.Args[0].Shape, nil
}

func shapeSoftcap(n *Node) (Shape, error) {
	if c := n.Float("cap"); !(c > 0) || math.IsInf(c, 0) {
		return nil, ruleErr(n, "cap %g must be a finite positive number", c)
	}
	return n.Args[0].Shape, nil
}

func shapeOutput(n *Node) (Shape, error) {
	x := n.Args[0]
	if len(x.Shape) != 2 || x.Shape[0] != S {
		return nil, ruleErr(n, "logits have shape %v, want [S,V]", x.Shape)
	}
	return x.Shape, nil
}

func shapeHiddenIn(n *Node) (Shape, error) {
	if n.Int("dim") <= 0 {
		return nil, ruleErr(n, "dim %d must be positive", n.Int("dim"))
	}
	return Shape{T, Dim(n.Int("dim"))}, nil
}

func shapeHiddenOut(n *Node) (Shape, error) {
	x := n.Args[0]
	if len(x.Shape) != 2 || x.Shape[0] != T || x.Shape[1].Symbolic() {
		return nil, ruleErr(n, "x has shape %v, want [T,E]", x.Shape)
	}
	return x.Shape, nil
}

func itoa(i int) string { return fmt.Sprint(i) }
