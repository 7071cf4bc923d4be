package codegen

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/ir"
)

// Lowering of the per-head q/k norms (qwen3, Gemma 3): one HeadRMSNorm
// launch for a layer's two, or, in fusing decode programs, none: the
// layer's RoPE launch normalises q and k before it rotates them
// (RopeKVNorm, lowered by ropeKV).

// headNorm lowers an rms_norm outside a fusion group: the per-head q/k
// norm, in place inside the fused QKV row. A layer's k norm, whose heads
// follow q's in the same rows, runs in the same launch (headNormPartner).
func (l *lowerer) headNorm(n *ir.Node) error {
	x, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	if len(n.Shape) != 3 {
		return fmt.Errorf("rms_norm of shape %v outside a product prologue", n.Shape)
	}
	if err := l.inPlace(n); err != nil {
		return err
	}
	heads, hd := int(n.Shape[1]), int(n.Shape[2])
	s := HeadNormShape{Heads: heads, HeadDim: hd, Offset: x.off, Stride: x.stride, Eps: float32(n.Float("eps"))}
	args := []Arg{bufArg(view{buf: x.buf, stride: x.stride}), wArg(l.vectorOf(n.Args[1]))}
	nodes := []int{n.ID}
	m := l.headNormPartner(n, x)
	if m != nil {
		s.Heads2 = int(m.Shape[1])
		args = append(args, wArg(l.vectorOf(m.Args[1])))
		nodes = append(nodes, m.ID)
		l.val[m.ID] = l.val[m.Args[0].ID]
		l.done[m.ID] = true
	}
	l.val[n.ID] = x
	// (headNormPartner gave m n's eps)
	if qr, kr := l.ropeAfter(n), l.ropeAfter(m); l.fusing() && m != nil && qr != nil && kr != nil {
		// the layer's RoPE launch normalises q and k before it rotates them
		l.ropeNorms[qr.ID] = ropeNorm{shape: s, args: args, nodes: nodes}
		return nil
	}
	return l.launchHeadNorm(ropeNorm{shape: s, args: args, nodes: nodes}, n.Shape[0])
}

// ropeNorm is a layer's q/k head norms as one HeadRMSNorm launch would run
// them: its shape, its arguments before the rows and its IR nodes.
type ropeNorm struct {
	shape HeadNormShape
	args  []Arg
	nodes []int
}

// launchHeadNorm launches the HeadRMSNorm of hn over rows.
func (l *lowerer) launchHeadNorm(hn ropeNorm, rows ir.Dim) error {
	k, err := l.kernel(HeadRMSNorm(hn.shape, l.arms.Block))
	if err != nil {
		return err
	}
	l.launch(k, rows, hn.nodes, append(slices.Clone(hn.args), rowsArg())...)
	return nil
}

// ropeAfter returns the RoPE node that is head norm n's only user (nil
// when n is nil or has other users).
func (l *lowerer) ropeAfter(n *ir.Node) *ir.Node {
	if n == nil || len(l.users[n.ID]) != 1 {
		return nil
	}
	if r := l.users[n.ID][0]; r.Op == ir.OpRope && r.Args[0] == n {
		return r
	}
	return nil
}

// inPlace checks that the head norm n may overwrite its operand: each
// value from n's input back through its reshapes has n's chain as its only
// user.
func (l *lowerer) inPlace(n *ir.Node) error {
	for src := n.Args[0]; ; src = src.Args[0] {
		if len(l.users[src.ID]) != 1 {
			return fmt.Errorf("in-place head norm: %%%d has %d users", src.ID, len(l.users[src.ID]))
		}
		if src.Op != ir.OpReshape {
			return nil
		}
	}
}

// headNormPartner returns the head norm still to lower whose heads lie
// right after those of n (value x) in the same rows, with n's head size,
// token count and eps: a layer's k norm for its q norm. Its operand is
// lowered already (part of the same QKV product); nothing else reads it
// (inPlace), so normalising it early changes no reader.
func (l *lowerer) headNormPartner(n *ir.Node, x view) *ir.Node {
	heads, hd := int(n.Shape[1]), int(n.Shape[2])
	for _, m := range l.g.Nodes {
		if m.ID <= n.ID || l.done[m.ID] || m.Op != ir.OpRMSNorm || m.Role == "prologue" || len(m.Shape) != 3 {
			continue
		}
		y, ok := l.val[m.Args[0].ID]
		if !ok || y.buf != x.buf || y.stride != x.stride || y.off != x.off+heads*hd {
			continue
		}
		if m.Shape[0] != n.Shape[0] || int(m.Shape[2]) != hd || m.Float("eps") != n.Float("eps") {
			continue
		}
		if l.inPlace(m) != nil {
			continue
		}
		return m
	}
	return nil
}
