package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir"
)

// Lowering of the ops Gemma brought and of its post-norms.

// rowValue returns the contiguous rows of node n's operand i.
func (l *lowerer) rowValue(n *ir.Node, i int) (view, error) {
	x, err := l.valueOf(n.Args[i])
	if err != nil {
		return x, err
	}
	if !x.contiguous() || len(n.Shape) != 2 {
		return x, fmt.Errorf("%v of a strided value or of shape %v", n.Op, n.Shape)
	}
	return x, nil
}

// elementwiseOp lowers a scale or softcap node: the kernel k over its
// operand's rows into a new buffer.
func (l *lowerer) elementwiseOp(n *ir.Node, name string, k *Kernel, err error) error {
	x, verr := l.rowValue(n, 0)
	if verr != nil {
		return verr
	}
	kern, err := l.kernel(k, err)
	if err != nil {
		return err
	}
	y := view{buf: l.buffer(name, n.Shape[0], x.width), width: x.width, stride: x.width}
	l.launch(kern, n.Shape[0], []int{n.ID}, bufArg(x), bufArg(y), rowsArg())
	l.val[n.ID] = y
	return nil
}

// scaleOp lowers a scale node (the embeddings times √dim).
func (l *lowerer) scaleOp(n *ir.Node) error {
	k, err := Scale(int(n.Shape.Last()), float32(n.Float("factor")), l.arms.Block)
	return l.elementwiseOp(n, "x", k, err)
}

// softcapOp lowers a softcap node (the final logits).
func (l *lowerer) softcapOp(n *ir.Node) error {
	k, err := Softcap(int(n.Shape.Last()), float32(n.Float("cap")), l.arms.Block)
	return l.elementwiseOp(n, "capped", k, err)
}

// geglu lowers a geglu node over the halves of one fused gate/up row.
func (l *lowerer) geglu(n *ir.Node) error {
	g, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	u, err := l.valueOf(n.Args[1])
	if err != nil {
		return err
	}
	w := g.width
	if g.buf != u.buf || g.off != 0 || u.off != w || u.width != w || g.stride != 2*w {
		return fmt.Errorf("geglu operands are not the halves of one fused gate/up row")
	}
	k, err := l.kernel(GeGLU(w, l.arms.Block))
	if err != nil {
		return err
	}
	y := view{buf: l.buffer("ffn", n.Shape[0], w), width: w, stride: w}
	l.launch(k, n.Shape[0], []int{n.ID}, bufArg(view{buf: g.buf, stride: g.stride}), bufArg(y), rowsArg())
	l.val[n.ID] = y
	return nil
}

// postNormAdd returns the residual add that is the only user of rms_norm
// n when n is a post-norm (outside a fusion group, over [rows, E]), else
// nil.
func (l *lowerer) postNormAdd(n *ir.Node) *ir.Node {
	if n.Role != "" || len(n.Shape) != 2 || len(l.users[n.ID]) != 1 {
		return nil
	}
	if u := l.users[n.ID][0]; u.Op == ir.OpAdd && u.Kernel == 0 {
		return u
	}
	return nil
}

// postNorm lowers a post-norm and its residual add into one PostNormAdd
// launch that adds the normalised rows into the residual stream's buffer,
// which must die at the add. Where the norm after the add feeds XQ 2
// products (nextNormXQ, as for a residual product's QuantOut epilogue), the
// launch also quantises the new rows for them (PostNormAddQuant), and
// their XQuant launch is not needed.
func (l *lowerer) postNorm(n *ir.Node) error {
	add := l.postNormAdd(n)
	h, err := l.rowValue(n, 0)
	if err != nil {
		return err
	}
	y, err := l.inPlaceResidual(add, n, h.width)
	if err != nil {
		return err
	}
	eps := float32(n.Float("eps"))
	args := []Arg{bufArg(y), bufArg(h), wArg(l.vectorOf(n.Args[1]))}
	k := -1
	if na := l.nextNormXQ(add, h.width); na != nil {
		if ok, err := l.postNormInProduct(n, add, h, y, eps, na); err != nil || ok {
			return err
		}
		if kq, qerr := l.kernel(PostNormAddQuant(h.width, eps, l.arms.Block)); qerr == nil {
			width := XQRowBytes(h.width) / 4
			xq := view{buf: l.buffer("xq", n.Shape[0], width), width: width, stride: width}
			l.preQuant[xqKey{x: y, pro: ProNorm, nw: na.nw}] = preQuant{xq: xq, launch: len(l.p.Launches), nodes: na.nodes}
			k, args = kq, append(args, wArg(na.nw), bufArg(xq))
		}
	}
	if k < 0 {
		if k, err = l.kernel(PostNormAdd(h.width, eps, l.arms.Block)); err != nil {
			return err
		}
	}
	l.launch(k, n.Shape[0], []int{n.ID, add.ID}, append(args, rowsArg())...)
	l.val[add.ID] = y
	l.done[add.ID] = true
	return nil
}
