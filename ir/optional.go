package ir

// FloatOr returns the float attribute name, or def when the node leaves
// that optional attribute out.
func (n *Node) FloatOr(name string, def float64) float64 {
	if _, ok := n.Attrs[name]; !ok {
		return def
	}
	return n.Float(name)
}

// IntOr returns the int attribute name, or def when the node leaves that
// optional attribute out.
func (n *Node) IntOr(name string, def int) int {
	if _, ok := n.Attrs[name]; !ok {
		return def
	}
	return n.Int(name)
}

// AttnSoftcap is an attention node's score soft-cap (its optional softcap
// attribute; 0: none).
func AttnSoftcap(n *Node) float64 { return n.FloatOr("softcap", 0) }

// AttnWindow is an attention node's sliding window (its optional window
// attribute; 0: every earlier position).
func AttnWindow(n *Node) int { return n.IntOr("window", 0) }
