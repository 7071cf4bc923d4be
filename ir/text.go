package ir

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// String returns the graph's text form: a header naming the family, the
// model and its constant dimensions, then one line per node
//
//	%5 = rms_norm %3, %4 eps=1e-05 : F32[T,64]  ; k1 prologue
//
// with operands, attributes in op-table order, the value's type and shape,
// and the fusion group when the node has one. The form is stable: the same
// graph always prints the same text.
func (g *Graph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "graph %s %q\n", g.Arch, g.Name)
	keys := make([]string, 0, len(g.Consts))
	for k := range g.Consts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		b.WriteString("const")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, g.Consts[k])
		}
		b.WriteByte('\n')
	}
	for _, n := range g.Nodes {
		b.WriteString(n.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// String returns the node's line of the text form.
func (n *Node) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%%%d = %v", n.ID, n.Op)
	for i, a := range n.Args {
		if i == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%%%d", a.ID)
	}
	if int(n.Op) < len(opTable) {
		for _, s := range n.Op.AttrSpecs() {
			fmt.Fprintf(&b, " %s=%s", s.Name, formatAttr(n.Attrs[s.Name]))
		}
		for _, s := range n.Op.OptAttrSpecs() {
			if v, ok := n.Attrs[s.Name]; ok {
				fmt.Fprintf(&b, " %s=%s", s.Name, formatAttr(v))
			}
		}
	}
	fmt.Fprintf(&b, " : %v%v", n.Type, n.Shape)
	if n.Kernel != 0 {
		fmt.Fprintf(&b, "  ; k%d %s", n.Kernel, n.Role)
	}
	return b.String()
}

func formatAttr(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case []int:
		parts := make([]string, len(v))
		for i, d := range v {
			parts[i] = strconv.Itoa(d)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case dtype.Type:
		return v.String()
	case nil:
		return "<missing>"
	}
	return fmt.Sprint(v)
}
