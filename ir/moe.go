package ir

// Shape rules of the mixture-of-experts ops (rows in ops.go).

// routed checks a [T,k] operand (router ids or weights) beside x of outer
// axis outer.
func routed(n *Node, role string, v *Node, outer Dim) error {
	if len(v.Shape) != 2 || v.Shape[0] != outer || v.Shape[1].Symbolic() || v.Shape[1] <= 0 {
		return ruleErr(n, "%s has shape %v, want [%v,k]", role, v.Shape, outer)
	}
	return nil
}

func shapeTopK(n *Node) (Shape, error) {
	x := n.Args[0]
	if len(x.Shape) != 2 || x.Shape[1].Symbolic() {
		return nil, ruleErr(n, "x has shape %v, want [T,N]", x.Shape)
	}
	if k := n.Int("k"); k <= 0 || Dim(k) > x.Shape[1] {
		return nil, ruleErr(n, "k %d must be in (0,%v]", k, x.Shape[1])
	}
	return Shape{x.Shape[0], Dim(n.Int("k"))}, nil
}

func shapeMoEWeights(n *Node) (Shape, error) {
	logits, ids := n.Args[0], n.Args[1]
	if len(logits.Shape) != 2 || logits.Shape[1].Symbolic() {
		return nil, ruleErr(n, "logits have shape %v, want [T,N]", logits.Shape)
	}
	if err := routed(n, "ids", ids, logits.Shape[0]); err != nil {
		return nil, err
	}
	if ids.Shape[1] > logits.Shape[1] {
		return nil, ruleErr(n, "%v experts chosen of %v", ids.Shape[1], logits.Shape[1])
	}
	return ids.Shape, nil
}

func shapeMoEMatmul(n *Node) (Shape, error) {
	x, w, ids := n.Args[0], n.Args[1], n.Args[2]
	if len(w.Shape) != 3 {
		return nil, ruleErr(n, "weight %q has shape %v, want [E,N,K]", w.Str("name"), w.Shape)
	}
	if len(x.Shape) < 2 {
		return nil, ruleErr(n, "x has shape %v, want [T,K] or [T,k,K]", x.Shape)
	}
	if err := routed(n, "ids", ids, x.Shape[0]); err != nil {
		return nil, err
	}
	k := ids.Shape[1]
	switch {
	case len(x.Shape) == 2:
	case len(x.Shape) == 3 && x.Shape[1] == k:
	default:
		return nil, ruleErr(n, "x has shape %v, want [%v,K] or [%v,%v,K]", x.Shape, x.Shape[0], x.Shape[0], k)
	}
	if x.Shape.Last() != w.Shape[2] {
		return nil, ruleErr(n, "weight %q has rows of %v, x has %v columns", w.Str("name"), w.Shape[2], x.Shape.Last())
	}
	return Shape{x.Shape[0], k, w.Shape[1]}, nil
}

func shapeMoESum(n *Node) (Shape, error) {
	x, w := n.Args[0], n.Args[1]
	if len(x.Shape) != 3 || x.Shape[1].Symbolic() || x.Shape[2].Symbolic() {
		return nil, ruleErr(n, "x has shape %v, want [T,k,N]", x.Shape)
	}
	if err := routed(n, "w", w, x.Shape[0]); err != nil {
		return nil, err
	}
	if w.Shape[1] != x.Shape[1] {
		return nil, ruleErr(n, "w has %v weights a token, x %v experts", w.Shape[1], x.Shape[1])
	}
	return Shape{x.Shape[0], x.Shape[2]}, nil
}
